"""``kerasplm serve``: a local server speaking TensorFlow Serving's gRPC and REST APIs for kerasplm's exports.

It serves the SavedModels that :mod:`kerasplm.export` writes (``<base_path>/<version>/saved_model.pb``)
the way ``tensorflow/serving`` does, so notebooks, tests and machines without Docker can talk to an
exported model:

* one model (``model_base_path`` / ``model_name``) or several from TF Serving's text-format
  ``model_config_list`` (``model_config_file``), each with its version policy (``latest``, ``all``,
  ``specific``) and optional version labels; base paths are polled for new versions, and the config
  itself can change while serving (``config_poll_seconds``: TF Serving's
  ``--model_config_file_poll_wait_seconds``; gRPC ``HandleReloadConfigRequest``; ``ModelServer.apply_config``);
* TF Serving's ports: gRPC on ``grpc_port`` (the CLI's ``--port``, 8500) and REST on ``rest_api_port``
  (``--rest_api_port``, 8501); either may be off;
* gRPC: TF Serving's own services from ``tensorflow-serving-api`` (``PredictionService.Predict``,
  ``GetModelMetadata``, ``Classify``, ``Regress`` and ``MultiInference``, ``ModelService.GetModelStatus`` and
  ``HandleReloadConfigRequest``) with TF Serving's status codes;
* REST: TF Serving's paths for status, metadata, predict (row and columnar formats), classify and regress
  (``tf.Example`` features as JSON, for signatures whose method is TF Serving's classification / regression),
  per model and per version (``/versions/<N>``, ``/labels/<label>``);
* Prometheus metrics at ``/monitoring/prometheus/metrics`` (request counts and latency per model and
  entrypoint);
* request batching (``batching_parameters``; the CLI's ``--enable_batching``): concurrent predict
  requests to the same signature merged into one call, TF Serving's way (:mod:`~kerasplm.serving.batching`);
* bounded work per request, whichever API (``max_batch_size`` rows, run ``batch_chunk_size`` rows at a
  time; ``max_body_bytes`` per REST body or gRPC message), strict input checks (no silent integer
  wrap-around), strict HTTP framing, JSON errors everywhere, and a graceful stop on SIGTERM (requests
  and calls in flight finish).

Modules: :mod:`~kerasplm.serving.config` (model config files), :mod:`~kerasplm.serving.models`
(versions, loading, policies), :mod:`~kerasplm.serving.api` (the REST API as plain functions and the
predict/classify/regress/metadata core both APIs share), :mod:`~kerasplm.serving.grpc_service` (the gRPC API),
:mod:`~kerasplm.serving.metrics` (Prometheus text), :mod:`~kerasplm.serving.http` (the HTTP layer),
:mod:`~kerasplm.serving.server` (:class:`ModelServer`, :func:`serve`).  Only the standard library,
``tensorflow``, ``tensorflow_text``, ``grpcio`` and ``tensorflow-serving-api`` (its generated protos and
stubs; config files are parsed into its messages by protobuf's ``text_format``) are used.

    from kerasplm.serving import ModelServer
    with ModelServer("export/translator", "translator", rest_api_port=0, grpc_port=0) as server:
        ...  # POST f"{server.url}/v1/models/translator:predict" {"instances": ["Hace frío."]}
             # or PredictionServiceStub(grpc.insecure_channel(server.grpc_target)).Predict(...)
"""
import importlib

from kerasplm.serving.defaults import (DEFAULT_BATCH_CHUNK_SIZE, DEFAULT_GRPC_PORT, DEFAULT_MAX_BATCH_SIZE,
                                       DEFAULT_MAX_BODY_BYTES, DEFAULT_POLL_SECONDS, DEFAULT_REST_API_PORT,
                                       DEFAULT_SHUTDOWN_GRACE_SECONDS, DEFAULT_SIGNATURE)

# The rest is imported on first use (PEP 562), so that `kerasplm serve --help` needs no TensorFlow.
_LAZY = {"METRICS_PATH": "api", "RequestError": "api", "predict": "api",
         "ModelConfig": "config", "ModelConfigError": "config", "VersionPolicy": "config",
         "parse_model_config": "config", "read_model_config_file": "config", "Metrics": "metrics",
         "LoadedVersion": "models", "ServedModel": "models", "list_versions": "models", "load_version": "models",
         "ModelServer": "server", "ServerStartError": "server", "serve": "server",
         "GrpcServer": "grpc_service", "BatchingParameters": "batching", "Batcher": "batching",
         "read_batching_parameters_file": "batching"}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


__all__ = [
    "DEFAULT_BATCH_CHUNK_SIZE", "DEFAULT_GRPC_PORT", "DEFAULT_MAX_BATCH_SIZE", "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_POLL_SECONDS", "DEFAULT_REST_API_PORT", "DEFAULT_SHUTDOWN_GRACE_SECONDS", "DEFAULT_SIGNATURE", "METRICS_PATH",
    "Batcher", "BatchingParameters", "GrpcServer", "LoadedVersion", "Metrics", "ModelConfig", "ModelConfigError", "ModelServer", "RequestError",
    "ServedModel", "ServerStartError", "VersionPolicy", "list_versions", "load_version",
    "parse_model_config", "predict", "read_batching_parameters_file", "read_model_config_file", "serve",
]
