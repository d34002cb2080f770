"""TensorFlow Serving's gRPC API (``--port``, 8500) over the same models, checks and core as REST.

The services are TF Serving's own, from the ``tensorflow-serving-api`` package (no proto of ours):

* ``tensorflow.serving.PredictionService``: ``Predict`` (``model_spec`` with a version or a version
  label and a signature name, ``inputs`` as TensorProtos, ``output_filter``) and ``GetModelMetadata``
  (``metadata_field: "signature_def"``: ``metadata["signature_def"]`` is a packed ``SignatureDefMap``,
  as TF Serving answers, each signature with its recorded ``method_name``); ``Classify`` and ``Regress``
  (``input``: ``example_list`` or ``example_list_with_context`` of ``tf.Example``\\ s) for signatures whose
  method is ``tensorflow/serving/classify`` / ``regress``, and ``MultiInference`` (several of those tasks on one
  model version and one input, each signature run on its own);
* ``tensorflow.serving.ModelService``: ``GetModelStatus`` (the version states REST's status lists) and
  ``HandleReloadConfigRequest`` (a new ``model_config_list``, applied by
  :meth:`~kerasplm.serving.ModelServer.apply_config` without dropping calls in flight; the answer's
  ``status`` is OK, and a config that cannot be applied fails the call with TF Serving's code and
  message, the running config kept: INVALID_ARGUMENT for another kind of config, a relative base path
  or a name listed twice, NOT_FOUND for a missing base path, UNKNOWN if a model's versions failed to load).

A request is resolved and run by the REST side's core (:class:`~kerasplm.serving.ModelServer`'s
model registry and :meth:`~kerasplm.serving.ModelServer.resolve`, :func:`kerasplm.serving.api.run_predict`
with ``max_batch_size`` / ``batch_chunk_size``), so both front ends answer alike; errors carry TF
Serving's codes: NOT_FOUND (unknown model, version or label), FAILED_PRECONDITION (an unknown signature in
Predict, as TF Serving's predict_util answers), INVALID_ARGUMENT (unknown
or missing inputs, a dtype other than the signature's, a shape that does not fit, values out of range
for the dtype, non-UTF-8 bytes for a string input whose name does not end in ``_bytes``, a TensorProto
whose values do not fill its shape: one value per element, or a single value for all), RESOURCE_EXHAUSTED (more rows than ``max_batch_size``; a message
over ``max_body_bytes``, refused by gRPC itself).  A TensorProto may give one value for its whole
shape (``tf.make_tensor_proto(0, shape=[8])``) as long as the expanded tensor fits in
``max_body_bytes``.  On :meth:`GrpcServer.stop` new calls are refused and calls in flight get the
grace period to finish.
"""
from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2, get_model_status_pb2,
                                     inference_pb2, model_management_pb2, model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc, regression_pb2, status_pb2)

from kerasplm.serving import api
from kerasplm.serving.config import ModelConfigError, model_configs_from_proto
from kerasplm.serving.defaults import DEFAULT_GRPC_WORKERS

logger = logging.getLogger(__name__)

SIGNATURE_DEF_FIELD = "signature_def"
_ERROR_CODES = status_pb2.StatusProto.DESCRIPTOR.fields_by_name["error_code"].enum_type.values_by_name
_VALUE_FIELDS = ("half_val", "float_val", "double_val", "int_val", "string_val", "scomplex_val", "int64_val",
                 "bool_val", "dcomplex_val", "uint32_val", "uint64_val")  # TensorProto's repeated values
_STRING_ITEMSIZE = 8  # bytes counted per string element when bounding a one-value TensorProto's expansion


# --------------------------------------------------------------------------------------------
# TensorProtos <-> arrays, SignatureDefs


def _value_count(proto) -> int:
    """How many values a TensorProto carries (``tensor_content`` counted in elements of its dtype)."""
    if proto.tensor_content:
        return len(proto.tensor_content) // max(1, tf.as_dtype(proto.dtype).size)
    return sum(len(getattr(proto, name)) for name in _VALUE_FIELDS)


