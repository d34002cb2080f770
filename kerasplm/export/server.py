"""A local server speaking the TensorFlow Serving REST API (the subset kerasplm's exports need).

It serves the SavedModels that `kerasplm.export` writes (``<model_base_path>/<version>/saved_model.pb``)
exactly the way ``tensorflow/serving`` does, so notebooks and tests can talk to an exported model
without Docker:

* the newest integer-named version directory is served ("latest" policy); the base path is polled
  every ``poll_seconds`` and a newer version is loaded fully before requests switch to it;
  directories that are not integers or hold no ``saved_model.pb`` yet (still being written) are
  ignored, and a version that fails to load is logged and skipped;
* ``GET  /v1/models/<name>[/versions/<N>]``            model status;
* ``GET  /v1/models/<name>[/versions/<N>]/metadata``   signature definitions;
* ``POST /v1/models/<name>[/versions/<N>]:predict``    row (``instances``) or columnar (``inputs``)
  requests, ``{"b64": ...}`` for binary strings, outputs named ``*_bytes`` come back as ``{"b64": ...}``;
* errors are ``{"error": "<message>"}`` with 400/404/405/411/413/500 status codes (a model
  raising INVALID_ARGUMENT gives 400, as in TF Serving; other TensorFlow errors 500).

Only the standard library, ``tensorflow`` and ``tensorflow_text`` are used.  Entry points:
:func:`serve` (blocking, used by ``kerasplm serve``), :class:`ModelServer` (start/stop in a
background thread) and :func:`add_serve_arguments` / :func:`run_serve_command` for the CLI.

One extension to TF Serving's row format: an input whose signature shape is a scalar (a decoding
option such as ``times`` or ``temperature``) may appear in every instance with the same value and is
passed once.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import re
import socket
import signal
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tensorflow-text ops the exported graphs use)
from tensorflow.core.framework import types_pb2

logger = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
PREDICT_METHOD = "tensorflow/serving/predict"

_PATH_RE = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?"
    r"(?:(?P<metadata>/metadata)|:(?P<verb>[A-Za-z]+))?/?$"
)


_VERSION_RE = re.compile(r"[0-9]+")


class RequestError(Exception):
    """An error answered to the client as ``{"error": message}`` with an HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = int(status)
        self.message = message


# --------------------------------------------------------------------------------------------
# Loaded versions


@dataclass
class LoadedVersion:
    """One loaded SavedModel version and its signatures."""

    version: int
    path: str
    model: object  # the object returned by tf.saved_model.load; keeps the functions alive
    signatures: dict  # name -> ConcreteFunction

    def input_specs(self, signature_name: str) -> dict:
        """``{input name: tf.TensorSpec}`` of a signature."""
        return dict(self.signatures[signature_name].structured_input_signature[1])

    def output_specs(self, signature_name: str) -> dict:
        """``{output name: tf.TensorSpec}`` of a signature."""
        return dict(self.signatures[signature_name].structured_outputs)


def list_versions(model_base_path: str) -> list[int]:
    """Complete version directories under ``model_base_path``, newest first.

    A version is an integer-named directory holding ``saved_model.pb`` (or ``.pbtxt``); temporary
    siblings (``.tmp-3-xxxx``) and directories still being written are skipped.
    """
    try:
        names = os.listdir(model_base_path)
    except FileNotFoundError:
        return []
    versions = []
    for name in names:
        if not _VERSION_RE.fullmatch(name):
            continue
        path = os.path.join(model_base_path, name)
        if any(os.path.isfile(os.path.join(path, f)) for f in ("saved_model.pb", "saved_model.pbtxt")):
            versions.append(int(name))
    return sorted(versions, reverse=True)


def load_version(model_base_path: str, version: int) -> LoadedVersion:
    """Load one version directory with ``tf.saved_model.load``."""
    path = os.path.join(model_base_path, str(version))
    model = tf.saved_model.load(path)
    signatures = dict(model.signatures)
    if not signatures:
        raise ValueError(f"SavedModel at {path} has no signatures")
    return LoadedVersion(version=version, path=path, model=model, signatures=signatures)


