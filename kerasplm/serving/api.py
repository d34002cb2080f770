"""TensorFlow Serving's REST API as plain functions: routes, JSON <-> tensors, predict, metadata;
and the core both front ends (REST here, gRPC in :mod:`kerasplm.serving.grpc_service`) share.

Nothing here touches sockets; :mod:`kerasplm.serving.http` reads and writes the bytes and
:class:`kerasplm.serving.ModelServer` ties the pieces together.  Every client mistake raises
:class:`RequestError`, answered over REST as ``{"error": message}`` with its HTTP status (400 bad
request, 404 unknown model/version/path, 405 wrong method; a model raising INVALID_ARGUMENT gives 400,
as in TF Serving; other TensorFlow errors 500) and over gRPC with its canonical ``code``
(``NOT_FOUND``, ``INVALID_ARGUMENT``, ``RESOURCE_EXHAUSTED``...).

The shared core: :func:`find_signature` (a signature by name), :func:`check_input_names`,
:func:`check_rows` (``max_batch_size``), :func:`check_shape`, :func:`run_predict` (the checks, then
:func:`run_signature` in ``batch_chunk_size`` chunks) and :func:`signature_tensors` (what metadata
describes).  The REST side turns JSON into tensors first (:func:`to_tensor`), the gRPC side
TensorProtos.

Requests (TF Serving's paths; ``<N>`` a version, ``<L>`` a version label from the model config):

* ``GET  /v1/models/<name>[/versions/<N> | /labels/<L>]``            model status;
* ``GET  /v1/models/<name>[/versions/<N> | /labels/<L>]/metadata``   signature definitions;
* ``POST /v1/models/<name>[/versions/<N> | /labels/<L>]:predict``    row (``instances``) or columnar
  (``inputs``) requests; ``{"b64": ...}`` for binary strings; outputs named ``*_bytes`` come back as
  ``{"b64": ...}``;
* ``POST /v1/models/<name>[/versions/<N> | /labels/<L>]:classify`` / ``:regress``  TF Serving's
  classification / regression requests (``{"signature_name", "context", "examples": [{feature: value}]}``)
  for a signature whose method is ``tensorflow/serving/classify`` / ``regress`` (:func:`classify`,
  :func:`regress`; the core both APIs share: :func:`find_example_signature`, :func:`run_classify`,
  :func:`run_regress` over serialized ``tf.Example``\\ s);
* ``GET  /monitoring/prometheus/metrics``                             Prometheus text metrics.

Work per request is bounded: at most ``max_batch_size`` rows (instances) per request, run through
the signature ``batch_chunk_size`` rows at a time (see :func:`run_signature`), and an answer of at most
``max_response_bytes`` (counted as the output tensors' bytes, :class:`AnswerSize`; checked after every chunk,
so a request whose answer would be too large is refused with 413 / RESOURCE_EXHAUSTED after at most one chunk
over the limit, before any JSON or proto is built).  JSON values are
checked against the signature's dtypes before any tensor is built: booleans are not numbers,
integers must fit the input's integer dtype (no silent int32 wrap-around) and floats are not
accepted for integer inputs.

One extension to TF Serving's row format: an input whose signature shape is a scalar (a decoding
option such as ``beam_size``) may appear in every instance with the same value and is passed once.
"""
from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from tensorflow.core.example import example_pb2, feature_pb2
from tensorflow.core.framework import types_pb2

from kerasplm.serving.defaults import (DEFAULT_BATCH_CHUNK_SIZE, DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_RESPONSE_BYTES,
                                       DEFAULT_SIGNATURE)
from kerasplm.serving.metrics import status_code_name

PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
EXAMPLE_APIS = {"classify": (CLASSIFY_METHOD, "classification"), "regress": (REGRESS_METHOD, "regression")}
METRICS_PATH = "/monitoring/prometheus/metrics"
MAX_UNKNOWN_RANK_DEPTH = 32  # nesting allowed for an input whose signature has an unknown rank

_MODEL_PATH_RE = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
    r"(?:(?P<metadata>/metadata)|:(?P<verb>[A-Za-z]+))?/?$"
)


class RequestError(Exception):
    """An error answered to the client: over REST ``{"error": message}`` with the HTTP ``status``, over
    gRPC the canonical ``code`` (by default the one TF Serving pairs with ``status``, e.g. 404 ->
    ``NOT_FOUND``) with ``message`` as details."""

    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status = int(status)
        self.message = message
        self.code = code or status_code_name(self.status)


def _short(value, limit: int = 40) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


# --------------------------------------------------------------------------------------------
# Routes


@dataclass(frozen=True)
class Route:
    """What a request asks for: ``api`` is ``status``, ``metadata``, ``predict``, ``classify``, ``regress`` or
    ``metrics``."""

    api: str
    model_name: str | None = None
    version: int | None = None
    label: str | None = None

    def servable(self) -> str:
        """TF Serving's name for the addressed servable, as its error messages write it."""
        return servable_name(self.model_name, self.version, self.label)


def servable_name(model_name: str, version: int | None = None, label: str | None = None) -> str:
    """TF Serving's name for a servable in its error messages: ``Specific(m, 3)``, ``Latest(m)``..."""
    if version is not None:
        return f"Specific({model_name}, {version})"
    if label is not None:
        return f"Label({model_name}, {label})"
    return f"Latest({model_name})"


