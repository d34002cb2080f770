"""Request metrics in the Prometheus text exposition format (``GET /monitoring/prometheus/metrics``).

Named as TensorFlow Serving exports them, so dashboards written for it work unchanged::

    :tensorflow:serving:request_count{model_name, API, signature_name, status}      counter
    :tensorflow:serving:request_latency{model_name, API, entrypoint, signature_name}  histogram (µs)

With ``--enable_batching`` (and once a request was batched), TF Serving's batching session metrics too::

    :tensorflow:serving:batching_session:input_batch_size       histogram: rows per request queued
    :tensorflow:serving:batching_session:processed_batch_size   histogram: rows per merged call (padding included)
    :tensorflow:serving:batching_session:padding_size{execution_batch_size}  histogram: padding rows per call
    :tensorflow:serving:batching_session:wrapped_run_count      counter: signature calls the batcher made

``API`` is ``predict``, ``classify``, ``regress``, ``status`` or ``metadata``; ``status`` is the canonical
error code (``OK``, ``INVALID_ARGUMENT``, ``NOT_FOUND``...); ``entrypoint`` is ``REST`` or ``GRPC``; latency
is wall time in microseconds (TF Serving's unit) from the parsed request to the built response.  Only configured
model names are recorded (a client cannot grow the label set with made-up names), and
``signature_name`` is empty unless the request named a signature the served version has.
"""
from __future__ import annotations

import bisect
import threading

REQUEST_COUNT = ":tensorflow:serving:request_count"
REQUEST_LATENCY = ":tensorflow:serving:request_latency"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BATCHING_PREFIX = ":tensorflow:serving:batching_session:"
INPUT_BATCH_SIZE = BATCHING_PREFIX + "input_batch_size"
PROCESSED_BATCH_SIZE = BATCHING_PREFIX + "processed_batch_size"
PADDING_SIZE = BATCHING_PREFIX + "padding_size"
WRAPPED_RUN_COUNT = BATCHING_PREFIX + "wrapped_run_count"
BATCH_SIZE_BUCKETS = tuple(2**i for i in range(14))  # 1 .. 8192 rows

# Upper bounds in microseconds: 100 µs .. 60 s, about 2.5x apart (the last bucket is +Inf).
LATENCY_BUCKETS_US = (100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
                      500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000)