# --------------------------------------------------------------------------------------------
# JSON <-> tensors


def _dtype_name(dtype: tf.DType) -> str:
    return types_pb2.DataType.Name(tf.as_dtype(dtype).as_datatype_enum)


def _tensor_info(spec: tf.TensorSpec, tensor_name: str) -> dict:
    """A TensorInfo proto as TF Serving's JSON renders it."""
    shape = spec.shape
    if shape.rank is None:
        shape_json = {"dim": [], "unknown_rank": True}
    else:
        dims = [{"size": str(-1 if d is None else d), "name": ""} for d in shape.as_list()]
        shape_json = {"dim": dims, "unknown_rank": False}
    return {"dtype": _dtype_name(spec.dtype), "tensor_shape": shape_json, "name": tensor_name}


def signature_def_json(fn) -> dict:
    """TF Serving's JSON for one signature, derived from its concrete function."""
    in_specs = fn.structured_input_signature[1]
    out_specs = fn.structured_outputs
    # Flattening a dict orders it by key, which is also the order of fn.inputs / fn.outputs.
    in_names = [t.name for t in fn.inputs[: len(in_specs)]]
    out_names = [t.name for t in fn.outputs]
    inputs = {k: _tensor_info(in_specs[k], n) for k, n in zip(sorted(in_specs), in_names)}
    outputs = {
        k: _tensor_info(tf.TensorSpec(out_specs[k].shape, out_specs[k].dtype), n)
        for k, n in zip(sorted(out_specs), out_names)
    }
    return {"inputs": inputs, "outputs": outputs, "method_name": PREDICT_METHOD}


def _is_b64(value) -> bool:
    return isinstance(value, dict) and set(value) == {"b64"}


def _to_bytes(value, input_name: str):
    """Nested JSON strings / ``{"b64": ...}`` objects -> nested bytes."""
    if isinstance(value, list):
        return [_to_bytes(v, input_name) for v in value]
    if _is_b64(value):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (TypeError, ValueError) as e:
            raise RequestError(400, f"Input '{input_name}': invalid base64 value: {e}") from None
    if isinstance(value, str):
        return value.encode("utf-8")
    raise RequestError(
        400, f"Input '{input_name}' expects strings, got {type(value).__name__}: {value!r:.80}"
    )


def to_tensor(value, spec: tf.TensorSpec, input_name: str) -> tf.Tensor:
    """Convert a JSON value to a tensor of the signature input's dtype, checking the shape."""
    try:
        if spec.dtype == tf.string:
            tensor = tf.constant(_to_bytes(value, input_name), dtype=tf.string)
        else:
            tensor = tf.constant(value, dtype=spec.dtype)
    except RequestError:
        raise
    except (TypeError, ValueError, tf.errors.OpError) as e:
        raise RequestError(
            400, f"Input '{input_name}' cannot be converted to {_dtype_name(spec.dtype)}: {e}"
        ) from None
    if not spec.shape.is_compatible_with(tensor.shape):
        raise RequestError(
            400,
            f"Input '{input_name}' has shape {tensor.shape.as_list()}, "
            f"the signature expects {spec.shape.as_list()}",
        )
    return tensor


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
# Predict


def _check_names(given, specs: dict, signature_name: str):
    unknown = sorted(set(given) - set(specs))
    if unknown:
        raise RequestError(
            400,
            f"Unknown input(s) {', '.join(map(repr, unknown))} for signature '{signature_name}'; "
            f"it takes: {', '.join(sorted(specs))}",
        )
    missing = sorted(set(specs) - set(given))
    if missing:
        raise RequestError(
            400,
            f"Missing input(s) {', '.join(map(repr, missing))} for signature '{signature_name}'; "
            f"it takes: {', '.join(sorted(specs))}",
        )


