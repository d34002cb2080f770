"""ModelServer: several models behind TensorFlow Serving's REST and gRPC APIs, polled, with graceful shutdown."""
from __future__ import annotations

import logging
import math
import signal
import sys
import threading
import time

from kerasplm.serving import api
from kerasplm.serving.batching import Batcher
from kerasplm.serving.defaults import (DEFAULT_GRPC_PORT, DEFAULT_GRPC_WORKERS, DEFAULT_HEADER_TIMEOUT_SECONDS,
                                       DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_RESPONSE_BYTES,
                                       DEFAULT_POLL_SECONDS,
                                       DEFAULT_REST_API_PORT, DEFAULT_SHUTDOWN_GRACE_SECONDS)
from kerasplm.serving.config import ModelConfig, ModelConfigError, read_model_config_file
from kerasplm.serving.http import HTTPServer
from kerasplm.serving.metrics import Metrics
from kerasplm.serving.models import ServedModel

logger = logging.getLogger(__name__)


class ServerStartError(RuntimeError):
    """The server could not start (e.g. the port is taken); the message is one line."""


class ModelServer:
    """Serves SavedModels over TF Serving's REST and gRPC APIs from background threads.

    Give the models as TF Serving does, exactly one of:

    * ``model_base_path`` (and ``model_name``, default the directory's name): one model;
    * ``model_config_file``: a text-format ``model_config_list`` (see :mod:`kerasplm.serving.config`);
    * ``models``: a list of :class:`~kerasplm.serving.config.ModelConfig`.

    The ports are TF Serving's: ``rest_api_port`` (default 8501) for REST and ``grpc_port`` (default
    8500; the CLI's ``--port``) for gRPC; 0 picks a free port (see :attr:`rest_api_port`,
    :attr:`grpc_port`, :attr:`url`, :attr:`grpc_target`), None leaves that API off (not both).
    ``start()`` binds the ports first, then loads every model's versions, then serves; base paths are
    polled every ``poll_seconds``, and with ``config_poll_seconds`` > 0 (TF Serving's
    ``--model_config_file_poll_wait_seconds``; 0: read once) the ``model_config_file`` is read again
    that often and a changed config applied (:meth:`apply_config`, also gRPC's
    ``HandleReloadConfigRequest``).  ``stop()`` stops accepting, lets requests and calls in flight
    finish for up to ``shutdown_grace_seconds`` and returns True if none had to be cut off.  Also a
    context manager.

    ``batching_parameters`` (a :class:`~kerasplm.serving.batching.BatchingParameters`; the CLI's
    ``--enable_batching`` / ``--batching_parameters_file``) turns on request batching: concurrent predict
    requests to the same batch-safe signature of a version, REST and gRPC alike, run as one call
    (:attr:`batcher`; ``stop()`` runs the queued batches before it returns).

    ``max_response_bytes`` bounds the answer to one request (its output tensors' bytes, counted after every
    chunk of ``batch_chunk_size`` rows; over it: 413 / RESOURCE_EXHAUSTED, and no more chunks run).

    ``max_connections`` bounds the open REST connections (a thread each; one more is answered 503 and
    closed) and the gRPC calls in progress or waiting for a worker (one more is RESOURCE_EXHAUSTED);
    ``header_timeout_seconds`` bounds the time to receive a REST request's line and headers (408 and
    closed) and gRPC's connection handshake.

    ``handle(method, path, body)`` answers one REST request without HTTP (``(status, payload)``);
    :meth:`resolve` is the model/version/label lookup both APIs use.
    """

    def __init__(
        self,
        model_base_path: str | None = None,
        model_name: str | None = None,
        *,
        model_config_file: str | None = None,
        models: list[ModelConfig] | None = None,
        host: str = "127.0.0.1",
        rest_api_port: int | None = DEFAULT_REST_API_PORT,
        grpc_port: int | None = DEFAULT_GRPC_PORT,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_batch_size: int = api.DEFAULT_MAX_BATCH_SIZE,
        batch_chunk_size: int = api.DEFAULT_BATCH_CHUNK_SIZE,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        shutdown_grace_seconds: float = DEFAULT_SHUTDOWN_GRACE_SECONDS,
        quiet: bool = False,
        config_poll_seconds: float = 0.0,
        batching_parameters=None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        header_timeout_seconds: float = DEFAULT_HEADER_TIMEOUT_SECONDS,
    ):
        given = [x is not None for x in (model_base_path, model_config_file, models)]
        if sum(given) != 1:
            raise ValueError("give exactly one of model_base_path, model_config_file or models")
        if model_name is not None and model_base_path is None:
            raise ValueError("model_name goes with model_base_path (a model config file names its models)")
        if model_config_file is not None:
            models = read_model_config_file(model_config_file)
        elif model_base_path is not None:
            models = [ModelConfig.for_base_path(model_base_path, model_name)]
        if not models:
            raise ValueError("no models to serve")
        if len({m.name for m in models}) != len(models):
            raise ValueError("model names must be unique")
        for name, value in (("max_body_bytes", max_body_bytes), ("max_batch_size", max_batch_size),
                            ("batch_chunk_size", batch_chunk_size), ("max_response_bytes", max_response_bytes),
                            ("poll_seconds", poll_seconds),
                            ("max_connections", max_connections), ("header_timeout_seconds", header_timeout_seconds)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        if shutdown_grace_seconds < 0:
            raise ValueError(f"shutdown_grace_seconds must be >= 0, got {shutdown_grace_seconds}")
        if not (math.isfinite(config_poll_seconds) and config_poll_seconds >= 0):
            raise ValueError(f"config_poll_seconds must be a finite number >= 0, got {config_poll_seconds}")
        if config_poll_seconds > 0 and model_config_file is None:
            raise ValueError("config_poll_seconds (--model_config_file_poll_wait_seconds) needs a model_config_file")
        if rest_api_port is None and grpc_port is None:
            raise ValueError("rest_api_port and grpc_port are both None: serve at least one API")
        for name, value in (("rest_api_port", rest_api_port), ("grpc_port", grpc_port)):
            if value is not None and not 0 <= int(value) <= 65535:
                raise ValueError(f"{name} must be in [0, 65535] (or None: off), got {value}")
        self.models = {m.name: ServedModel(m) for m in models}
        self.host = host
        self.requested_rest_api_port = None if rest_api_port is None else int(rest_api_port)
        self.requested_grpc_port = None if grpc_port is None else int(grpc_port)
        self.max_body_bytes = int(max_body_bytes)
        self.max_batch_size = int(max_batch_size)
        self.batch_chunk_size = int(batch_chunk_size)
        self.max_response_bytes = int(max_response_bytes)
        self.poll_seconds = float(poll_seconds)
        self.shutdown_grace_seconds = float(shutdown_grace_seconds)
        self.max_connections = int(max_connections)
        self.header_timeout_seconds = float(header_timeout_seconds)
        self.quiet = quiet
        self.model_config_file = model_config_file
        self.config_poll_seconds = float(config_poll_seconds)
        # One config change or base-path poll at a time; request threads never take it (they read
        # self.models, which a reload replaces by a new dict in one assignment).
        self._reload_lock = threading.Lock()
        self.metrics = Metrics()
        self.batcher = None
        if batching_parameters is not None:
            self.batcher = Batcher(batching_parameters, on_batch=self.metrics.record_batch,
                                   on_request=self.metrics.record_batching_request,
                                   on_call=self.metrics.record_batching_call)
        self._stop = threading.Event()
        self._httpd: HTTPServer | None = None
        self._grpc = None  # a kerasplm.serving.grpc_service.GrpcServer once bound
        self._bound = False
        self._threads: list[threading.Thread] = []

    # -- versions -----------------------------------------------------------------------------
    def model(self, name: str) -> ServedModel:
        """The served model called ``name`` (KeyError if not configured)."""
        return self.models[name]

    def find_model(self, name: str, servable: str | None = None) -> ServedModel:
        """The served model called ``name``, or a RequestError 404 (NOT_FOUND) naming ``servable``."""
        model = self.models.get(name)
        if model is None:
            raise api.RequestError(404, f"Servable not found for request: {servable or api.servable_name(name)}")
        return model

    def resolve(self, name: str, version: int | None = None, label: str | None = None) -> tuple:
        """``(ServedModel, LoadedVersion)`` a request addresses (latest when neither version nor label is
        given), or a RequestError 404 (NOT_FOUND): the lookup REST and gRPC share."""
        model = self.find_model(name, api.servable_name(name, version, label))
        return model, model.find(version, label)

    def refresh(self) -> dict:
        """Poll every base path once; returns ``{model name: loaded versions, newest first}``."""
        return {name: model.refresh() for name, model in self.models.items()}

    def _poll(self):
        while not self._stop.wait(self.poll_seconds):
            with self._reload_lock:
                for model in self.models.values():
                    try:
                        model.refresh()
                    except Exception:  # keep polling whatever happens
                        logger.exception("Polling %s failed", model.config.base_path)

    # -- config reload --------------------------------------------------------------------------
    def apply_config(self, models: list[ModelConfig]) -> list[str]:
        """Serve exactly ``models`` from now on, without dropping requests in flight.

        A new model is loaded completely before it becomes addressable; a model whose base path, version
        policy or labels changed is rebuilt beside the running one (keeping the versions it already holds
        when the base path is the same) and replaces it once its versions are loaded; an unchanged model
        is kept as it is; a model left out stops being addressable (404 / NOT_FOUND) while requests
        already running on it finish.  The switch is one assignment of a new ``self.models`` dict.

        Raises :class:`~kerasplm.serving.config.ModelConfigError` (with TF Serving's gRPC ``code``) and
        changes nothing if a name is listed twice or a base path is not a directory.  Returns the models
        that did not become available (``"name: version 3: error"``; they are served anyway, their status
        showing the failed load, as TF Serving does); empty when all went well.
        """
        seen = set()
        for config in models:
            if config.name in seen:
                raise ModelConfigError(f"Illegal to list model {config.name} multiple times in config list")
            seen.add(config.name)
        with self._reload_lock:
            current = self.models
            kept, built = {}, {}
            for config in models:
                old = current.get(config.name)
                if old is not None and old.config == config:
                    kept[config.name] = old
                    continue
                try:
                    built[config.name] = ServedModel(config) if old is None else old.reconfigured(config)
                except FileNotFoundError:
                    raise ModelConfigError(f"Could not find base path {config.base_path} for servable "
                                           f"{config.name}", code="NOT_FOUND") from None
            problems = []
            for name, model in built.items():  # load before anything becomes addressable
                try:
                    versions = model.refresh()
                except Exception as e:  # e.g. the base path became unreadable: report it, keep going
                    versions = []
                    problems.append(f"{name}: {type(e).__name__}: {e}")
                    logger.exception("Loading %s from %s failed", name, model.config.base_path)
                if not versions and model.failed_versions:
                    problems.extend(f"{name}: version {v}: {error}" for v, error in model.failed_versions.items())
                elif not versions:
                    logger.warning("No loadable version of %s under %s yet; waiting for one",
                                   name, model.config.base_path)
            self.models = {config.name: kept.get(config.name) or built[config.name] for config in models}
        for name in built:
            logger.info("%s model %s (%s)", "Updated" if name in current else "Added", name,
                        built[name].config.source or built[name].config.base_path)
        for name in current:
            if name not in self.models:
                logger.info("Removed model %s (requests in flight on it finish)", name)
        return problems

    def reload_config_file(self) -> list[str]:
        """Read ``model_config_file`` again and apply it if it differs from the running config (see
        :meth:`apply_config`, whose errors it raises; ``ModelConfigError`` also for a file that does not
        parse).  Returns the models that did not become available."""
        models = read_model_config_file(self.model_config_file)
        if {m.name: m for m in models} == {name: model.config for name, model in self.models.items()}:
            return []
        try:
            return self.apply_config(models)
        except ModelConfigError as e:
            raise ModelConfigError(f"{self.model_config_file}: {e}", e.code) from None

    def _poll_config_file(self):
        reported = None  # the last problem logged: a file that stays broken is reported once
        while not self._stop.wait(self.config_poll_seconds):
            try:
                problems = self.reload_config_file()
                problem = "; ".join(problems) or None
                message = f"{self.model_config_file}: {len(problems)} model(s) did not become available: {problem}"
            except ModelConfigError as e:
                problem = message = f"{e}; keeping the running model config"
            except Exception as e:  # keep polling whatever happens
                problem = message = f"{self.model_config_file}: {type(e).__name__}: {e}; keeping the running config"
            if problem is not None and problem != reported:
                logger.error("%s", message.replace("\n", " "))
            reported = problem

    # -- requests -----------------------------------------------------------------------------
    def handle(self, method: str, path: str, body: bytes | None = None) -> tuple:
        """Answer one REST request: ``(HTTP status, JSON-ready dict or Prometheus text)``.

        Never raises: client mistakes are 4xx ``{"error": ...}``, anything unexpected a logged 500.
        Requests addressed to a configured model are counted in :attr:`metrics`.
        """
        started = time.perf_counter()
        model = route = None
        signature = ""
        try:
            route = api.parse_route(method, path)
            if route.api == "metrics":
                return 200, self.metrics.render()
            model = self.models.get(route.model_name)
            if route.api == "status":
                model = self.find_model(route.model_name, route.servable())
                result = {"model_version_status": model.status(route.version, route.label)}
            else:
                model, loaded = self.resolve(route.model_name, route.version, route.label)
                if route.api == "metadata":
                    result = api.metadata_json(model.name, loaded)
                else:
                    request = api.parse_json_body(body or b"")
                    signature = api.signature_name_of(request, loaded, route.api)
                    if route.api == "predict":   # classify and regress are not batched
                        result = api.predict(loaded, request, self.max_batch_size, self.batch_chunk_size,
                                             self.batcher, max_response_bytes=self.max_response_bytes)
                    else:
                        result = api.INFERENCE_APIS[route.api](loaded, request, self.max_batch_size,
                                                               self.batch_chunk_size,
                                                               max_response_bytes=self.max_response_bytes)
            status = 200
        except api.RequestError as e:
            status, result = e.status, {"error": e.message}
        except RecursionError:
            status, result = 400, {"error": "Request nested too deeply"}
        except Exception as e:  # never let a request kill the server thread
            logger.exception("Unexpected error serving %s %s", method, path[:200])
            status, result = 500, {"error": f"{type(e).__name__}: {e}"}
        if model is not None:
            self.metrics.record(model.name, route.api, signature, status, time.perf_counter() - started)
        return status, result

    # -- lifecycle ----------------------------------------------------------------------------
    def _check_bound(self):
        if not self._bound:
            raise RuntimeError("server not started")

    @property
    def rest_api_port(self) -> int | None:
        """The bound REST port (useful with ``rest_api_port=0``); None when REST is off."""
        self._check_bound()
        return None if self._httpd is None else self._httpd.server_address[1]

    @property
    def grpc_port(self) -> int | None:
        """The bound gRPC port (useful with ``grpc_port=0``); None when gRPC is off."""
        self._check_bound()
        return None if self._grpc is None else self._grpc.port

    @property
    def url(self) -> str:
        """REST base URL, e.g. ``http://127.0.0.1:8501``."""
        if self.rest_api_port is None:
            raise RuntimeError("REST is off (rest_api_port=None)")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.rest_api_port}"

    @property
    def grpc_target(self) -> str:
        """gRPC target for ``grpc.insecure_channel``, e.g. ``127.0.0.1:8500``."""
        if self.grpc_port is None:
            raise RuntimeError("gRPC is off (grpc_port=None)")
        return self._grpc.target

    def bind(self) -> "ModelServer":
        """Bind the listening sockets (before loading anything); :class:`ServerStartError` if one cannot be."""
        if self._bound:
            return self
        if self.requested_rest_api_port is not None:
            try:
                self._httpd = HTTPServer((self.host, self.requested_rest_api_port), self)
            except (OSError, OverflowError) as e:
                reason = getattr(e, "strerror", None) or str(e)
                raise ServerStartError(
                    f"cannot listen on {self.host}:{self.requested_rest_api_port} (REST): {reason}") from None
        if self.requested_grpc_port is not None:
            from kerasplm.serving.grpc_service import GrpcServer  # grpcio and the serving protos: only for gRPC

            try:
                self._grpc = GrpcServer(self, self.host, self.requested_grpc_port, self.max_body_bytes,
                                        DEFAULT_GRPC_WORKERS, max_concurrent_calls=self.max_connections,
                                        handshake_timeout_seconds=self.header_timeout_seconds)
            except OSError as e:
                if self._httpd is not None:
                    self._httpd.server_close()
                    self._httpd = None
                raise ServerStartError(
                    f"cannot listen on {self.host}:{self.requested_grpc_port} (gRPC): {e}") from None
        self._bound = True
        return self

    def start(self) -> "ModelServer":
        """Bind, load every model's versions, then serve and poll in background threads."""
        if self._threads:
            raise RuntimeError("server already started")
        self.bind()
        if self.batcher is not None:
            self.batcher.open()
        for name, versions in self.refresh().items():
            if not versions:
                logger.warning("No loadable version of %s under %s yet; waiting for one",
                               name, self.models[name].config.base_path)
        self._stop.clear()
        self._threads = [threading.Thread(target=self._poll, name="kerasplm-serve-poll", daemon=True)]
        if self.config_poll_seconds > 0:
            self._threads.append(threading.Thread(target=self._poll_config_file, name="kerasplm-serve-config-poll",
                                                  daemon=True))
        if self._httpd is not None:
            self._threads.append(threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                                  name="kerasplm-serve-http", daemon=True))
        for thread in self._threads:
            thread.start()
        if self._grpc is not None:
            self._grpc.start()
        return self

    def stop(self, grace_seconds: float | None = None) -> bool:
        """Stop accepting, let REST requests and gRPC calls in flight finish (up to ``grace_seconds``,
        default ``shutdown_grace_seconds``), stop polling.  Returns False if some had to be cut off."""
        if not self._bound:
            return True
        grace = self.shutdown_grace_seconds if grace_seconds is None else grace_seconds
        deadline = time.monotonic() + grace
        self._stop.set()
        started = bool(self._threads)
        httpd, self._httpd = self._httpd, None
        grpc_server, self._grpc = self._grpc, None
        self._bound = False
        cut = 0
        if self.batcher is not None:  # queued requests run now rather than after their batch timeout
            self.batcher.flush()
        grpc_stopped = grpc_server.stop(grace if started else 0) if grpc_server is not None else None
        if httpd is not None:
            if started:
                httpd.stop_accepting()
                cut += httpd.drain(grace)
            httpd.server_close()
        if grpc_server is not None:
            grpc_stopped.wait(max(0.0, deadline - time.monotonic()) + 5)
            cut += grpc_server.cut_off()
            grpc_server.close()
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads = []
        if self.batcher is not None and not self.batcher.close(max(0.0, deadline - time.monotonic())):
            cut += 1  # a batch still running after the grace period
        if cut:
            logger.warning("%d request(s) still running after the %.0f s grace period were cut off", cut, grace)
        return cut == 0

    def wait(self):
        """Block until :meth:`stop` is called from another thread."""
        while not self._stop.wait(0.5):
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def serve(*args, **kwargs) -> bool:
    """Run a :class:`ModelServer` (same arguments) until SIGTERM or Ctrl-C; blocking.

    The ports are bound before any model loads (a taken port fails at once with
    :class:`ServerStartError`).  On SIGTERM/SIGINT the server stops accepting connections and calls,
    lets requests and calls in flight finish (``shutdown_grace_seconds``; a second signal cuts them
    off) and returns True if none was cut off.  The APIs are TF Serving's: REST
    ``POST http://host:rest_api_port/v1/models/<model_name>:predict``, gRPC
    ``tensorflow.serving.PredictionService`` / ``ModelService`` on ``host:grpc_port``.  One line per
    API on standard error says where it listens (``Serving gRPC on 127.0.0.1:8500 ...``, ``Serving
    http://127.0.0.1:8501/v1/models/<name> ...``).
    """
    server = ModelServer(*args, **kwargs)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server.bind()
    received = []

    def on_signal(signum, frame):  # only records it: the main loop below does the work
        received.append(signum)

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {}
    if in_main_thread:
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start()
        lines = []
        if server.grpc_port is not None:
            lines.append(f"Serving gRPC on {server.grpc_target} (models: {', '.join(server.models)})")
        if server.rest_api_port is not None:
            lines.append("Serving " + ", ".join(f"{server.url}/v1/models/{name}" for name in server.models))
        # One write: a reader who sees the last line sees them all.
        print("\n".join(lines) + " (Ctrl-C to stop)", file=sys.stderr, flush=True)
        while not received:
            time.sleep(0.2)
        logger.info("Received %s: finishing requests in flight (up to %.0f s), then exiting",
                    signal.Signals(received[0]).name, server.shutdown_grace_seconds)
        stopped, drained = threading.Event(), []
        threading.Thread(target=lambda: (drained.append(server.stop()), stopped.set()), daemon=True).start()
        signals_seen = len(received)
        while not stopped.wait(0.2):
            if len(received) > signals_seen:  # a second signal: do not wait for requests in flight
                logger.warning("Second signal: cutting off requests in flight")
                return False
        return drained[0]
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
