"""Run directories (ground floor): one format for every model family, one loader.

See :mod:`kerasplm.runs.run_dir` for the layout of a run directory.
"""
from kerasplm.runs.run_dir import FORMAT_VERSION, RunDir, RunDirError, load_run

__all__ = ["FORMAT_VERSION", "RunDir", "RunDirError", "load_run"]