def tensor_from_proto(proto, spec: tf.TensorSpec, input_name: str, max_batch_size: int,
                      max_bytes: int) -> tf.Tensor:
    """A request's TensorProto as a tensor for the signature input ``spec``, or a RequestError.

    Checked before any array is built: the dtype (exactly the signature's), the shape (known, fits the
    signature's), the rows (``max_batch_size``, RESOURCE_EXHAUSTED) and the values' count.
    """
    try:
        dtype = tf.as_dtype(proto.dtype)
    except TypeError:
        raise api.RequestError(400, f"Input '{input_name}' has an unknown dtype ({proto.dtype})") from None
    if dtype != spec.dtype:
        raise api.RequestError(400, f"Input '{input_name}' has dtype {api.dtype_name(dtype)}, the signature "
                                    f"expects {api.dtype_name(spec.dtype)}")
    if proto.tensor_shape.unknown_rank or any(d.size < 0 for d in proto.tensor_shape.dim):
        raise api.RequestError(400, f"Input '{input_name}' must have a known shape")
    shape = [d.size for d in proto.tensor_shape.dim]
    if spec.shape.rank != 0 and shape:
        api.check_rows(shape[0], max_batch_size, f"Input '{input_name}'")
    api.check_shape(shape, spec, input_name)
    elements = int(np.prod(shape, dtype=np.float64))  # float: no int64 overflow on absurd shapes
    count = _value_count(proto)
    itemsize = _STRING_ITEMSIZE if dtype == tf.string else max(1, dtype.size)
    if not proto.tensor_content and not dtype.is_complex and count not in (0, 1, elements):
        # TensorFlow would repeat the last value to fill the shape; a short list is more likely a client's bug.
        raise api.RequestError(
            400, f"Input '{input_name}' has {count} values for shape {shape} ({elements} elements): give one "
                 "value per element (or a single value for all of them)")
    if count < elements and elements * itemsize > max_bytes:
        raise api.RequestError(
            400, f"Input '{input_name}' has {count} value(s) for shape {shape}; one value is expanded to the "
                 f"whole shape only up to {max_bytes} bytes (kerasplm serve --max-body-bytes)")
    try:
        array = tf.make_ndarray(proto)
    except (TypeError, ValueError, OverflowError) as e:
        raise api.RequestError(
            400, f"Input '{input_name}': {count} value(s) do not make a {api.dtype_name(dtype)} tensor of shape "
                 f"{shape}: {api._short(e, 200)}") from None
    if dtype == tf.string and not input_name.endswith("_bytes"):
        for i, value in enumerate(array.flat):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as e:
                raise api.RequestError(
                    400, f"Input '{input_name}' expects UTF-8 text; element {i} is not ({e.reason} at byte "
                         f"{e.start}); binary inputs are named *_bytes") from None
    try:
        return tf.constant(array, dtype=spec.dtype)
    except (TypeError, ValueError) as e:
        raise api.RequestError(400, f"Input '{input_name}': {api._short(e, 200)}") from None


def tensor_info_proto(spec: tf.TensorSpec, tensor_name: str):
    """A ``TensorInfo`` (name, dtype, shape) as TF Serving's metadata holds it."""
    return meta_graph_pb2.TensorInfo(name=tensor_name, dtype=spec.dtype.as_datatype_enum,
                                     tensor_shape=spec.shape.as_proto())


def signature_def_proto(fn, method_name: str = api.PREDICT_METHOD):
    """A ``SignatureDef`` for a signature's concrete function (the same description as REST's metadata)."""
    inputs, outputs = api.signature_tensors(fn)
    signature = meta_graph_pb2.SignatureDef(method_name=method_name)
    for key, (spec, name) in inputs.items():
        signature.inputs[key].CopyFrom(tensor_info_proto(spec, name))
    for key, (spec, name) in outputs.items():
        signature.outputs[key].CopyFrom(tensor_info_proto(spec, name))
    return signature