def parse_version(text: str) -> int:
    """A version from the URL: a non-negative int64, else a 400 (never a 500 on 5,000 digits)."""
    if not re.fullmatch(r"[0-9]{1,19}", text) or int(text) >= 2**63:
        raise RequestError(400, f"Invalid version '{_short(text)}': expected a non-negative 64-bit integer")
    return int(text)


def parse_route(method: str, path: str) -> Route:
    """Map ``method`` and ``path`` (query string ignored) to a :class:`Route`, or raise 404/405."""
    path = path.split("?", 1)[0]
    if path.rstrip("/") == METRICS_PATH:
        route, wanted = Route("metrics"), "GET"
    else:
        match = _MODEL_PATH_RE.match(path)
        if not match:
            raise RequestError(404, f"Malformed request: {method} {_short(path, 200)}")
        verb = match["verb"]
        if verb is not None and verb not in ("predict", *EXAMPLE_APIS):
            raise RequestError(
                404, f"Unsupported request '{_short(verb)}': predict, classify, regress, status and metadata are served"
            )
        api = verb or ("metadata" if match["metadata"] else "status")
        version = None if match["version"] is None else parse_version(match["version"])
        route = Route(api, match["name"], version, match["label"])
        wanted = "POST" if verb else "GET"
    if method != wanted and not (method == "HEAD" and wanted == "GET"):
        raise RequestError(405, f"Method {method} not allowed for {_short(path, 200)}; use {wanted}")
    return route


def parse_json_body(raw: bytes) -> dict:
    """Decode a request body; malformed, too deeply nested or over-long numbers give a 400."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise RequestError(400, "JSON Parse error: arrays/objects nested too deeply") from None
    except json.JSONDecodeError as e:
        raise RequestError(400, f"JSON Parse error: {e}") from None
    except UnicodeDecodeError as e:
        raise RequestError(400, f"JSON Parse error: not UTF-8 text: {e}") from None
    except ValueError:  # e.g. an integer literal with more digits than Python converts
        raise RequestError(400, "JSON Parse error: a number has too many digits") from None
    if not isinstance(body, dict):
        raise RequestError(400, "JSON Parse error: the request body must be a JSON object")
    return body


# --------------------------------------------------------------------------------------------
# JSON <-> tensors


def dtype_name(dtype: tf.DType) -> str:
    """TF Serving's name for a dtype, e.g. ``DT_INT32``."""
    return types_pb2.DataType.Name(tf.as_dtype(dtype).as_datatype_enum)


def signature_tensors(fn) -> tuple[dict, dict]:
    """A signature's ``({input key: (TensorSpec, tensor name)}, {output key: (TensorSpec, tensor name)})``,
    derived from its concrete function: what REST's and gRPC's metadata both describe."""
    in_specs = fn.structured_input_signature[1]
    out_specs = fn.structured_outputs
    # Flattening a dict orders it by key, which is also the order of fn.inputs / fn.outputs.
    in_names = [t.name for t in fn.inputs[: len(in_specs)]]
    out_names = [t.name for t in fn.outputs]
    inputs = {k: (in_specs[k], n) for k, n in zip(sorted(in_specs), in_names)}
    outputs = {k: (tf.TensorSpec(out_specs[k].shape, out_specs[k].dtype), n)
               for k, n in zip(sorted(out_specs), out_names)}
    return inputs, outputs


def _tensor_info(spec: tf.TensorSpec, tensor_name: str) -> dict:
    """A TensorInfo proto as TF Serving's JSON renders it."""
    shape = spec.shape
    if shape.rank is None:
        shape_json = {"dim": [], "unknown_rank": True}
    else:
        dims = [{"size": str(-1 if d is None else d), "name": ""} for d in shape.as_list()]
        shape_json = {"dim": dims, "unknown_rank": False}
    return {"dtype": dtype_name(spec.dtype), "tensor_shape": shape_json, "name": tensor_name}


def signature_def_json(fn, method_name: str = PREDICT_METHOD) -> dict:
    """TF Serving's JSON for one signature, derived from its concrete function; ``method_name`` is the one
    the SavedModel records (:meth:`kerasplm.serving.models.LoadedVersion.method_name`)."""
    inputs, outputs = signature_tensors(fn)
    return {"inputs": {k: _tensor_info(*v) for k, v in inputs.items()},
            "outputs": {k: _tensor_info(*v) for k, v in outputs.items()},
            "method_name": method_name}


def metadata_json(model_name: str, loaded) -> dict:
    """``GET /v1/models/<name>/metadata`` response for one loaded version."""
    sigs = {name: signature_def_json(fn, loaded.method_name(name)) for name, fn in sorted(loaded.signatures.items())}
    return {
        "model_spec": {"name": model_name, "signature_name": "", "version": str(loaded.version)},
        "metadata": {"signature_def": {"signature_def": sigs}},
    }


def _is_b64(value) -> bool:
    return isinstance(value, dict) and set(value) == {"b64"}


