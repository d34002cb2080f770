"""ModelServer: several models behind TensorFlow Serving's REST API, polled, with graceful shutdown."""
from __future__ import annotations

import logging
import signal
import sys
import threading
import time

from kerasplm.serving import api
from kerasplm.serving.defaults import (DEFAULT_MAX_BODY_BYTES, DEFAULT_POLL_SECONDS, DEFAULT_PORT,
                                       DEFAULT_SHUTDOWN_GRACE_SECONDS)
from kerasplm.serving.config import ModelConfig, read_model_config_file
from kerasplm.serving.http import HTTPServer
from kerasplm.serving.metrics import Metrics
from kerasplm.serving.models import ServedModel

logger = logging.getLogger(__name__)



class ServerStartError(RuntimeError):
    """The server could not start (e.g. the port is taken); the message is one line."""


class ModelServer:
    """Serves SavedModels over TF Serving's REST API from a background thread.

    Give the models as TF Serving does, exactly one of:

    * ``model_base_path`` (and ``model_name``, default the directory's name): one model;
    * ``model_config_file``: a text-format ``model_config_list`` (see :mod:`kerasplm.serving.config`);
    * ``models``: a list of :class:`~kerasplm.serving.config.ModelConfig`.

    ``start()`` binds ``host:port`` first (``port=0``: a free port, see :attr:`port` / :attr:`url`),
    then loads every model's versions, then serves; base paths are polled every ``poll_seconds``.
    ``stop()`` stops accepting, lets requests in flight finish for up to ``shutdown_grace_seconds``
    and returns True if none had to be cut off.  Also a context manager.

    ``handle(method, path, body)`` answers one request without HTTP (``(status, payload)``).
    """

    def __init__(
        self,
        model_base_path: str | None = None,
        model_name: str | None = None,
        *,
        model_config_file: str | None = None,
        models: list[ModelConfig] | None = None,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_batch_size: int = api.DEFAULT_MAX_BATCH_SIZE,
        batch_chunk_size: int = api.DEFAULT_BATCH_CHUNK_SIZE,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        shutdown_grace_seconds: float = DEFAULT_SHUTDOWN_GRACE_SECONDS,
        quiet: bool = False,
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
                            ("batch_chunk_size", batch_chunk_size), ("poll_seconds", poll_seconds)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if shutdown_grace_seconds < 0:
            raise ValueError(f"shutdown_grace_seconds must be >= 0, got {shutdown_grace_seconds}")
        if not 0 <= int(port) <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {port}")
        self.models = {m.name: ServedModel(m) for m in models}
        self.host = host
        self.requested_port = int(port)
        self.max_body_bytes = int(max_body_bytes)
        self.max_batch_size = int(max_batch_size)
        self.batch_chunk_size = int(batch_chunk_size)
        self.poll_seconds = float(poll_seconds)
        self.shutdown_grace_seconds = float(shutdown_grace_seconds)
        self.quiet = quiet
        self.metrics = Metrics()
        self._stop = threading.Event()
        self._httpd: HTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # -- versions -----------------------------------------------------------------------------
    def model(self, name: str) -> ServedModel:
        """The served model called ``name`` (KeyError if not configured)."""
        return self.models[name]

    def refresh(self) -> dict:
        """Poll every base path once; returns ``{model name: loaded versions, newest first}``."""
        return {name: model.refresh() for name, model in self.models.items()}

    def _poll(self):
        while not self._stop.wait(self.poll_seconds):
            for model in self.models.values():
                try:
                    model.refresh()
                except Exception:  # keep polling whatever happens
                    logger.exception("Polling %s failed", model.config.base_path)

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
            if model is None:
                raise api.RequestError(404, f"Servable not found for request: {route.servable()}")
            if route.api == "status":
                result = {"model_version_status": model.status(route.version, route.label)}
            else:
                loaded = model.find(route.version, route.label)
                if route.api == "metadata":
                    result = api.metadata_json(model.name, loaded)
                else:
                    request = api.parse_json_body(body or b"")
                    signature = api.signature_name_of(request, loaded)
                    result = api.predict(loaded, request, self.max_batch_size, self.batch_chunk_size)
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

    def bind(self) -> "ModelServer":
        """Bind the listening socket (before loading anything); :class:`ServerStartError` if it cannot."""
        if self._httpd is None:
            try:
                self._httpd = HTTPServer((self.host, self.requested_port), self)
            except (OSError, OverflowError) as e:
                reason = getattr(e, "strerror", None) or str(e)
                raise ServerStartError(f"cannot listen on {self.host}:{self.requested_port}: {reason}") from None
        return self

    def start(self) -> "ModelServer":
        """Bind, load every model's versions, then serve and poll in background threads."""
        if self._threads:
            raise RuntimeError("server already started")
        self.bind()
        for name, versions in self.refresh().items():
            if not versions:
                logger.warning("No loadable version of %s under %s yet; waiting for one",
                               name, self.models[name].config.base_path)
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                             name="kerasplm-serve-http", daemon=True),
            threading.Thread(target=self._poll, name="kerasplm-serve-poll", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, grace_seconds: float | None = None) -> bool:
        """Stop accepting, let requests in flight finish (up to ``grace_seconds``, default
        ``shutdown_grace_seconds``), stop polling.  Returns False if requests had to be cut off."""
        if self._httpd is None:
            return True
        grace = self.shutdown_grace_seconds if grace_seconds is None else grace_seconds
        self._stop.set()
        httpd, self._httpd = self._httpd, None
        cut = 0
        if self._threads:
            httpd.stop_accepting()
            cut = httpd.drain(grace)
        httpd.server_close()
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads = []
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

    The port is bound before any model loads (a taken port fails at once with
    :class:`ServerStartError`).  On SIGTERM/SIGINT the server stops accepting connections, lets
    requests in flight finish (``shutdown_grace_seconds``; a second signal cuts them off) and
    returns True if none was cut off.  The REST API is TF Serving's:
    ``POST http://host:port/v1/models/<model_name>:predict``.
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
        names = ", ".join(f"{server.url}/v1/models/{name}" for name in server.models)
        print(f"Serving {names} (Ctrl-C to stop)", file=sys.stderr, flush=True)
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