def _set_model_spec(spec, model_name: str, version: int, signature_name: str = ""):
    spec.name = model_name
    spec.version.value = version
    if signature_name:
        spec.signature_name = signature_name


# --------------------------------------------------------------------------------------------
# The calls, front-end independent of grpc's servicer classes


class _InFlight:
    """Calls being answered, for the count of calls cut off at the end of a stop's grace period."""

    def __init__(self):
        self._lock = threading.Lock()
        self.count = 0

    def __enter__(self):
        with self._lock:
            self.count += 1

    def __exit__(self, *exc):
        with self._lock:
            self.count -= 1


class GrpcFrontEnd:
    """Answers the gRPC calls from a :class:`~kerasplm.serving.ModelServer`'s models and limits."""

    def __init__(self, model_server, max_bytes: int):
        self.server = model_server
        self.max_bytes = int(max_bytes)
        self.in_flight = _InFlight()

    def _resolve(self, model_spec):
        which = model_spec.WhichOneof("version_choice")
        version = model_spec.version.value if which == "version" else None
        label = model_spec.version_label if which == "version_label" else None
        return self.server.resolve(model_spec.name, version, label)

    def _max_response_bytes(self):
        return getattr(self.server, "max_response_bytes", api.DEFAULT_MAX_RESPONSE_BYTES)

    def predict(self, request, labels: dict):
        model, loaded = self._resolve(request.model_spec)
        signature = api.find_signature(loaded, request.model_spec.signature_name)
        labels["signature"] = signature
        specs = loaded.input_specs(signature)
        api.check_input_names(request.inputs, specs, signature)
        out_specs = loaded.output_specs(signature)
        wanted = list(request.output_filter)
        unknown = sorted(set(wanted) - set(out_specs))
        if unknown:
            raise api.RequestError(400, f"output_filter names unknown output(s) {', '.join(map(repr, unknown))} of "
                                        f"signature '{signature}'; it has: {', '.join(sorted(out_specs))}")
        tensors = {name: tensor_from_proto(request.inputs[name], specs[name], name, self.server.max_batch_size,
                                           self.max_bytes)
                   for name in specs}
        arrays = api.run_predict(loaded, signature, tensors, self.server.max_batch_size,
                                 self.server.batch_chunk_size, getattr(self.server, "batcher", None),
                                 self._max_response_bytes())
        response = predict_pb2.PredictResponse()
        _set_model_spec(response.model_spec, model.name, loaded.version, signature)
        for name in dict.fromkeys(wanted) if wanted else sorted(arrays):
            dtype = out_specs[name].dtype if name in out_specs else None
            response.outputs[name].CopyFrom(tf.make_tensor_proto(arrays[name], dtype=dtype))
        return response

    def _serialized_examples(self, request_input) -> list:
        """An ``Input`` proto's examples as serialized ``tf.Example``\\ s (:func:`api.serialized_examples_from_input`),
        the rows capped at ``max_batch_size``."""
        return api.serialized_examples_from_input(request_input, self.server.max_batch_size)

    def _example_call(self, request, labels: dict, api_name: str):
        model, loaded = self._resolve(request.model_spec)
        signature = api.find_example_signature(loaded, request.model_spec.signature_name, api_name)
        labels["signature"] = signature
        return model, loaded, signature, self._serialized_examples(request.input)

    def _example_task(self, request, labels: dict, api_name: str):
        """Classify or Regress (``api_name``): the response with its model spec and result."""
        model, loaded, signature, serialized = self._example_call(request, labels, api_name)
        if api_name == "classify":
            response, fill = classification_pb2.ClassificationResponse(), self._classification_result
        else:
            response, fill = regression_pb2.RegressionResponse(), self._regression_result
        _set_model_spec(response.model_spec, model.name, loaded.version, signature)
        fill(loaded, signature, serialized, response.result)
        return response

    def classify(self, request, labels: dict):
        return self._example_task(request, labels, "classify")

    def _classification_result(self, loaded, signature: str, serialized: list, result):
        classes, scores = api.run_classify(loaded, signature, serialized, self.server.max_batch_size,
                                           self.server.batch_chunk_size, self._max_response_bytes())
        for i in range(len(serialized)):
            classifications = result.classifications.add()
            for c in range((classes if classes is not None else scores).shape[1]):
                klass = classifications.classes.add()
                if classes is not None:
                    klass.label = classes[i, c].decode("utf-8", errors="replace")
                if scores is not None:
                    klass.score = scores[i, c]

    def regress(self, request, labels: dict):
        return self._example_task(request, labels, "regress")

    def _regression_result(self, loaded, signature: str, serialized: list, result):
        for value in api.run_regress(loaded, signature, serialized, self.server.max_batch_size,
                                     self.server.batch_chunk_size, self._max_response_bytes()):
            result.regressions.add().value = value

    def multi_inference(self, request, labels: dict):
        """TF Serving's MultiInference: every task names the same model (the first task's version is used), a
        distinct signature and its method (classify or regress); all run on the request's one input."""
        if not request.tasks:
            raise api.RequestError(400, "MultiInferenceRequest must contain at least one task")
        signatures = []
        for task in request.tasks:
            if not task.model_spec.name:
                raise api.RequestError(400, "Found ModelSpec with an empty model name.")
            if task.model_spec.name != request.tasks[0].model_spec.name:
                raise api.RequestError(400, "All ModelSpecs in a MultiInferenceRequest must access the same model "
                                            "name.")
            signature = task.model_spec.signature_name or api.DEFAULT_SIGNATURE
            if signature in signatures:
                raise api.RequestError(400, f"Duplicate evaluation of signature: {api._short(signature)}")
            signatures.append(signature)
            if task.method_name not in (api.CLASSIFY_METHOD, api.REGRESS_METHOD):
                raise api.RequestError(400, f"Unsupported signature method_name: {api._short(task.method_name)}",
                                       code="UNIMPLEMENTED")
        model, loaded = self._resolve(request.tasks[0].model_spec)
        for task, signature in zip(request.tasks, signatures):
            if signature not in loaded.signatures:
                raise api.RequestError(400, f"Requested signature not found in model graph: {api._short(signature)}")
            api.find_example_signature(loaded, signature,
                                       "classify" if task.method_name == api.CLASSIFY_METHOD else "regress")
        serialized = self._serialized_examples(request.input)
        response = inference_pb2.MultiInferenceResponse()
        for task, signature in zip(request.tasks, signatures):
            result = response.results.add()
            _set_model_spec(result.model_spec, model.name, loaded.version, task.model_spec.signature_name)
            if task.method_name == api.CLASSIFY_METHOD:
                self._classification_result(loaded, signature, serialized, result.classification_result)
            else:
                self._regression_result(loaded, signature, serialized, result.regression_result)
        return response

    def get_model_metadata(self, request, labels: dict):
        fields = list(request.metadata_field)
        if not fields:
            raise api.RequestError(400, "GetModelMetadataRequest must specify at least one metadata_field "
                                        f"(supported: {SIGNATURE_DEF_FIELD})")
        for field in fields:
            if field != SIGNATURE_DEF_FIELD:
                raise api.RequestError(400, f"Metadata field {api._short(field)} is not supported "
                                            f"(supported: {SIGNATURE_DEF_FIELD})")
        model, loaded = self._resolve(request.model_spec)
        signature_defs = get_model_metadata_pb2.SignatureDefMap()
        for name, fn in sorted(loaded.signatures.items()):
            signature_defs.signature_def[name].CopyFrom(signature_def_proto(fn, loaded.method_name(name)))
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        _set_model_spec(response.model_spec, model.name, loaded.version)
        response.metadata[SIGNATURE_DEF_FIELD].Pack(signature_defs)
        return response

    def get_model_status(self, request, labels: dict):
        spec = request.model_spec
        which = spec.WhichOneof("version_choice")
        model = self.server.find_model(
            spec.name, api.servable_name(spec.name, spec.version.value if which == "version" else None,
                                         spec.version_label if which == "version_label" else None))
        entries = model.status(spec.version.value if which == "version" else None,
                               spec.version_label if which == "version_label" else None)
        response = get_model_status_pb2.GetModelStatusResponse()
        for entry in entries:
            status = response.model_version_status.add()
            status.version = int(entry["version"])
            status.state = get_model_status_pb2.ModelVersionStatus.State.Value(entry["state"])
            code = _ERROR_CODES.get(entry["status"]["error_code"], _ERROR_CODES["UNKNOWN"])
            status.status.error_code = code.number
            status.status.error_message = entry["status"]["error_message"]
        return response

    def answer(self, context, api_name: str, method: str, model_name: str, call, request):
        """Run one call: its response, or ``context.abort`` with the error's canonical code.

        Calls naming a configured model are counted in the server's metrics (entrypoint ``GRPC``).
        """
        started = time.perf_counter()
        labels = {"signature": ""}
        response, code, message = None, "OK", ""
        with self.in_flight:
            try:
                response = call(request, labels)
            except api.RequestError as e:
                code, message = e.code, e.message
            except RecursionError:
                code, message = "INVALID_ARGUMENT", "Request nested too deeply"
            except Exception as e:  # never let a call take a worker thread down
                logger.exception("Unexpected error serving gRPC %s for %r", method, model_name[:200])
                code, message = "INTERNAL", f"{type(e).__name__}: {e}"
        if model_name in self.server.models:
            self.server.metrics.record(model_name, api_name, labels["signature"], code,
                                       time.perf_counter() - started, entrypoint="GRPC")
        if not self.server.quiet:
            line = f"{context.peer()} - [{time.strftime('%d/%b/%Y %H:%M:%S')}] gRPC {method} {model_name!r} {code}"
            sys.stderr.write(line.translate(_CONTROL_CHARS) + "\n")
        if code != "OK":
            context.abort(grpc.StatusCode[code], message)
        return response