def _leaf_checker(dtype: tf.DType):
    """A function ``leaf -> problem or None`` for JSON scalars fed to an input of ``dtype``."""
    if dtype == tf.string:
        return lambda v: None if isinstance(v, str) or _is_b64(v) else "expects strings"
    if dtype == tf.bool:
        return lambda v: None if type(v) is bool else "expects true or false"
    if dtype.is_integer:
        low, high = int(dtype.min), int(dtype.max)

        def check_int(v):
            if type(v) is not int:  # bool is a subclass of int: excluded on purpose
                return "expects integers (true/false are not integers)" if type(v) is bool else "expects integers"
            return None if low <= v <= high else f"value out of range [{low}, {high}]"

        return check_int
    if dtype.is_floating:
        largest = float(dtype.max)

        def check_float(v):
            if type(v) not in (int, float):
                return "expects numbers"
            try:
                x = float(v)
            except OverflowError:
                return f"value out of range for {dtype_name(dtype)}"
            return None if not np.isfinite(x) or abs(x) <= largest else f"value out of range for {dtype_name(dtype)}"

        return check_float
    return lambda v: None  # other dtypes (complex...): tf.constant decides


def check_json_value(value, spec: tf.TensorSpec, input_name: str):
    """Check a JSON value for ``spec`` without recursion: nesting depth, leaf types and ranges."""
    max_depth = MAX_UNKNOWN_RANK_DEPTH if spec.shape.rank is None else spec.shape.rank
    problem_of = _leaf_checker(spec.dtype)
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list):
            if depth >= max_depth:
                raise RequestError(
                    400, f"Input '{input_name}' is nested deeper than the {max_depth} dimension(s) of its "
                         f"signature shape {spec.shape}")
            stack.extend((x, depth + 1) for x in item)
            continue
        problem = problem_of(item)
        if problem:
            raise RequestError(
                400, f"Input '{input_name}' {problem} ({dtype_name(spec.dtype)}), got "
                     f"{type(item).__name__} {_short(json.dumps(item), 60)}")


def _to_bytes(value, input_name: str):
    """Nested JSON strings / ``{"b64": ...}`` objects -> nested bytes (depth already checked)."""
    if isinstance(value, list):
        return [_to_bytes(v, input_name) for v in value]
    if _is_b64(value):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (TypeError, ValueError) as e:
            raise RequestError(400, f"Input '{input_name}': invalid base64 value: {e}") from None
    return value.encode("utf-8")


def to_tensor(value, spec: tf.TensorSpec, input_name: str) -> tf.Tensor:
    """Convert a JSON value to a tensor of the signature input's dtype, checking types and shape."""
    check_json_value(value, spec, input_name)
    try:
        if spec.dtype == tf.string:
            tensor = tf.constant(_to_bytes(value, input_name), dtype=tf.string)
        else:
            tensor = tf.constant(value, dtype=spec.dtype)
    except RequestError:
        raise
    except (TypeError, ValueError, tf.errors.OpError) as e:
        raise RequestError(
            400, f"Input '{input_name}' cannot be converted to {dtype_name(spec.dtype)}: {_short(e, 300)}"
        ) from None
    check_shape(tensor.shape, spec, input_name)
    return tensor


def check_shape(shape, spec: tf.TensorSpec, input_name: str):
    """A 400 (INVALID_ARGUMENT) unless a request tensor's ``shape`` fits the signature input's."""
    shape = tf.TensorShape(shape)
    if not spec.shape.is_compatible_with(shape):
        raise RequestError(
            400,
            f"Input '{input_name}' has shape {shape.as_list()}, the signature expects {spec.shape.as_list()}",
        )


def _json_value(value, as_b64: bool):
    """``ndarray.tolist()`` output -> JSON-ready value (bytes decoded as UTF-8 or base64)."""
    if isinstance(value, list):
        return [_json_value(v, as_b64) for v in value]
    if isinstance(value, bytes):
        if as_b64:
            return {"b64": base64.b64encode(value).decode("ascii")}
        return value.decode("utf-8", errors="replace")
    return value


def to_json(array: np.ndarray, output_name: str):
    """An output array as JSON; like TF Serving, ``*_bytes`` outputs are base64-encoded."""
    return _json_value(np.asarray(array).tolist(), output_name.endswith("_bytes"))


# --------------------------------------------------------------------------------------------
# Request formats


def check_input_names(given, specs: dict, signature_name: str):
    """A 400 (INVALID_ARGUMENT) naming unknown or missing inputs of a signature."""
    for problem, names in (("Unknown", sorted(set(given) - set(specs))),
                           ("Missing", sorted(set(specs) - set(given)))):
        if names:
            raise RequestError(
                400,
                f"{problem} input(s) {', '.join(repr(_short(n)) for n in names[:10])} for signature "
                f"'{signature_name}'; it takes: {', '.join(sorted(specs))}",
            )


def check_rows(rows: int, max_batch_size: int, what: str):
    """Over ``max_batch_size`` rows: HTTP 400 over REST, RESOURCE_EXHAUSTED over gRPC."""
    if rows > max_batch_size:
        raise RequestError(
            400, f"{what} has {rows} rows; the limit is {max_batch_size} per request "
                 "(kerasplm serve --max-batch-size): split the request", code="RESOURCE_EXHAUSTED")


