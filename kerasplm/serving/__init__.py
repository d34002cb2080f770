"""``kerasplm serve``: a local server speaking TensorFlow Serving's REST API for kerasplm's exports.

It serves the SavedModels that :mod:`kerasplm.export` writes (``<base_path>/<version>/saved_model.pb``)
the way ``tensorflow/serving`` does, so notebooks, tests and machines without Docker can talk to an
exported model:

* one model (``model_base_path`` / ``model_name``) or several from TF Serving's text-format
  ``model_config_list`` (``model_config_file``), each with its version policy (``latest``, ``all``,
  ``specific``) and optional version labels; base paths are polled for new versions;
* TF Serving's REST paths for status, metadata and predict (row and columnar formats), per model and
  per version (``/versions/<N>``, ``/labels/<label>``);
* Prometheus metrics at ``/monitoring/prometheus/metrics`` (request counts and latency per model);
* bounded work per request (``max_batch_size`` rows, run ``batch_chunk_size`` rows at a time), strict
  JSON checks (no silent integer wrap-around), strict HTTP framing, JSON errors everywhere, and a
  graceful stop on SIGTERM (requests in flight finish).

Modules: :mod:`~kerasplm.serving.config` (model config files), :mod:`~kerasplm.serving.models`
(versions, loading, policies), :mod:`~kerasplm.serving.api` (the REST API as plain functions),
:mod:`~kerasplm.serving.metrics` (Prometheus text), :mod:`~kerasplm.serving.http` (the HTTP layer),
:mod:`~kerasplm.serving.server` (:class:`ModelServer`, :func:`serve`).  Only the standard library,
``tensorflow`` and ``tensorflow_text`` are used.

    from kerasplm.serving import ModelServer
    with ModelServer("export/translator", "translator", port=0) as server:
        ...  # POST f"{server.url}/v1/models/translator:predict" {"instances": ["Hace frío."]}
"""
import importlib

from kerasplm.serving.defaults import (DEFAULT_BATCH_CHUNK_SIZE, DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BODY_BYTES,
                                       DEFAULT_POLL_SECONDS, DEFAULT_PORT, DEFAULT_SHUTDOWN_GRACE_SECONDS,
                                       DEFAULT_SIGNATURE)

# The rest is imported on first use (PEP 562), so that `kerasplm serve --help` needs no TensorFlow.
_LAZY = {"METRICS_PATH": "api", "RequestError": "api", "predict": "api",
         "ModelConfig": "config", "ModelConfigError": "config", "VersionPolicy": "config",
         "parse_model_config": "config", "read_model_config_file": "config", "Metrics": "metrics",
         "LoadedVersion": "models", "ServedModel": "models", "list_versions": "models", "load_version": "models",
         "ModelServer": "server", "ServerStartError": "server", "serve": "server"}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


__all__ = [
    "DEFAULT_BATCH_CHUNK_SIZE", "DEFAULT_MAX_BATCH_SIZE", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_POLL_SECONDS",
    "DEFAULT_PORT", "DEFAULT_SHUTDOWN_GRACE_SECONDS", "DEFAULT_SIGNATURE", "METRICS_PATH",
    "LoadedVersion", "Metrics", "ModelConfig", "ModelConfigError", "ModelServer", "RequestError",
    "ServedModel", "ServerStartError", "VersionPolicy", "list_versions", "load_version",
    "parse_model_config", "predict", "read_model_config_file", "serve",
]