_CONTROL_CHARS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """``tensorflow.serving.PredictionService``: Predict, GetModelMetadata, Classify, Regress, MultiInference."""

    def __init__(self, front_end: GrpcFrontEnd):
        self.front_end = front_end

    def Predict(self, request, context):  # noqa: N802 (the generated servicer's names)
        return self.front_end.answer(context, "predict", "Predict", request.model_spec.name,
                                     self.front_end.predict, request)

    def GetModelMetadata(self, request, context):  # noqa: N802
        return self.front_end.answer(context, "metadata", "GetModelMetadata", request.model_spec.name,
                                     self.front_end.get_model_metadata, request)

    def Classify(self, request, context):  # noqa: N802
        return self.front_end.answer(context, "classify", "Classify", request.model_spec.name,
                                     self.front_end.classify, request)

    def Regress(self, request, context):  # noqa: N802
        return self.front_end.answer(context, "regress", "Regress", request.model_spec.name,
                                     self.front_end.regress, request)

    def MultiInference(self, request, context):  # noqa: N802
        name = request.tasks[0].model_spec.name if request.tasks else ""
        return self.front_end.answer(context, "multi_inference", "MultiInference", name,
                                     self.front_end.multi_inference, request)


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    """``tensorflow.serving.ModelService``: GetModelStatus and HandleReloadConfigRequest."""

    def __init__(self, front_end: GrpcFrontEnd):
        self.front_end = front_end

    def GetModelStatus(self, request, context):  # noqa: N802
        return self.front_end.answer(context, "status", "GetModelStatus", request.model_spec.name,
                                     self.front_end.get_model_status, request)

    def HandleReloadConfigRequest(self, request, context):  # noqa: N802
        return self.front_end.answer(context, "reload", "HandleReloadConfigRequest", "", self._reload_config,
                                     request)

    def _reload_config(self, request, labels: dict):
        """Apply ``request.config``; as in TF Serving a failure is the call's status (no response is sent)."""
        try:
            problems = self.front_end.server.apply_config(model_configs_from_proto(request.config))
        except ModelConfigError as e:
            raise api.RequestError(404 if e.code == "NOT_FOUND" else 400, str(e), e.code) from None
        if problems:  # TF Serving's wording; the new config is in place, with these models unavailable
            raise api.RequestError(500, f"{len(problems)} model(s) did not become available: {{"
                                        f"{'}, {'.join(problems)}}}", "UNKNOWN")
        response = model_management_pb2.ReloadConfigResponse()
        response.status.error_code = _ERROR_CODES["OK"].number
        return response