def _row_inputs(instances, specs: dict, signature_name: str, max_batch_size: int) -> tuple[dict, int]:
    """Row format -> ``({name: JSON value}, batch size)``."""
    if not isinstance(instances, list) or not instances:
        raise RequestError(400, "'instances' must be a non-empty list")
    check_rows(len(instances), max_batch_size, "'instances'")
    named = [isinstance(i, dict) and not _is_b64(i) for i in instances]
    if any(named) and not all(named):
        raise RequestError(400, "All instances must be objects or none of them")
    if not named[0]:
        if len(specs) != 1:
            raise RequestError(
                400,
                f"Signature '{signature_name}' takes several inputs ({', '.join(sorted(specs))}); "
                "each instance must be an object {input_name: value}",
            )
        (name,) = specs
        return {name: instances}, len(instances)
    keys = set(instances[0])
    for instance in instances:
        if set(instance) != keys:
            raise RequestError(400, "All instances must have the same input names")
    check_input_names(keys, specs, signature_name)
    columns = {}
    for name in keys:
        values = [instance[name] for instance in instances]
        if specs[name].shape.rank == 0:
            # A scalar option (e.g. a decoding parameter) is passed once, so must agree.
            first = json.dumps(values[0], sort_keys=True)
            if any(json.dumps(v, sort_keys=True) != first for v in values[1:]):
                raise RequestError(400, f"Scalar input '{name}' must have the same value in every instance")
            columns[name] = values[0]
        else:
            columns[name] = values
    return columns, len(instances)


def _columnar_inputs(inputs, specs: dict, signature_name: str, max_batch_size: int) -> dict:
    """Columnar format -> ``{name: JSON value}``."""
    if isinstance(inputs, dict) and not _is_b64(inputs):
        check_input_names(inputs, specs, signature_name)
        values = dict(inputs)
    elif len(specs) != 1:
        raise RequestError(
            400,
            f"Signature '{signature_name}' takes several inputs ({', '.join(sorted(specs))}); "
            "'inputs' must be an object {input_name: value}",
        )
    else:
        (name,) = specs
        values = {name: inputs}
    for name, value in values.items():
        if isinstance(value, list) and specs[name].shape.rank != 0:
            check_rows(len(value), max_batch_size, f"Input '{name}'")
    return values


# --------------------------------------------------------------------------------------------
# Running a signature in bounded chunks


def op_error_summary(error: tf.errors.OpError) -> str:
    """The line of a TensorFlow error that says what went wrong (e.g. ``assertion failed: [times must be >= 0]
    ...``), without the "Graph execution error:" header and the traceback of where the node was defined."""
    lines = [line.strip() for line in error.message.splitlines()]
    for line in [x for x in lines if x.startswith("assertion failed:")] + lines:
        if line and line not in ("Graph execution error:", "<stack traces unavailable>") \
                and not line.startswith(("Detected at node", "File ")):
            return line[:300]
    return type(error).__name__


def _call(fn, tensors: dict) -> dict:
    """Call a signature; TensorFlow errors become RequestErrors; outputs as numpy arrays."""
    try:
        outputs = fn(**tensors)
    except tf.errors.InvalidArgumentError as e:
        # Like TF Serving: a request the model rejects (e.g. an out-of-range option or a cap of the export) is
        # the client's error; the answer is the line that says what is wrong, not the graph's node trail.
        raise RequestError(400, op_error_summary(e)) from None
    except tf.errors.OpError as e:
        raise RequestError(500, e.message) from None
    except (TypeError, ValueError) as e:  # e.g. a signature the checks above do not describe
        raise RequestError(400, str(e)) from None
    if not isinstance(outputs, dict):
        outputs = {"output_0": outputs}
    return {name: np.asarray(t) for name, t in outputs.items()}


def _batch_rows(tensors: dict, in_specs: dict, out_specs: dict) -> int | None:
    """Rows of the batch if the call can be split along axis 0, else None.

    Splittable: every non-scalar input has an unknown leading dimension (the batch) and the same
    number of rows, and every output has an unknown leading dimension too.  Scalar inputs (options)
    are passed whole to each chunk; a scalar or fixed-size output (a total, a vocabulary) makes the
    signature unsplittable, and it then runs in one call.
    """
    batched = {name: t for name, t in tensors.items() if in_specs[name].shape.rank != 0}
    if not batched:
        return None
    if any(in_specs[n].shape.rank is None or in_specs[n].shape[0] is not None for n in batched):
        return None
    if any(s.shape.rank in (None, 0) or s.shape[0] is not None for s in out_specs.values()):
        return None
    rows = {int(t.shape[0]) for t in batched.values()}
    return rows.pop() if len(rows) == 1 else None


def _concat_rows(arrays: list) -> np.ndarray:
    """Concatenate chunk outputs along axis 0, padding other axes to the largest chunk's size.

    Padding uses ``b""`` / 0 / False, the values signatures pad ragged outputs with, so the result
    equals what one call over the whole batch returns (e.g. a translator's tokens and attention).
    """
    first = arrays[0]
    trailing = tuple(max(a.shape[i] for a in arrays) for i in range(1, first.ndim))
    fill = b"" if first.dtype == object else np.zeros((), first.dtype)
    out = np.full((sum(a.shape[0] for a in arrays),) + trailing, fill, dtype=first.dtype)
    start = 0
    for a in arrays:
        out[(slice(start, start + a.shape[0]),) + tuple(slice(0, d) for d in a.shape[1:])] = a
        start += a.shape[0]
    return out