_HTTP_TO_CODE = {200: "OK", 400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "UNIMPLEMENTED",
                 413: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


def status_code_name(http_status: int) -> str:
    """The canonical (gRPC) code name TF Serving reports for an HTTP status."""
    return _HTTP_TO_CODE.get(http_status, "UNKNOWN")


def _escape(value) -> str:
    """A label value escaped for the text format (backslash, double quote, newline)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs) -> str:
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in pairs) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Metrics:
    """Thread-safe request counters and latency histograms; :meth:`render` gives the text format."""

    def __init__(self, buckets_us=LATENCY_BUCKETS_US):
        self.buckets_us = tuple(buckets_us)
        self._lock = threading.Lock()
        self._counts: dict = {}  # (model, api, signature, status) -> requests
        self._latency: dict = {}  # (model, api, entrypoint, signature) -> [bucket counts..., +Inf count, sum µs]
        self._batching: dict = {}  # (histogram name, labels) -> [bucket counts..., +Inf count, sum]
        self._wrapped_runs = None  # a count once the batcher made a call

    def _observe(self, name: str, labels: tuple, value: float):
        hist = self._batching.setdefault((name, labels), [0] * (len(BATCH_SIZE_BUCKETS) + 2))
        hist[bisect.bisect_left(BATCH_SIZE_BUCKETS, value)] += 1
        hist[-1] += value

    def record_batching_request(self, rows: int):
        """A request of ``rows`` rows was queued for batching."""
        with self._lock:
            self._observe(INPUT_BATCH_SIZE, (), rows)

    def record_batch(self, rows: int, padded_rows: int):
        """A merged batch of ``rows`` request rows ran as ``padded_rows`` rows."""
        with self._lock:
            self._observe(PROCESSED_BATCH_SIZE, (), padded_rows)
            self._observe(PADDING_SIZE, (("execution_batch_size", padded_rows),), padded_rows - rows)

    def record_batching_call(self):
        """The batcher called a signature (a merged batch, or a request run again on its own)."""
        with self._lock:
            self._wrapped_runs = (self._wrapped_runs or 0) + 1

    def record(self, model_name: str, api: str, signature_name: str, status, seconds: float,
               entrypoint: str = "REST"):
        """Count one request and add its latency; ``status`` is an HTTP status or a canonical code name."""
        micros = seconds * 1e6
        status = status_code_name(status) if isinstance(status, int) else str(status)
        with self._lock:
            key = (model_name, api, signature_name, status)
            self._counts[key] = self._counts.get(key, 0) + 1
            hist = self._latency.setdefault((model_name, api, entrypoint, signature_name),
                                            [0] * (len(self.buckets_us) + 2))
            hist[bisect.bisect_left(self.buckets_us, micros)] += 1
            hist[-1] += micros

    def render(self) -> str:
        """All metrics in the Prometheus text exposition format (version 0.0.4)."""
        with self._lock:
            counts = sorted(self._counts.items())
            latency = sorted((k, list(v)) for k, v in self._latency.items())
        lines = [f"# HELP {REQUEST_COUNT} The total number of requests, by model, API, signature and status.",
                 f"# TYPE {REQUEST_COUNT} counter"]
        for (model, api, signature, status), n in counts:
            labels = _labels([("model_name", model), ("API", api), ("signature_name", signature),
                              ("status", status)])
            lines.append(f"{REQUEST_COUNT}{labels} {n}")
        lines += [f"# HELP {REQUEST_LATENCY} Distribution of wall time (in microseconds) for requests.",
                  f"# TYPE {REQUEST_LATENCY} histogram"]
        for (model, api, entrypoint, signature), hist in latency:
            base = [("model_name", model), ("API", api), ("entrypoint", entrypoint), ("signature_name", signature)]
            cumulative = 0
            for bound, n in zip(self.buckets_us + (float("inf"),), hist[:-1]):
                cumulative += n
                le = "+Inf" if bound == float("inf") else _number(bound)
                lines.append(f"{REQUEST_LATENCY}_bucket{_labels(base + [('le', le)])} {cumulative}")
            lines.append(f"{REQUEST_LATENCY}_sum{_labels(base)} {_number(hist[-1])}")
            lines.append(f"{REQUEST_LATENCY}_count{_labels(base)} {cumulative}")
        lines += self._render_batching()
        return "\n".join(lines) + "\n"

    def _render_batching(self) -> list:
        with self._lock:
            hists = sorted((k, list(v)) for k, v in self._batching.items())
            runs = self._wrapped_runs
        lines = []
        helps = {INPUT_BATCH_SIZE: "Tracks the batch size distribution on the inputs.",
                 PROCESSED_BATCH_SIZE: "Tracks the batch size distribution on processing.",
                 PADDING_SIZE: "Tracks the padding size distribution on batches."}
        for name in (INPUT_BATCH_SIZE, PROCESSED_BATCH_SIZE, PADDING_SIZE):
            mine = [(labels, hist) for (n, labels), hist in hists if n == name]
            if not mine:
                continue
            lines += [f"# HELP {name} {helps[name]}", f"# TYPE {name} histogram"]
            for labels, hist in mine:
                cumulative = 0
                for bound, n in zip(BATCH_SIZE_BUCKETS + (float("inf"),), hist[:-1]):
                    cumulative += n
                    le = "+Inf" if bound == float("inf") else _number(bound)
                    lines.append(f"{name}_bucket{_labels(list(labels) + [('le', le)])} {cumulative}")
                lines.append(f"{name}_sum{_labels(labels) if labels else ''} {_number(hist[-1])}")
                lines.append(f"{name}_count{_labels(labels) if labels else ''} {cumulative}")
        if runs is not None:
            lines += [f"# HELP {WRAPPED_RUN_COUNT} Total count of run calls on the wrapped session",
                      f"# TYPE {WRAPPED_RUN_COUNT} counter", f"{WRAPPED_RUN_COUNT} {runs}"]
        return lines