def _row_inputs(instances, specs: dict, signature_name: str) -> tuple[dict, int]:
    """Row format -> ``({name: JSON value}, batch size)``."""
    if not isinstance(instances, list) or not instances:
        raise RequestError(400, "'instances' must be a non-empty list")
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
    _check_names(keys, specs, signature_name)
    columns = {}
    for name in keys:
        values = [instance[name] for instance in instances]
        if specs[name].shape.rank == 0:
            # A scalar option (e.g. a decoding parameter) is passed once, so must agree.
            if any(v != values[0] for v in values):
                raise RequestError(
                    400, f"Scalar input '{name}' must have the same value in every instance"
                )
            columns[name] = values[0]
        else:
            columns[name] = values
    return columns, len(instances)


def _columnar_inputs(inputs, specs: dict, signature_name: str) -> dict:
    """Columnar format -> ``{name: JSON value}``."""
    if isinstance(inputs, dict) and not _is_b64(inputs):
        _check_names(inputs, specs, signature_name)
        return dict(inputs)
    if len(specs) != 1:
        raise RequestError(
            400,
            f"Signature '{signature_name}' takes several inputs ({', '.join(sorted(specs))}); "
            "'inputs' must be an object {input_name: value}",
        )
    (name,) = specs
    return {name: inputs}


def predict(loaded: LoadedVersion, body: dict) -> dict:
    """Run a TF Serving predict request (already JSON-decoded) against one loaded version."""
    signature_name = body.get("signature_name", DEFAULT_SIGNATURE)
    if not isinstance(signature_name, str):
        raise RequestError(400, "'signature_name' must be a string")
    if signature_name not in loaded.signatures:
        raise RequestError(
            400,
            f"Serving signature name: \"{signature_name}\" not found in signature def; "
            f"available signatures: {', '.join(sorted(loaded.signatures))}",
        )
    if ("instances" in body) == ("inputs" in body):
        raise RequestError(
            400, "Request must contain exactly one of 'instances' (row format) or 'inputs' (columnar)"
        )
    specs = loaded.input_specs(signature_name)
    row_format = "instances" in body
    if row_format:
        values, batch = _row_inputs(body["instances"], specs, signature_name)
    else:
        values = _columnar_inputs(body["inputs"], specs, signature_name)
    tensors = {name: to_tensor(values[name], specs[name], name) for name in specs}

    try:
        outputs = loaded.signatures[signature_name](**tensors)
    except tf.errors.InvalidArgumentError as e:
        # Like TF Serving: a request the model rejects (e.g. an out-of-range option) is the client's error.
        raise RequestError(400, e.message) from None
    except tf.errors.OpError as e:
        raise RequestError(500, e.message) from None
    except (TypeError, ValueError) as e:  # e.g. a signature the checks above do not describe
        raise RequestError(400, str(e)) from None
    if not isinstance(outputs, dict):
        outputs = {"output_0": outputs}
    arrays = {name: np.asarray(t) for name, t in outputs.items()}

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
# HTTP