class AnswerSize:
    """The size of an answer as ``max_response_bytes`` counts it, added up chunk by chunk.

    Numbers count their bytes (4 per float32 value), strings their lengths; padding counts as the
    concatenated answer will hold it (a chunk wider than the ones before widens every row).  The JSON text
    REST writes is larger (a float32 takes 10-20 characters), a gRPC TensorProto about the same.
    """

    def __init__(self, limit: int | None, total_rows: int | None = None):
        self.limit = limit
        self.total_rows = total_rows
        self.rows = 0
        self.counted_bytes = 0   # strings, and the numbers of an answer not split into rows
        self.widths = {}    # numeric output -> (largest trailing shape so far, itemsize)

    @property
    def bytes(self) -> int:
        return self.counted_bytes + sum(self.rows * int(np.prod(shape, dtype=np.int64)) * itemsize
                                       for shape, itemsize in self.widths.values())

    def add(self, outputs: dict, rows: int | None = None):
        """Count one chunk's ``outputs`` (the next ``rows`` rows; None: a whole answer, not split into rows);
        RequestError 413 (RESOURCE_EXHAUSTED) once the answer so far is over the limit."""
        self.rows += rows or 0
        for name, array in outputs.items():
            if array.dtype == object:
                self.counted_bytes += sum(len(v) for v in array.ravel())
                continue
            if rows is None:
                self.counted_bytes += array.nbytes
                continue
            trailing = array.shape[1:] if array.ndim else ()
            old = self.widths.get(name, (trailing, array.itemsize))[0]
            self.widths[name] = (tuple(max(a, b) for a, b in zip(old, trailing)), array.itemsize)
        if self.limit is not None and self.bytes > self.limit:
            done = "its outputs" if self.total_rows is None or self.rows >= self.total_rows else \
                f"the outputs of its first {self.rows} of {self.total_rows} rows alone"
            raise RequestError(
                413, f"The answer to this request would exceed the limit of {self.limit:,} bytes per response "
                     f"(--max-response-bytes): {done} come to {self.bytes:,} bytes of tensors. "
                     f"Send fewer or shorter rows.", code="RESOURCE_EXHAUSTED")


def run_signature(fn, tensors: dict, in_specs: dict, out_specs: dict, chunk_size: int,
                  max_response_bytes: int | None = None) -> dict:
    """Run ``fn(**tensors)`` at most ``chunk_size`` rows at a time; ``{output name: ndarray}``.

    A request with many rows is split along axis 0 (when :func:`_batch_rows` says the signature
    allows it), so the memory one request needs is bounded by a chunk, not by the request.  If a
    chunk's outputs turn out not to have one row per input row, the whole batch runs in one call.
    With ``max_response_bytes`` the answer is counted after every chunk (:class:`AnswerSize`) and the
    request refused (413) as soon as it is over: the chunks already run are dropped, none more runs.
    """
    rows = _batch_rows(tensors, in_specs, out_specs)
    if rows is None or rows <= chunk_size:
        outputs = _call(fn, tensors)
        AnswerSize(max_response_bytes).add(outputs)
        return outputs
    size = AnswerSize(max_response_bytes, rows)
    pieces = []
    for start in range(0, rows, chunk_size):
        part = {name: t[start:start + chunk_size] if in_specs[name].shape.rank != 0 else t
                for name, t in tensors.items()}
        outputs = _call(fn, part)
        n = min(chunk_size, rows - start)
        if any(a.ndim == 0 or a.shape[0] != n for a in outputs.values()):
            pieces.clear()
            outputs = _call(fn, tensors)
            AnswerSize(max_response_bytes).add(outputs)
            return outputs
        size.add(outputs, n)
        pieces.append(outputs)
    return {name: _concat_rows([p[name] for p in pieces]) for name in pieces[0]}


# --------------------------------------------------------------------------------------------
# Predict


def find_signature(loaded, signature_name: str) -> str:
    """``signature_name`` (empty: ``serving_default``) if the loaded version has it; else HTTP 400 as
    REST answers it, FAILED_PRECONDITION over gRPC (TF Serving's Predict answers "Serving signature key ...
    not found." with that code)."""
    signature_name = signature_name or DEFAULT_SIGNATURE
    if signature_name not in loaded.signatures:
        raise RequestError(
            400,
            f"Serving signature name: \"{_short(signature_name)}\" not found in signature def; "
            f"available signatures: {', '.join(sorted(loaded.signatures))}",
            code="FAILED_PRECONDITION",
        )
    return signature_name


def signature_name_of(body: dict, loaded, api_name: str = "predict") -> str:
    """The signature a predict (classify, regress) request names (default ``serving_default``), checked."""
    signature_name = body.get("signature_name", DEFAULT_SIGNATURE)
    if not isinstance(signature_name, str):
        raise RequestError(400, "'signature_name' must be a string")
    if api_name in EXAMPLE_APIS:
        return find_example_signature(loaded, signature_name, api_name)
    return find_signature(loaded, signature_name)


