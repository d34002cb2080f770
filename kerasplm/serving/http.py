"""The HTTP/1.1 layer of ``kerasplm serve``: framing, JSON error bodies, logging, graceful drain.

Requests are read here and handed to :meth:`kerasplm.serving.ModelServer.handle` as
``(method, path, body bytes)``; the answer is written back as JSON (or Prometheus text).  What this
layer guarantees, whatever the client sends:

* every error the server sends has a JSON body ``{"error": ...}``, including the standard library's
  own error paths (unparsable request lines, unsupported methods such as TRACE/CONNECT, over-long
  headers);
* a header line that is not ``Name: value`` (which the standard library's parser would silently drop,
  with every header after it) and folded header lines get 400 and close the connection;
* request framing is never guessed: a POST without ``Content-Length`` gets 411, two
  ``Content-Length`` headers or a malformed one 400, any ``Transfer-Encoding`` 411; each of these
  closes the connection, so a body that was not read is never parsed as the next request.  A body
  over ``max_body_bytes`` gets 413 (also before it is sent, on ``Expect: 100-continue``) and is
  drained without being stored;
* logged request lines have control characters escaped; a client that disconnects early leaves no
  traceback in the log;
* at most ``max_connections`` connections are open (each holds a thread): one more is answered 503 at once
  by the accepting thread and closed, never queued, so a normal client gets an answer while slow ones fill
  the server;
* a request's line and headers must arrive within ``header_timeout`` seconds (counted from the accept for a
  connection's first request, from the first byte for later keep-alive requests): a client trickling bytes
  is answered 408 and closed.  A keep-alive connection idle between requests is closed after
  :attr:`_Handler.timeout`;
* :meth:`HTTPServer.drain` (on SIGTERM / Ctrl-C) lets requests in flight finish and closes idle
  keep-alive connections, so a process manager's stop never cuts a reply off.
"""
from __future__ import annotations

import io
import json
import logging
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kerasplm.serving.api import RequestError
from kerasplm.serving.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

logger = logging.getLogger(__name__)

# Control characters (C0, DEL, C1) shown as \xNN in the log: a request line must not forge log lines.
_CONTROL_CHARS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}


class _FramingError(RequestError):
    """A request whose body cannot be delimited: answered, then the connection is closed."""


