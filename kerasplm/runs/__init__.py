"""Run directories (ground floor): one format for every model family, one loader.

See :mod:`kerasplm.runs.run_dir` for the layout of a run directory. Imported on first use, so that
``kerasplm.runs.manifest`` (``kerasplm convert run``) is read without TensorFlow.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "run_dir": ["FORMAT_VERSION", "RunDir", "RunDirError", "RunInfo", "attach_run_info", "load_run"],
    "serialization": ["attach_preprocessor", "serializable"],
})