def run_predict(loaded, signature_name: str, tensors: dict, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                batch_chunk_size: int = DEFAULT_BATCH_CHUNK_SIZE, batcher=None,
                max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES) -> dict:
    """The predict core both front ends call: ``{output name: ndarray}`` for ``{input name: tensor}``.

    Checks the input names, the rows (at most ``max_batch_size`` per batched input) and the shapes
    against the signature, then runs it ``batch_chunk_size`` rows at a time (:func:`run_signature`), refusing
    an answer over ``max_response_bytes`` (413).  Dtypes are the front end's business: each builds tensors of the signature's dtypes or refuses.

    With a ``batcher`` (a :class:`kerasplm.serving.batching.Batcher`, ``--enable_batching``) a request
    to a batch-safe signature (:func:`~kerasplm.serving.batching.batch_safe`) with at most the batcher's
    ``max_batch_size`` rows is merged with concurrent requests to the same version and signature; it
    gets exactly its own rows back.  Other requests run on their own, as without a batcher.
    """
    specs = loaded.input_specs(signature_name)
    check_input_names(tensors, specs, signature_name)
    for name, tensor in tensors.items():
        if specs[name].shape.rank != 0 and tensor.shape.rank:
            check_rows(int(tensor.shape[0]), max_batch_size, f"Input '{name}'")
        check_shape(tensor.shape, specs[name], name)
    fn, out_specs = loaded.signatures[signature_name], loaded.output_specs(signature_name)
    if batcher is not None and _batchable(batcher, specs, out_specs, tensors):
        def run(arrays: dict) -> dict:  # a merged batch (or one request again) through the signature
            merged = {name: tf.constant(a, dtype=specs[name].dtype) for name, a in arrays.items()}
            # Through `loaded`: the batcher's queue keeps it (and so its id, the queue's key) alive.
            return run_signature(loaded.signatures[signature_name], merged, specs, out_specs, batch_chunk_size)

        unknown_axes = {name: [i for i in range(1, spec.shape.rank) if spec.shape[i] is None]
                        for name, spec in out_specs.items()}
        arrays = batcher.submit((id(loaded), signature_name), {name: t.numpy() for name, t in tensors.items()},
                                run, unknown_axes)
        # A merged batch is bounded by the batcher's max_batch_size; the cap is on each request's own answer.
        AnswerSize(max_response_bytes).add(arrays)
        return arrays
    return run_signature(fn, tensors, specs, out_specs, batch_chunk_size, max_response_bytes)


def _batchable(batcher, in_specs: dict, out_specs: dict, tensors: dict) -> bool:
    """Whether ``batcher`` takes this request: a batch-safe signature, inputs with one row count the
    batcher accepts (1 to its ``max_batch_size``)."""
    from kerasplm.serving.batching import batch_safe

    if not batch_safe({n: s.shape for n, s in in_specs.items()}, {n: s.shape for n, s in out_specs.items()}):
        return False
    rows = {int(t.shape[0]) for t in tensors.values()}
    return len(rows) == 1 and batcher.accepts(rows.pop())


def predict(loaded, body: dict, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
            batch_chunk_size: int = DEFAULT_BATCH_CHUNK_SIZE, batcher=None,
            max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES) -> dict:
    """Run a TF Serving predict request (already JSON-decoded) against one loaded version.

    ``loaded`` is a :class:`kerasplm.serving.models.LoadedVersion`.  At most ``max_batch_size`` rows
    are accepted; they run ``batch_chunk_size`` rows per signature call (merged with other requests'
    by ``batcher`` if given, see :func:`run_predict`).
    """
    signature_name = signature_name_of(body, loaded)
    if ("instances" in body) == ("inputs" in body):
        raise RequestError(
            400, "Request must contain exactly one of 'instances' (row format) or 'inputs' (columnar)"
        )
    specs = loaded.input_specs(signature_name)
    row_format = "instances" in body
    if row_format:
        values, batch = _row_inputs(body["instances"], specs, signature_name, max_batch_size)
    else:
        values = _columnar_inputs(body["inputs"], specs, signature_name, max_batch_size)
    tensors = {name: to_tensor(values[name], specs[name], name) for name in specs}
    arrays = run_predict(loaded, signature_name, tensors, max_batch_size, batch_chunk_size, batcher,
                         max_response_bytes)

    if not row_format:
        columns = {name: to_json(a, name) for name, a in arrays.items()}
        return {"outputs": next(iter(columns.values())) if len(columns) == 1 else columns}

    per_output = {}
    for name, a in arrays.items():
        if a.ndim == 0:
            per_output[name] = [to_json(a, name)] * batch
        elif a.shape[0] == batch:
            per_output[name] = [to_json(row, name) for row in a]
        else:
            raise RequestError(
                500, f"Output '{name}' has batch size {a.shape[0]}, expected {batch} (one per instance)"
            )
    if len(per_output) == 1:
        return {"predictions": next(iter(per_output.values()))}
    names = sorted(per_output)
    return {"predictions": [{n: per_output[n][i] for n in names} for i in range(batch)]}


# --------------------------------------------------------------------------------------------
# Classify and regress: TF Serving's APIs over serialized tf.Examples