def _shutdown_socket(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed by the other side
        pass


def _header_problem(headers) -> str | None:
    """Why a request's header block cannot be trusted, or None.

    The standard library's parser stops at the first line that is not ``Name: value`` and silently drops it and
    every header after it (``Content-Length`` included), which would let the body be read as a second request;
    a folded (obs-fold) continuation line is obsolete and ambiguous (RFC 9112 section 5.2). Both are refused.
    """
    dropped = headers.get_payload()
    if headers.defects or dropped:
        line = dropped.splitlines()[0] if dropped else ""
        return (f"Malformed header line {line[:80]!r}: every header line must be 'Name: value' with a name of "
                "token characters" if line else "Malformed header line: a header without a name")
    for name, value in headers.items():
        if "\n" in value or "\r" in value:
            return f"Header {name[:40]!r} is folded over several lines (obsolete line folding is not accepted)"
    return None


class _DeadlineReader(io.RawIOBase):
    """The socket as a raw stream whose reads stop at a deadline (the header block's), when one is set.

    A per-read timeout alone would let a client sending one byte every few seconds hold the connection
    forever; here each read waits at most until the deadline, then raises :class:`TimeoutError`.
    """

    def __init__(self, sock, header_timeout: float):
        super().__init__()
        self._sock = sock
        self.header_timeout = header_timeout
        self.deadline = None    # time.monotonic() by which the header block must have arrived
        self.arm_on_data = False  # start the deadline when the next byte arrives (a keep-alive request)
        self.received = 0       # bytes read since the deadline was set (none: an idle client, no 408)
        self.expired = False

    def start_deadline(self):
        self.deadline, self.arm_on_data, self.received = time.monotonic() + self.header_timeout, False, 0

    def readable(self):
        return True

    def readinto(self, buffer) -> int:
        if self.deadline is None:  # between header blocks: the socket's own (idle) timeout applies
            n = self._sock.recv_into(buffer)
            if n and self.arm_on_data:
                self.start_deadline()
                self.received = n
            return n
        idle_timeout = self._sock.gettimeout()
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.expired = True
            raise TimeoutError("request headers not received in time")
        self._sock.settimeout(remaining if idle_timeout is None else min(remaining, idle_timeout))
        try:
            n = self._sock.recv_into(buffer)
        except TimeoutError:
            self.expired = time.monotonic() >= self.deadline
            raise
        finally:
            self._sock.settimeout(idle_timeout)
        self.received += n
        return n


class _Connections:
    """The open connections and which of them are handling a request (for :meth:`HTTPServer.drain`)."""

    def __init__(self):
        self._changed = threading.Condition()
        self._open: dict = {}  # open connection (its handler) -> True while it handles a request
        self.draining = False

    def opened(self, handler):
        with self._changed:
            self._open[handler] = False
            if self.draining:  # accepted just before the listener closed: serve a request already sent
                handler.connection.settimeout(1.0)

    def closed(self, handler):
        with self._changed:
            self._open.pop(handler, None)
            self._changed.notify_all()

    def set_busy(self, handler, busy: bool):
        with self._changed:
            if handler in self._open:
                self._open[handler] = busy
            self._changed.notify_all()

    def drain(self, grace_seconds: float) -> int:
        """Close idle connections, wait up to ``grace_seconds`` for busy ones; returns how many were cut."""
        deadline = time.monotonic() + grace_seconds
        with self._changed:
            self.draining = True
            for handler, busy in self._open.items():
                if not busy:  # waiting for a next request that will not be served
                    _shutdown_socket(handler.connection)
            while self._open and self._changed.wait(max(0.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    break
            cut = [h for h, busy in self._open.items() if busy]
            for handler in self._open:
                _shutdown_socket(handler.connection)
        return len(cut)


class _Handler(BaseHTTPRequestHandler):
    """Reads one request at a time and passes it to the owning ModelServer."""

    protocol_version = "HTTP/1.1"
    server_version = "kerasplm-serve"
    timeout = 60  # seconds a client may stay silent before its connection is dropped

    @property
    def model_server(self):
        return self.server.model_server

    # -- connection bookkeeping -----------------------------------------------------------------
    def setup(self):
        super().setup()
        # The first request's line and headers are due header_timeout seconds after the accept.
        self._reader = _DeadlineReader(self.connection, self.model_server.header_timeout_seconds)
        self._reader.start_deadline()
        self.rfile = io.BufferedReader(self._reader)
        self._requests_started = 0
        self.server.connections.opened(self)

    def finish(self):
        try:
            super().finish()
        except OSError:  # the client is gone; nothing left to flush
            pass
        finally:
            self.server.connections.closed(self)

    def handle(self):
        try:
            super().handle()
        except (ConnectionError, TimeoutError):  # client disconnected or stalled: not a server error
            self.close_connection = True
        if self._reader.expired and self._reader.received:  # a request started but its headers were too slow
            for name, default in (("command", None), ("request_version", "HTTP/1.0"), ("requestline", "")):
                if not hasattr(self, name):  # the request line itself never completed
                    setattr(self, name, default)
            self.send_error(408, f"Request line and headers not received within "
                                 f"{self._reader.header_timeout:g} seconds")

    def parse_request(self):
        self.server.connections.set_busy(self, True)  # a request line has arrived
        if not super().parse_request():
            return False
        self._reader.deadline = None  # the header block is complete; the body has the idle timeout
        problem = _header_problem(self.headers)
        if problem:  # what follows cannot be trusted to belong to this request: answer and close
            self.send_error(400, problem)
            return False
        return True

    def handle_one_request(self):
        if self._requests_started:  # a keep-alive connection: idle until the next request's first byte
            self._reader.deadline, self._reader.arm_on_data = None, True
        self._requests_started += 1
        try:
            super().handle_one_request()
        finally:
            self.server.connections.set_busy(self, False)
            if self.server.connections.draining:
                self.close_connection = True

    # -- responses ------------------------------------------------------------------------------
    def _send(self, status: int, payload, close: bool = False):
        """Send a JSON object (or Prometheus text when ``payload`` is a str)."""
        if isinstance(payload, str):
            data, content_type = payload.encode("utf-8"), METRICS_CONTENT_TYPE
        else:
            data, content_type = json.dumps(payload).encode("utf-8"), "application/json"
        close = close or self.server.connections.draining
        if self.request_version == "HTTP/0.9":  # unparsable line (or a real 0.9 client): still send a status line
            self.request_version = "HTTP/1.0"
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except OSError:  # the client disconnected before reading its answer
            self.close_connection = True

    def send_error(self, code, message=None, explain=None):
        """The standard library's error path (bad request line, unknown method...), as JSON."""
        text = message or self.responses.get(code, ("Error",))[0]
        self.log_error("code %d, message %s", code, text)
        self._send(int(code), {"error": text}, close=True)

    def log_message(self, format, *args):  # noqa: A002  (BaseHTTPRequestHandler's signature)
        if not self.model_server.quiet:
            message = (format % args).translate(_CONTROL_CHARS)
            sys.stderr.write(f"{self.address_string()} - [{self.log_date_time_string()}] {message}\n")

    # -- requests -------------------------------------------------------------------------------
    def _dispatch(self, method: str):
        try:
            body = self._read_body() if method == "POST" else self._refuse_body()
        except RequestError as e:
            self._send(e.status, {"error": e.message}, close=True)
            if e.status == 413:
                self._discard_body(self._content_length() or 0)
            return
        status, payload = self.model_server.handle(method, self.path, body)
        self._send(status, payload)

    def _content_length(self) -> int | None:
        """The one valid Content-Length, None if absent; raises on duplicates or malformed values."""
        values = self.headers.get_all("Content-Length") or []
        if not values:
            return None
        if len(values) > 1:
            raise _FramingError(400, "Several Content-Length headers; send exactly one")
        text = values[0].strip()
        if not text.isdigit() or not text.isascii():
            raise _FramingError(400, f"Invalid Content-Length header: {text[:40]!r}")
        return int(text)

    def _check_transfer_encoding(self):
        if self.headers.get_all("Transfer-Encoding"):
            raise _FramingError(411, "Transfer-Encoding (e.g. chunked) is not supported; send Content-Length")

    def _refuse_body(self):
        """A GET/HEAD/... carries no body; if it announces one, answer and close afterwards."""
        self._check_transfer_encoding()
        if self._content_length():
            self.close_connection = True  # the unread body must not be parsed as a request
        return None

    def _read_body(self) -> bytes:
        """Read the request body (at most max_body_bytes)."""
        self._check_transfer_encoding()
        length = self._content_length()
        if length is None:
            raise _FramingError(411, "POST requires a Content-Length header")
        limit = self.model_server.max_body_bytes
        if length > limit:
            raise _FramingError(413, f"Request body of {length} bytes exceeds the limit of {limit} bytes")
        raw = self.rfile.read(length)
        if len(raw) < length:
            raise _FramingError(400, "Request body shorter than Content-Length")
        return raw

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
        """Refuse an oversized or unframed body before the client sends it (``Expect: 100-continue``)."""
        try:
            length = self._content_length()
        except RequestError as e:
            self._send(e.status, {"error": e.message}, close=True)
            return False
        limit = self.model_server.max_body_bytes
        if length is not None and length > limit:
            message = f"Request body of {length} bytes exceeds the limit of {limit} bytes"
            self._send(413, {"error": message}, close=True)
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


class HTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most ``model_server.max_connections`` of them; knows its connections so
    that :meth:`drain` can stop gracefully.

    A connection over the cap is answered 503 by the accepting thread itself (no thread is started for it;
    a new socket's send buffer is empty, so the short answer never blocks) and closed about a second later
    from the accept loop, after its request is read and dropped: closing a socket with unread data would
    reset the connection and could destroy the 503 before the client reads it.  Refusing (leaving the
    connection in the listen backlog) would instead make a normal client wait without an answer.
    """

    daemon_threads = True
    request_queue_size = 256  # listen backlog: bursts of clients must not be refused
    allow_reuse_address = True

    def __init__(self, address, model_server):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.model_server = model_server
        self.connections = _Connections()
        self._threads_lock = threading.Lock()
        self._connection_threads = 0  # started and not finished: compared with max_connections
        self._refused: list = []      # (socket, close after time.monotonic()) answered 503, not yet closed
        super().__init__(address, _Handler)

    # -- the connection cap -----------------------------------------------------------------------
    _REFUSED_LINGER_SECONDS = 1.0
    _MAX_REFUSED_OPEN = 64  # refused sockets kept open at once (file descriptors stay bounded too)

    def process_request(self, request, client_address):
        """Start a thread for the connection, or answer 503 when ``max_connections`` are already open."""
        with self._threads_lock:
            full = self._connection_threads >= self.model_server.max_connections
            if not full:
                self._connection_threads += 1
        if full:
            self._refuse(request, client_address)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # the thread did not start: the connection is closed by the caller
            self._thread_done()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._thread_done()

    def _thread_done(self):
        with self._threads_lock:
            self._connection_threads -= 1

    def _refuse(self, sock, client_address):
        limit = self.model_server.max_connections
        body = json.dumps({"error": f"Too many open connections (the limit is {limit}); retry later"}).encode()
        head = (f"HTTP/1.1 503 Service Unavailable\r\nServer: {_Handler.server_version}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\nRetry-After: 1\r\n\r\n").encode()
        try:
            sock.setblocking(False)
            sock.send(head + body)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the client is already gone
            self.shutdown_request(sock)
            return
        if len(self._refused) >= self._MAX_REFUSED_OPEN:
            self._close_refused(self._refused.pop(0)[0])
        self._refused.append((sock, time.monotonic() + self._REFUSED_LINGER_SECONDS))
        if not self.model_server.quiet:
            sys.stderr.write(f"{client_address[0]} - 503 Service Unavailable: {limit} connections already open\n")

    @staticmethod
    def _close_refused(sock):
        try:
            while sock.recv(1 << 16):  # drop what the client sent (non-blocking) so close sends FIN, not RST
                pass
        except OSError:
            pass
        sock.close()

    def service_actions(self):
        """Called by the accept loop (at least every half second): close refused connections whose time is up."""
        super().service_actions()
        now = time.monotonic()
        while self._refused and self._refused[0][1] <= now:
            self._close_refused(self._refused.pop(0)[0])

    def server_close(self):
        super().server_close()
        while self._refused:
            self._close_refused(self._refused.pop()[0])

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # a client that went away is not a server error
        logger.exception("Unexpected error handling a request from %s", client_address)

    def stop_accepting(self):
        """Stop the accept loop and close the listening socket (new connections are refused)."""
        self.connections.draining = True
        self.shutdown()
        self.socket.close()

    def drain(self, grace_seconds: float) -> int:
        """Finish requests in flight (up to ``grace_seconds``); returns how many had to be cut off."""
        return self.connections.drain(grace_seconds)
