"""Builders of the runs written before run format 3 (one module per family; see :mod:`kerasplm.convert.runs`).

Each module declares ``BUILDERS = {run family: build(run, config) -> (model, preprocessor)}``: the task model and
preprocessor a format-2 ``config.json`` describes (its family-specific ``model`` section and assets), built without
weights. The checkpoint layout of every family is unchanged, so the converted run restores the same checkpoint.
This is the only code that still reads the old ``model`` sections.
"""