def find_example_signature(loaded, signature_name: str, api_name: str) -> str:
    """The signature a classify / regress request names (empty: ``serving_default``), checked as TF Serving's
    classifier / regressor do: unknown -> INVALID_ARGUMENT "No signature was found with the name: ...", another
    method (e.g. a predict signature) -> INVALID_ARGUMENT "Expected classification signature method_name ..."."""
    signature_name = signature_name or DEFAULT_SIGNATURE
    if signature_name not in loaded.signatures:
        raise RequestError(400, f"No signature was found with the name: {_short(signature_name)} "
                                f"(available signatures: {', '.join(sorted(loaded.signatures))})")
    method, word = EXAMPLE_APIS[api_name]
    found = loaded.method_name(signature_name)
    if found != method:
        raise RequestError(400, f"Expected {word} signature method_name to be {method}. Was: {found} "
                                f"(signature '{_short(signature_name)}')")
    return signature_name


def _example_inputs(loaded, signature_name: str, serialized: list, max_batch_size: int) -> dict:
    """``{input key: string tensor [B]}`` for a classify / regress signature's one input, rows checked."""
    if not serialized:
        raise RequestError(400, "Input is empty.")
    check_rows(len(serialized), max_batch_size, "The request's examples")
    specs = loaded.input_specs(signature_name)
    if len(specs) != 1:
        raise RequestError(400, f"Expected one input Tensor; signature '{signature_name}' has {len(specs)}")
    (name,) = specs
    return {name: tf.constant(serialized, dtype=tf.string)}


def run_classify(loaded, signature_name: str, serialized: list, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                 batch_chunk_size: int = DEFAULT_BATCH_CHUNK_SIZE,
                 max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES) -> tuple:
    """The classify core both front ends call: serialized ``tf.Example``\\ s (bytes, B of them) through a
    classification signature -> ``(classes, scores)``: a bytes array [B, C] or None, a float32 array [B, C] or
    None (whichever outputs the signature has), checked as TF Serving checks them."""
    tensors = _example_inputs(loaded, signature_name, serialized, max_batch_size)
    specs = loaded.input_specs(signature_name)
    arrays = run_signature(loaded.signatures[signature_name], tensors, specs, loaded.output_specs(signature_name),
                           batch_chunk_size, max_response_bytes)
    classes, scores = arrays.get("classes"), arrays.get("scores")
    if classes is None and scores is None:
        raise RequestError(400, 'Expected classification signature outputs to contain at least one of "classes" '
                                f'or "scores"; signature \'{signature_name}\' has: {", ".join(sorted(arrays))}')
    for key, array, kind in (("classes", classes, "DT_STRING"), ("scores", scores, "DT_FLOAT")):
        if array is None:
            continue
        if array.ndim != 2:
            raise RequestError(400, f"Expected Tensor shape: [batch_size num_classes] but got {list(array.shape)} "
                                    f"('{key}')")
        if (array.dtype != object) if key == "classes" else (array.dtype != np.float32):
            raise RequestError(400, f"Expected {key} Tensor of {kind}. Got: {array.dtype}")
        if array.shape[0] != len(serialized):
            raise RequestError(400, f"Expected {key} output batch size of {len(serialized)}. Got: {array.shape[0]}")
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise RequestError(400, f"Tensors class and score should match in dim_size(1). Got {classes.shape[1]} vs. "
                                f"{scores.shape[1]}")
    return classes, scores


def run_regress(loaded, signature_name: str, serialized: list, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                batch_chunk_size: int = DEFAULT_BATCH_CHUNK_SIZE,
                max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES) -> np.ndarray:
    """The regress core both front ends call: serialized ``tf.Example``\\ s (B) through a regression signature
    -> float32 array [B] (its output ``outputs``, of shape [B] or [B, 1])."""
    tensors = _example_inputs(loaded, signature_name, serialized, max_batch_size)
    arrays = run_signature(loaded.signatures[signature_name], tensors, loaded.input_specs(signature_name),
                           loaded.output_specs(signature_name), batch_chunk_size, max_response_bytes)
    if set(arrays) != {"outputs"}:
        raise RequestError(400, f"Expected one output Tensor 'outputs'; signature '{signature_name}' has: "
                                f"{', '.join(sorted(arrays))}")
    output = arrays["outputs"]
    if not (output.ndim == 1 or (output.ndim == 2 and output.shape[1] == 1)):
        raise RequestError(400, f"Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
                                f"{list(output.shape)}")
    if output.shape[0] != len(serialized):
        raise RequestError(400, f"Input batch size did not match output batch size: {len(serialized)} vs. "
                                f"{output.shape[0]}")
    if output.dtype != np.float32:
        raise RequestError(400, f"Expected output Tensor of DT_FLOAT.  Got: {output.dtype}")
    return output.reshape(-1)


_FEATURE_KINDS = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}


def _json_type(value) -> str:
    """A decoded JSON value's type as JSON names it (``null``, ``boolean``, ``number``...)."""
    for kind, name in ((type(None), "null"), (bool, "boolean"), ((int, float), "number"), (str, "string"),
                       (list, "array")):
        if isinstance(value, kind):
            return name
    return "object"


