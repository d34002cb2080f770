"""Request metrics in the Prometheus text exposition format (``GET /monitoring/prometheus/metrics``).

Named as TensorFlow Serving exports them, so dashboards written for it work unchanged::

    :tensorflow:serving:request_count{model_name, API, signature_name, status}      counter
    :tensorflow:serving:request_latency{model_name, API, entrypoint, signature_name}  histogram (µs)

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
        return "\n".join(lines) + "\n"