# --------------------------------------------------------------------------------------------
# The server


def _bind_failure_reason(host: str, port: int) -> str:
    """Why binding ``host:port`` fails, in the OS's words (gRPC only says that it failed)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, port))
    except OSError as e:
        return e.strerror or str(e)
    return "gRPC could not bind it"


class GrpcServer:
    """A ``grpc.server`` bound to ``host:port`` (0: a free port, see :attr:`port`) answering for
    ``model_server``; messages over ``max_message_bytes`` are refused (RESOURCE_EXHAUSTED).

    gRPC's core serves every connection from its own few polling threads (no thread per connection);
    calls run on ``workers`` threads.  ``max_concurrent_calls`` (grpcio's ``maximum_concurrent_rpcs``)
    bounds the calls running or waiting for a worker: one more is answered RESOURCE_EXHAUSTED at once
    instead of queueing without bound.  A new connection must complete its HTTP/2 handshake (the client's
    connection preface and SETTINGS) within ``handshake_timeout_seconds``
    (``grpc.server_handshake_timeout_ms``, gRPC's default 120 s) or is closed.

    Binding happens here (an ``OSError`` if the port is taken: SO_REUSEPORT is off, so a second
    server cannot silently share it); :meth:`start` serves; :meth:`stop` drains.
    """

    def __init__(self, model_server, host: str, port: int, max_message_bytes: int,
                 workers: int = DEFAULT_GRPC_WORKERS, max_concurrent_calls: int | None = None,
                 handshake_timeout_seconds: float | None = None):
        self.front_end = GrpcFrontEnd(model_server, max_message_bytes)
        self._pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kerasplm-serve-grpc")
        options = [("grpc.max_receive_message_length", int(max_message_bytes)), ("grpc.so_reuseport", 0)]
        if handshake_timeout_seconds is not None:
            options.append(("grpc.server_handshake_timeout_ms", max(1, round(handshake_timeout_seconds * 1000))))
        self._server = grpc.server(self._pool, options=options, maximum_concurrent_rpcs=max_concurrent_calls)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            PredictionService(self.front_end), self._server)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(self.front_end), self._server)
        self.host = host
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            self.port = self._server.add_insecure_port(address)
        except RuntimeError:  # grpcio says only "Failed to bind to address ..."
            self.port = 0
        if not self.port:  # older grpcio reports a failed bind as port 0
            self._pool.shutdown(wait=False)
            raise OSError(_bind_failure_reason(host, port))

    @property
    def target(self) -> str:
        """``host:port`` for ``grpc.insecure_channel``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self):
        self._server.start()

    def stop(self, grace_seconds: float) -> threading.Event:
        """Refuse new calls at once, cancel calls still running after ``grace_seconds``; the returned
        event is set when the server has stopped.  Use :meth:`cut_off` afterwards."""
        return self._server.stop(grace_seconds)

    def cut_off(self) -> int:
        """Calls still being answered (after a stop's grace period: the calls it cut off)."""
        return self.front_end.in_flight.count

    def close(self):
        self._pool.shutdown(wait=False)