def _add_feature_value(feature, value, name: str):
    """Append one JSON value to a ``tf.train.Feature`` as TF Serving's JSON reader does: strings and
    ``{"b64": ...}`` -> bytes, integers and booleans -> int64, other numbers -> float; one kind per feature."""
    if isinstance(value, str) or _is_b64(value):
        kind = "bytes_list"
    elif type(value) is bool or type(value) is int:
        kind = "int64_list"
    elif type(value) is float:
        kind = "float_list"
    else:
        raise RequestError(400, f"Feature: {_short(name)} has element with unexpected JSON type: {_json_type(value)}")
    current = feature.WhichOneof("kind")
    if current not in (None, kind):
        raise RequestError(400, f"Unexpected element type in feature: {_short(name)} expecting type: "
                                f"{_FEATURE_KINDS[current]}")
    if kind == "bytes_list":
        feature.bytes_list.value.append(_to_bytes(value, f"feature {_short(name)}"))
    elif kind == "int64_list":
        if not -2**63 <= value < 2**63:
            raise RequestError(400, f"Feature: {_short(name)} has an integer outside int64")
        feature.int64_list.value.append(int(value))
    else:
        if np.isfinite(value) and abs(value) > float(np.finfo(np.float32).max):
            raise RequestError(400, f"Feature: {_short(name)}: {value} does not fit a float")
        feature.float_list.value.append(value)


def example_from_json(value, what: str = "Example") -> example_pb2.Example:
    """A JSON object ``{feature name: value or [values]}`` as a ``tf.train.Example`` (TF Serving's format)."""
    if not isinstance(value, dict) or _is_b64(value):
        raise RequestError(400, f"{what} must be JSON object but got JSON {_json_type(value)}")
    example = example_pb2.Example()
    for name, content in value.items():
        feature = feature_pb2.Feature()
        for item in content if isinstance(content, list) else [content]:
            _add_feature_value(feature, item, name)
        example.features.feature[name].CopyFrom(feature)
    return example


def serialized_examples_from_input(request_input, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE) -> list:
    """A ``tensorflow.serving.Input`` proto's examples as serialized ``tf.Example``\\ s: with a context, the context's
    bytes followed by the example's, as TF Serving builds them (the example's own values win when parsed); the
    count checked against ``max_batch_size`` before serializing. Used by gRPC Classify / Regress / MultiInference
    and by the warmup replay of classify / regress logs."""
    kind = request_input.WhichOneof("kind")
    listed = getattr(request_input, kind) if kind else None
    if listed is None or not listed.examples:
        raise RequestError(400, "Input is empty.")
    check_rows(len(listed.examples), max_batch_size, "The request's examples")
    context = listed.context.SerializeToString() if kind == "example_list_with_context" else b""
    return [context + example.SerializeToString() for example in listed.examples]


def serialized_examples_from_json(body: dict, api_name: str, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE) -> list:
    """A classify / regress request's ``examples`` (and optional ``context``) as serialized ``tf.Example``\\ s.

    Like TF Serving, each example with a context is the context's serialization followed by the example's:
    parsed, a feature both have takes the example's value.
    """
    if "examples" not in body:
        raise RequestError(400, f"When method is {api_name}, key 'examples' is expected and was not found")
    examples = body["examples"]
    if not isinstance(examples, list):
        raise RequestError(400, "Expecting 'examples' value to be an list/array")
    if not examples:
        raise RequestError(400, "'examples' value is an empty array")
    check_rows(len(examples), max_batch_size, "'examples'")
    context = b""
    if "context" in body:
        context = example_from_json(body["context"], "'context'").SerializeToString()
    return [context + example_from_json(e).SerializeToString() for e in examples]


def classify(loaded, body: dict, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
             batch_chunk_size: int = DEFAULT_BATCH_CHUNK_SIZE,
             max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES) -> dict:
    """A TF Serving ``:classify`` request -> ``{"results": [[[label, score], ...] per example]}`` (a missing
    ``classes`` output gives labels "", missing ``scores`` gives 0.0, as TF Serving writes them)."""
    signature_name = signature_name_of(body, loaded, "classify")
    serialized = serialized_examples_from_json(body, "classify", max_batch_size)
    classes, scores = run_classify(loaded, signature_name, serialized, max_batch_size, batch_chunk_size,
                                   max_response_bytes)
    rows, width = len(serialized), (classes if classes is not None else scores).shape[1]
    labels = [[""] * width] * rows if classes is None else _json_value(classes.tolist(), False)
    values = [[0.0] * width] * rows if scores is None else scores.tolist()
    return {"results": [[[label, score] for label, score in zip(*row)] for row in zip(labels, values)]}


def regress(loaded, body: dict, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
            batch_chunk_size: int = DEFAULT_BATCH_CHUNK_SIZE,
            max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES) -> dict:
    """A TF Serving ``:regress`` request -> ``{"results": [value per example]}``."""
    signature_name = signature_name_of(body, loaded, "regress")
    serialized = serialized_examples_from_json(body, "regress", max_batch_size)
    return {"results": run_regress(loaded, signature_name, serialized, max_batch_size, batch_chunk_size,
                                   max_response_bytes).tolist()}


INFERENCE_APIS = {"predict": predict, "classify": classify, "regress": regress}
"""The REST handler of each POST verb: ``fn(loaded, JSON body, max_batch_size, batch_chunk_size, ...,
max_response_bytes=...) -> JSON``."""
