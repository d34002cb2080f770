"""Run directories (ground floor): one format for every model family, one loader.

See :mod:`kerasplm.runs.run_dir` for the layout of a run directory.
"""
from kerasplm.runs.run_dir import FORMAT_VERSION, RunDir, RunDirError, RunInfo, attach_run_info, load_run
from kerasplm.runs.serialization import attach_preprocessor, serializable

__all__ = ["FORMAT_VERSION", "RunDir", "RunDirError", "RunInfo", "attach_preprocessor", "attach_run_info", "load_run",
           "serializable"]