class _Handler(BaseHTTPRequestHandler):
    """Routes TF Serving REST requests to the owning :class:`ModelServer`."""

    protocol_version = "HTTP/1.1"
    server_version = "kerasplm-serve"
    timeout = 60  # seconds a client may stay silent before its connection is dropped
    _unread_body = 0  # Content-Length of a rejected (413) body still on the socket

    @property
    def model_server(self) -> "ModelServer":
        return self.server.model_server

    # -- responses --------------------------------------------------------------------------
    def _send_json(self, status: int, payload: dict, close: bool = False):
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002  (BaseHTTPRequestHandler's signature)
        if not self.model_server.quiet:
            sys.stderr.write(f"{self.address_string()} - [{self.log_date_time_string()}] {format % args}\n")

    # -- dispatch ---------------------------------------------------------------------------
    def _dispatch(self, method: str):
        try:
            path = self.path.split("?", 1)[0]
            match = _PATH_RE.match(path)
            if not match:
                raise RequestError(404, f"Malformed request: {method} {path}")
            verb = match["verb"]
            if verb is not None and verb != "predict":
                raise RequestError(
                    404 if verb not in ("classify", "regress") else 400,
                    f"Unsupported request '{verb}': only predict, status and metadata are served",
                )
            wanted = "POST" if verb == "predict" else "GET"
            if method != wanted and not (method == "HEAD" and wanted == "GET"):
                raise RequestError(405, f"Method {method} not allowed for {path}; use {wanted}")
            body = self._read_json() if method == "POST" else None
            loaded = self.model_server.find_version(match["name"], match["version"])
            if verb == "predict":
                result = predict(loaded, body)
            elif match["metadata"]:
                result = self.model_server.metadata_json(loaded)
            else:
                result = self.model_server.status_json(loaded)
            self._send_json(200, result)
        except RequestError as e:
            self._send_json(e.status, {"error": e.message}, close=e.status in (411, 413))
            if self._unread_body:
                self._discard_body(self._unread_body)
        except Exception as e:  # never let a request kill the server thread
            logger.exception("Unexpected error serving %s %s", method, self.path)
            try:
                self._send_json(500, {"error": f"{type(e).__name__}: {e}"}, close=True)
            except OSError:
                pass

    def _read_json(self):
        """Read the request body (at most max_body_bytes) and decode it as a JSON object."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise RequestError(411, "Chunked request bodies are not supported; send Content-Length")
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            raise RequestError(400, "Invalid Content-Length header") from None
        if length < 0:
            raise RequestError(400, "Invalid Content-Length header")
        limit = self.model_server.max_body_bytes
        if length > limit:
            self._unread_body = length
            raise RequestError(
                413, f"Request body of {length} bytes exceeds the limit of {limit} bytes"
            )
        raw = self.rfile.read(length)
        if len(raw) < length:
            raise RequestError(400, "Request body shorter than Content-Length")
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RequestError(400, f"JSON Parse error: {e}") from None
        if not isinstance(body, dict):
            raise RequestError(400, "JSON Parse error: the request body must be a JSON object")
        return body

    def _discard_body(self, length: int, seconds: float = 2.0):
        """After a 413 answer, drop the rejected body as it arrives, without storing it.

        Closing a socket with unread data makes the kernel reset the connection, which can
        destroy the 413 answer before a client that is still sending reads it.  Draining stops
        after ``length`` bytes, at end of stream, or after ``seconds``; the connection is then
        closed.  Nothing is kept in memory.
        """
        deadline = time.monotonic() + seconds
        self.connection.settimeout(0.2)
        try:
            while length > 0 and time.monotonic() < deadline:
                chunk = self.connection.recv(min(1 << 16, length))
                if not chunk:
                    break
                length -= len(chunk)
        except OSError:
            pass

    def handle_expect_100(self):
        """Refuse an oversized body before the client sends it (``Expect: 100-continue``)."""
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = 0
        limit = self.model_server.max_body_bytes
        if length > limit:
            message = f"Request body of {length} bytes exceeds the limit of {limit} bytes"
            self._send_json(413, {"error": message}, close=True)
            return False
        return super().handle_expect_100()

    def do_GET(self):  # noqa: N802
        self._dispatch("GET")

    def do_HEAD(self):  # noqa: N802
        self._dispatch("HEAD")

    def do_POST(self):  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self):  # noqa: N802
        self._dispatch("PUT")

    def do_DELETE(self):  # noqa: N802
        self._dispatch("DELETE")

    def do_PATCH(self):  # noqa: N802
        self._dispatch("PATCH")

    def do_OPTIONS(self):  # noqa: N802
        self._dispatch("OPTIONS")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # listen backlog: bursts of clients must not be refused
    allow_reuse_address = True

    def __init__(self, address, handler, model_server):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.model_server = model_server
        super().__init__(address, handler)


# --------------------------------------------------------------------------------------------
# Server


class ModelServer:
    """Serves the newest version under ``model_base_path`` over TF Serving's REST API.

    ``start()`` loads the newest loadable version, then runs the HTTP server and the version
    poller in background threads; ``stop()`` shuts both down.  Use ``port=0`` for a free port
    (see :attr:`port` / :attr:`url`).  Also a context manager.
    """

    def __init__(
        self,
        model_base_path: str,
        model_name: str,
        host: str = "127.0.0.1",
        port: int = 8501,
        max_body_bytes: int = 10 * 1024 * 1024,
        poll_seconds: float = 2.0,
        quiet: bool = False,
    ):
        if not os.path.isdir(model_base_path):
            raise FileNotFoundError(f"model base path {model_base_path} is not a directory")
        if max_body_bytes <= 0 or poll_seconds <= 0:
            raise ValueError("max_body_bytes and poll_seconds must be positive")
        self.model_base_path = os.path.abspath(model_base_path)
        self.model_name = model_name
        self.host = host
        self.requested_port = port
        self.max_body_bytes = int(max_body_bytes)
        self.poll_seconds = float(poll_seconds)
        self.quiet = quiet
        self._lock = threading.Lock()
        self._current: LoadedVersion | None = None
        self._failed: dict[int, float] = {}  # version -> mtime of the saved_model.pb that failed
        self._stop = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # -- versions -----------------------------------------------------------------------------
    @property
    def current_version(self) -> int | None:
        """The version now answering requests (None before one has loaded)."""
        with self._lock:
            return None if self._current is None else self._current.version

    def _pb_mtime(self, version: int) -> float:
        path = os.path.join(self.model_base_path, str(version))
        for name in ("saved_model.pb", "saved_model.pbtxt"):
            try:
                return os.path.getmtime(os.path.join(path, name))
            except OSError:
                continue
        return 0.0

    def refresh(self) -> int | None:
        """Load the newest complete version if it is not the one being served.

        Candidates are tried newest first; one that fails to load is logged and skipped (and not
        retried until its ``saved_model.pb`` changes), and the current version keeps serving
        meanwhile.  Returns the version being served afterwards.
        """
        current = self.current_version
        for version in list_versions(self.model_base_path):
            if version == current:
                break
            mtime = self._pb_mtime(version)
            if self._failed.get(version) == mtime:
                continue
            try:
                loaded = load_version(self.model_base_path, version)
            except Exception as e:  # a broken export must not take the server down
                self._failed[version] = mtime
                logger.error("Failed to load %s version %d: %s", self.model_name, version, e)
                continue
            with self._lock:
                old, self._current = self._current, loaded
            logger.info(
                "Serving %s version %d%s", self.model_name, version,
                "" if old is None else f" (replacing version {old.version})",
            )
            return version
        return self.current_version

    def _poll(self):
        while not self._stop.wait(self.poll_seconds):
            try:
                self.refresh()
            except Exception:  # keep polling whatever happens
                logger.exception("Polling %s failed", self.model_base_path)

    def find_version(self, name: str, version: str | None) -> LoadedVersion:
        """The loaded version a request addresses, or a 404 RequestError."""
        with self._lock:
            current = self._current
        if version is None:
            spec = f"Latest({name})"
        else:
            spec = f"Specific({name}, {version})"
        if name != self.model_name:
            raise RequestError(404, f"Servable not found for request: {spec}")
        if current is None:
            raise RequestError(404, f"Could not find any versions of model {name}")
        if version is not None and (
            not _VERSION_RE.fullmatch(version) or int(version) != current.version
        ):
            raise RequestError(404, f"Servable not found for request: {spec}")
        return current

    # -- responses ----------------------------------------------------------------------------
    def status_json(self, loaded: LoadedVersion) -> dict:
        """``GET /v1/models/<name>`` response."""
        return {
            "model_version_status": [
                {
                    "version": str(loaded.version),
                    "state": "AVAILABLE",
                    "status": {"error_code": "OK", "error_message": ""},
                }
            ]
        }

    def metadata_json(self, loaded: LoadedVersion) -> dict:
        """``GET /v1/models/<name>/metadata`` response."""
        sigs = {name: signature_def_json(fn) for name, fn in sorted(loaded.signatures.items())}
        return {
            "model_spec": {"name": self.model_name, "signature_name": "", "version": str(loaded.version)},
            "metadata": {"signature_def": {"signature_def": sigs}},
        }

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The bound port (useful with ``port=0``)."""
        if self._httpd is None:
            raise RuntimeError("server not started")
        return self._httpd.server_address[1]

    @property
    def address(self) -> tuple:
        """The bound ``(host, port)``."""
        if self._httpd is None:
            raise RuntimeError("server not started")
        return tuple(self._httpd.server_address[:2])

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8501``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> "ModelServer":
        """Load the newest version, bind, and serve in background threads."""
        if self._httpd is not None:
            raise RuntimeError("server already started")
        if self.refresh() is None:
            logger.warning(
                "No loadable version under %s yet; waiting for one", self.model_base_path
            )
        self._stop.clear()
        self._httpd = _HTTPServer((self.host, self.requested_port), _Handler, self)
        self._threads = [
            threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                             name="kerasplm-serve-http", daemon=True),
            threading.Thread(target=self._poll, name="kerasplm-serve-poll", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self):
        """Stop serving and polling; returns once both threads have ended."""
        if self._httpd is None:
            return
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        for thread in self._threads:
            thread.join(timeout=10)
        self._httpd = None
        self._threads = []

    def wait(self):
        """Block until :meth:`stop` is called (from another thread) or Ctrl-C."""
        while not self._stop.wait(0.5):
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def serve(
    model_base_path: str,
    model_name: str,
    host: str = "127.0.0.1",
    port: int = 8501,
    max_body_bytes: int = 10 * 1024 * 1024,
    poll_seconds: float = 2.0,
    quiet: bool = False,
):
    """Serve ``model_base_path`` as ``model_name`` until Ctrl-C or SIGTERM (blocking); both shut the
    server down cleanly (in-flight requests finish) and return.

    The REST API is TF Serving's: ``POST http://host:port/v1/models/<model_name>:predict``.
    """
    server = ModelServer(model_base_path, model_name, host, port, max_body_bytes, poll_seconds, quiet)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server.start()
    print(
        f"Serving {model_name} from {server.model_base_path} at "
        f"{server.url}/v1/models/{model_name} (Ctrl-C to stop)",
        file=sys.stderr,
        flush=True,
    )
    def on_sigterm(signum, frame):
        raise KeyboardInterrupt  # a process manager's stop request: same clean path as Ctrl-C

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def add_serve_arguments(parser):
    """Add ``kerasplm serve``'s options to an ``argparse`` (sub)parser."""
    parser.add_argument("--model-base-path", required=True,
                        help="directory holding integer version directories (export/<name>)")
    parser.add_argument("--model-name", default=None,
                        help="name in the URL /v1/models/<name> (default: the base path's name)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8501, help="REST port (default 8501)")
    parser.add_argument("--max-body-bytes", type=int, default=10 * 1024 * 1024,
                        help="largest accepted request body (default 10 MiB)")
    parser.add_argument("--poll-seconds", type=float, default=2.0,
                        help="how often to look for a new version (default 2)")
    parser.add_argument("--quiet", action="store_true", help="do not log each request")
    return parser


def run_serve_command(args) -> int:
    """Run ``kerasplm serve`` from arguments parsed with :func:`add_serve_arguments`."""
    name = args.model_name or os.path.basename(os.path.normpath(args.model_base_path))
    serve(args.model_base_path, name, host=args.host, port=args.port,
          max_body_bytes=args.max_body_bytes, poll_seconds=args.poll_seconds, quiet=args.quiet)
    return 0
