"""Test helpers: an HTTP client for the server, a strict Prometheus text parser, a `kerasplm serve` subprocess."""
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def http(method, url, body=None, raw=None, timeout=30):
    """Send a request; returns (status, decoded JSON body)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.loads(e.read())


def predict(url, body, version=None):
    if version is not None:
        url = f"{url}/versions/{version}"
    return http("POST", f"{url}:predict", body)


def wait_for(condition, timeout=30.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return False


SAMPLE_RE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{[^}]*\})? (?P<value>[-+0-9.eE]+|\+Inf|NaN)$')


def parse_prometheus(text: str) -> dict:
    """Parse the text exposition format strictly: ``{(name, frozenset(labels)): value}``; TYPE lines checked."""
    assert text.endswith("\n")
    samples, typed = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "histogram", "gauge") and name not in typed
            typed[name] = kind
            continue
        if line.startswith("# HELP "):
            continue
        match = SAMPLE_RE.match(line)
        assert match, f"not a sample line: {line!r}"
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match["labels"] or ""))
        family = match["name"] if match["name"] in typed else re.sub(r"_(bucket|sum|count)$", "", match["name"])
        assert family in typed, f"sample before its TYPE line: {line!r}"
        samples[(match["name"], labels)] = float(match["value"])
    return samples


class CLIServer:
    """``python -m kerasplm.cli serve ARGS --rest_api_port 0 --port 0`` in a subprocess; the OS picks the
    ports, which are read from the server's start-up lines (``grpc=False``: ``--port off``, REST only).
    stderr goes to ``log_path`` (read it with :meth:`log`)."""

    def __init__(self, args, log_path, grpc=True):
        self.log_path = str(log_path)
        self._log = open(self.log_path, "wb")
        self.grpc = grpc
        env = {**os.environ, "PYTHONPATH": REPO_ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
        ports = ["--rest_api_port", "0", "--port", "0" if grpc else "off"]
        self.proc = subprocess.Popen([sys.executable, "-m", "kerasplm.cli", "serve", *args, *ports],
                                     stdout=subprocess.DEVNULL, stderr=self._log, env=env, cwd=REPO_ROOT)
        self.url = None
        self.grpc_target = None

    def log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")

    def wait_ready(self, timeout=180.0) -> "CLIServer":
        """Wait (bounded) for the 'Serving http://127.0.0.1:PORT/...' line (and, with gRPC, the
        'Serving gRPC on 127.0.0.1:PORT' line printed with it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            log = self.log()
            match = re.search(r"Serving (http://127\.0\.0\.1:\d+)/", log)
            grpc_match = re.search(r"Serving gRPC on (127\.0\.0\.1:\d+) ", log)
            if match and (grpc_match or not self.grpc):
                self.url = match.group(1)
                self.grpc_target = grpc_match.group(1) if grpc_match else None
                return self
            time.sleep(0.1)
        raise AssertionError(f"kerasplm serve did not start (exit {self.proc.poll()}):\n{self.log()[-3000:]}")

    @property
    def rest_api_port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def connect(self, timeout=30.0) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.rest_api_port), timeout=timeout)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._log.close()


def read_response(sock) -> tuple:
    """Read one HTTP response from a raw socket: (status, headers dict (lower-case), body bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed before a full response: {data!r}")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", 0))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body[:length]


def closed_by_server(sock, timeout=10.0) -> bool:
    """True if the server closed the connection (EOF) with nothing more to read."""
    sock.settimeout(timeout)
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
