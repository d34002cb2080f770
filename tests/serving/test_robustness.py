"""Issue 15 through a real ``kerasplm serve`` subprocess on 127.0.0.1 (OS-chosen port, bounded waits).

One server (two toy models from a model config file) is shared by the request tests; the SIGTERM and
port tests start their own processes.
"""
import json
import re
import select
import signal
import socket
import threading
import time

import pytest

from tests.serving.client import (CLIServer, closed_by_server, http, parse_prometheus, predict, read_response,
                                  wait_for)
from tests.serving.conftest import install_toy_version

MAX_BATCH = 100
MAX_CONNECTIONS = 4
HEADER_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def cli_server(tmp_path_factory, toy_saved_models):
    root = tmp_path_factory.mktemp("cli_server")
    install_toy_version(str(root / "toy"), 1, toy_saved_models["upper"])
    install_toy_version(str(root / "rev"), 1, toy_saved_models["reverse"])
    (root / "models.config").write_text(
        'model_config_list {\n'
        '  config { name: "toy" base_path: "toy" }\n'
        '  config { name: "rev" base_path: "rev" model_version_policy { all {} } }\n'
        '}\n')
    server = CLIServer(["--model_config_file", str(root / "models.config"), "--max-batch-size", str(MAX_BATCH),
                        "--batch-chunk-size", "16",
                        "--max-connections", str(MAX_CONNECTIONS), "--header-timeout-seconds", str(HEADER_TIMEOUT)],
                       root / "serve.log").wait_ready()
    yield server
    server.close()


def _raw(server, request: bytes, check_closed=True):
    """Send raw bytes on a new connection; returns (status, headers, JSON body, closed by the server?)."""
    with server.connect() as sock:
        sock.sendall(request)
        status, headers, body = read_response(sock)
        return status, headers, json.loads(body), check_closed and closed_by_server(sock)


def test_serves_both_configured_models(cli_server):
    assert predict(f"{cli_server.url}/v1/models/toy", {"instances": ["abc"]}) == (200, {"predictions": ["ABC"]})
    assert predict(f"{cli_server.url}/v1/models/rev", {"instances": ["abc"]}) == (200, {"predictions": ["CBA"]})
    with socket.create_connection(("127.0.0.1", cli_server.rest_api_port)) as sock:
        sock.sendall(b"GET /monitoring/prometheus/metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, body = read_response(sock)
    samples = parse_prometheus(body.decode())
    labels = frozenset(dict(model_name="rev", API="predict", signature_name="serving_default", status="OK").items())
    assert status == 200 and samples[(":tensorflow:serving:request_count", labels)] >= 1


# ---- 1. bounded work per request -----------------------------------------------------------------
def test_rows_per_request_are_capped(cli_server):
    url = f"{cli_server.url}/v1/models/toy"
    for body in ({"instances": ["hola"] * 20000}, {"inputs": ["hola"] * 20000}):
        status, err = predict(url, body)
        assert status == 400 and f"has 20000 rows; the limit is {MAX_BATCH} per request" in err["error"]
    # At the cap the request is served (in chunks of 16 rows), with every row in order.
    texts = [f"row {i}" for i in range(MAX_BATCH)]
    assert predict(url, {"instances": texts}) == (200, {"predictions": [t.upper() for t in texts]})


# ---- 3. integers outside their dtype ------------------------------------------------------------
@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"signature_name": "repeat", "inputs": {"inputs": ["a"], "times": 4294967299}}, "out of range"),
        ({"signature_name": "repeat", "inputs": {"inputs": ["a"], "times": True}}, "not integers"),
        ({"signature_name": "repeat", "inputs": {"inputs": ["a"], "times": 2.0}}, "expects integers"),
        ({"signature_name": "repeat", "instances": [{"inputs": "a", "times": 4294967298}]}, "out of range"),
        ({"signature_name": "add", "inputs": {"values": [1], "delta": 200}}, "out of range [-128, 127]"),
        ({"signature_name": "add", "inputs": {"values": [2**63], "delta": 1}}, "out of range"),
        ({"signature_name": "scale", "inputs": {"values": [[1, True]], "factor": 1}}, "expects numbers"),
    ],
)
def test_out_of_range_values_are_400(cli_server, body, fragment):
    status, err = predict(f"{cli_server.url}/v1/models/toy", body)
    assert status == 400 and fragment in err["error"], err


# ---- 4. nesting and huge numbers ------------------------------------------------------------------
def test_deep_nesting_and_huge_versions_are_4xx_json(cli_server):
    url = f"{cli_server.url}/v1/models/toy"
    for raw in (b"[" * 100_000, b'{"instances": ' + b"[" * 100_000, b'{"a":' * 50_000,
                b'{"instances": [' + b"9" * 5000 + b"]}"):
        status, err = http("POST", f"{url}:predict", raw=raw)
        assert status == 400 and "JSON Parse error" in err["error"], err
    status, err = http("GET", f"{url}/versions/{'5' * 5000}")
    assert status == 400 and "Invalid version" in err["error"] and len(err["error"]) < 200
    assert predict(url, {"instances": ["ok"]}) == (200, {"predictions": ["OK"]})


# ---- 5. request framing ---------------------------------------------------------------------------
def test_post_without_content_length_is_411_and_closes(cli_server):
    second = b'GET /v1/models/toy HTTP/1.1\r\nHost: x\r\n\r\n'  # must never be run as a request
    request = b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\n\r\n" + second
    with cli_server.connect() as sock:
        sock.sendall(request)
        status, headers, body = read_response(sock)
        assert status == 411 and headers["connection"] == "close"
        assert "Content-Length" in json.loads(body)["error"]
        assert closed_by_server(sock)  # no second response


@pytest.mark.parametrize(
    "headers, status, fragment",
    [
        (b"Content-Length: 2\r\nContent-Length: 2\r\n", 400, "Several Content-Length"),
        (b"Content-Length: 2\r\nContent-Length: 40\r\n", 400, "Several Content-Length"),
        (b"Content-Length: +2\r\n", 400, "Invalid Content-Length"),
        (b"Content-Length: 0x2\r\n", 400, "Invalid Content-Length"),
        (b"Transfer-Encoding: chunked\r\n", 411, "Transfer-Encoding"),
        (b"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n", 411, "Transfer-Encoding"),
    ],
)
def test_ambiguous_framing_is_rejected_and_closes(cli_server, headers, status, fragment):
    request = b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n{}GET / HTTP/1.1\r\n\r\n"
    got, response_headers, body, closed = _raw(cli_server, request)
    assert got == status and fragment in body["error"]
    assert response_headers["connection"] == "close" and closed


SMUGGLED = b"GET /v1/models/nope HTTP/1.1\r\nHost: x\r\n\r\n"  # 41 bytes: must never be answered


@pytest.mark.parametrize("bad_line, fragment", [
    (b"X Bad: y\r\n", "Malformed header line 'X Bad: y'"),          # a space in the name
    (b"NoColonHere\r\n", "Malformed header line 'NoColonHere'"),
    (b": no name\r\n", "a header without a name"),
    (b"X-Folded: a\r\n  continued\r\n", "folded"),                 # obs-fold
])
def test_a_malformed_header_line_is_400_and_closes(cli_server, bad_line, fragment):
    """The standard library's parser would drop the malformed line and every header after it (Content-Length too),
    and the body would then be read as a second request (request smuggling)."""
    request = (b"GET /v1/models/toy HTTP/1.1\r\nHost: x\r\n" + bad_line
               + f"Content-Length: {len(SMUGGLED)}\r\n\r\n".encode() + SMUGGLED)
    status, headers, body, closed = _raw(cli_server, request)
    assert status == 400 and fragment in body["error"], body
    assert headers["connection"] == "close" and closed   # the smuggled request got no answer


def test_get_with_a_body_closes_after_answering(cli_server):
    request = (b"GET /v1/models/toy HTTP/1.1\r\nHost: x\r\nContent-Length: 39\r\n\r\n"
               b"GET /v1/models/nope HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, body, closed = _raw(cli_server, request)
    assert status == 200 and body["model_version_status"][0]["version"] == "1" and closed


def test_keep_alive_still_works(cli_server):
    body = json.dumps({"instances": ["a"]}).encode()
    request = (b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    with cli_server.connect() as sock:
        for _ in range(3):
            sock.sendall(request)
            status, headers, answer = read_response(sock)
            assert status == 200 and json.loads(answer) == {"predictions": ["A"]}
            assert headers.get("connection") != "close"


# ---- 6. logs and error bodies ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "request_line, status",
    [(b"TRACE / HTTP/1.1", 501), (b"CONNECT example.com:443 HTTP/1.1", 501), (b"\x16\x03\x01garbage", 400),
     (b"GET / HTTP/9.9", 505), (b"BREW /pot HTTP/1.1", 501)],
)
def test_every_error_has_a_json_body(cli_server, request_line, status):
    got, headers, body, _ = _raw(cli_server, request_line + b"\r\nHost: x\r\n\r\n")
    assert got == status and headers["content-type"] == "application/json" and body["error"]


def test_control_characters_are_escaped_in_the_log(cli_server):
    marker = b"esc\x1b[31mred\x07bell"
    status, _, _, _ = _raw(cli_server, b"GET /v1/models/" + marker + b" HTTP/1.1\r\nHost: x\r\n\r\n", False)
    assert status == 404
    time.sleep(0.3)
    log = cli_server.log()
    assert "esc\\x1b[31mred\\x07bell" in log
    assert "\x1b" not in log and "\x07" not in log


def test_clients_that_disconnect_leave_no_traceback(cli_server):
    body = json.dumps({"signature_name": "slow", "inputs": {"inputs": ["x"], "milliseconds": 300}}).encode()
    request = (b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    for _ in range(3):
        sock = cli_server.connect()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close = RST
        sock.sendall(request)
        sock.close()  # gone before the answer is written
    time.sleep(1.5)
    assert predict(f"{cli_server.url}/v1/models/toy", {"instances": ["x"]}) == (200, {"predictions": ["X"]})
    log = cli_server.log()
    assert "Traceback" not in log and "BrokenPipe" not in log and "ConnectionReset" not in log, log[-2000:]


# ---- 2. SIGTERM: requests in flight finish, exit 0 --------------------------------------------------
def test_sigterm_lets_requests_in_flight_finish_then_exits_0(tmp_path, toy_saved_models):
    base = str(tmp_path / "toy")
    install_toy_version(base, 1, toy_saved_models["upper"])
    runs = 3
    servers = [CLIServer(["--model-base-path", base, "--model-name", "toy"], tmp_path / f"serve{i}.log")
               for i in range(runs)]  # started together: their start-up (importing TensorFlow) overlaps
    try:
        for server in servers:
            server.wait_ready()
            url = f"{server.url}/v1/models/toy"
            idle = server.connect()  # a keep-alive connection with no request in flight
            idle.sendall(b"GET /v1/models/toy HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(idle)[0] == 200
            results = {}

            def slow_request(i):
                body = {"signature_name": "slow", "inputs": {"inputs": [f"req{i}"], "milliseconds": 1500}}
                results[i] = (predict(url, body), time.monotonic())

            threads = [threading.Thread(target=slow_request, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            time.sleep(0.7)  # both requests are now sleeping inside the graph
            signalled = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            for t in threads:
                t.join(timeout=30)
            assert server.proc.wait(timeout=30) == 0, server.log()[-3000:]
            for i in range(2):
                (status, body), finished = results[i]
                assert (status, body) == (200, {"outputs": [f"REQ{i}"]})
                assert finished > signalled  # it was in flight when the signal came
            assert closed_by_server(idle)  # the idle keep-alive connection was closed, not left hanging
            idle.close()
            with pytest.raises(OSError):  # no longer accepting
                socket.create_connection(("127.0.0.1", server.rest_api_port), timeout=5).close()
            assert "Traceback" not in server.log()
    finally:
        for server in servers:
            server.close()


# ---- 7. the port is checked before any model loads ----------------------------------------------
def test_port_in_use_is_one_line_exit_2_before_loading(tmp_path, toy_saved_models):
    import subprocess
    import sys

    base = str(tmp_path / "toy")
    install_toy_version(base, 1, toy_saved_models["upper"])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        started = time.monotonic()
        # The REST port taken, then the gRPC port (--port): each refused in one line, before loading.
        runs = [(["--rest_api_port", str(port), "--port", "0"], "REST"),
                (["--rest_api_port", "0", "--port", str(port)], "gRPC")]
        procs = [subprocess.Popen([sys.executable, "-m", "kerasplm.cli", "serve", "--model-base-path", base, *ports],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for ports, _ in runs]
        outputs = [proc.communicate(timeout=120) for proc in procs]
    # TensorFlow's and gRPC's own log lines (absl format "I0000 00:00:... file.cc:N] ...": CUDA stubs, oneDNN
    # on AVX-512 CPUs, gRPC's bind failure) are not kerasplm's output.
    tf_log = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\] |^WARNING: All log messages before absl::")
    for proc, (_, stderr), (_, api_name) in zip(procs, outputs, runs):
        assert proc.returncode == 2, stderr
        lines = [line for line in stderr.splitlines() if not tf_log.match(line)]
        assert lines == [f"kerasplm: error: cannot listen on 127.0.0.1:{port} ({api_name}): Address already in use"
                         ], stderr
    assert time.monotonic() - started < 120


def test_port_out_of_range_is_one_line_exit_2(capsys):
    from kerasplm import cli

    for port in ("70000", "-1", "http"):
        with pytest.raises(SystemExit) as info:
            cli.main(["serve", "--model-base-path", "/nonexistent", "--port", port])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--port" in err and "expected" in err, err


# ---- connections: a cap, and a deadline for the request line and headers -------------------------
def _threads(server) -> int:
    with open(f"/proc/{server.proc.pid}/status") as f:
        return int(re.search(r"^Threads:\s+(\d+)$", f.read(), re.M).group(1))


def _status_ok(server) -> bool:
    try:
        return http("GET", f"{server.url}/v1/models/toy", timeout=5)[0] == 200
    except OSError:  # e.g. reset by a full server
        return False


def _trickle(sock, data: bytes, interval: float) -> float:
    """Send ``data`` one byte per ``interval`` seconds until the server answers or closes (bounded by
    len(data)); returns the seconds until then (or until every byte was sent)."""
    started = time.monotonic()
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
        except OSError:  # closed by the server
            break
        if select.select([sock], [], [], interval)[0]:
            break
    return time.monotonic() - started


def test_a_trickling_client_is_cut_off_at_the_header_deadline(cli_server):
    assert wait_for(lambda: _status_ok(cli_server), timeout=10)
    trickled = b"GET /v1/models/toy HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"z" * 40  # 1 byte / 0.25 s: 20 s
    with cli_server.connect() as sock:
        elapsed = _trickle(sock, trickled, 0.25)
        status, headers, body = read_response(sock)
        assert status == 408 and "not received within 1 seconds" in json.loads(body)["error"]
        assert headers["connection"] == "close" and closed_by_server(sock, timeout=2)
    assert HEADER_TIMEOUT - 0.1 < elapsed < HEADER_TIMEOUT + 1.0, elapsed
    # A connection that sends nothing is closed at the same deadline, without an answer.
    with cli_server.connect() as sock:
        started = time.monotonic()
        assert closed_by_server(sock, timeout=5)
        assert HEADER_TIMEOUT - 0.1 < time.monotonic() - started < HEADER_TIMEOUT + 1.0
    # A kept-alive connection idle between requests is not cut by the header deadline (its idle timeout
    # applies); its next request's headers are due HEADER_TIMEOUT after their first byte.
    with cli_server.connect() as sock:
        sock.sendall(b"GET /v1/models/toy HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock)[0] == 200
        time.sleep(HEADER_TIMEOUT + 0.3)  # idle: still open afterwards (the 408 below is read from it)
        elapsed = _trickle(sock, trickled, 0.25)
        assert read_response(sock)[0] == 408 and closed_by_server(sock, timeout=2)
        assert HEADER_TIMEOUT - 0.1 < elapsed < HEADER_TIMEOUT + 1.0, elapsed


def test_connections_over_the_cap_get_503_at_once(cli_server):
    assert wait_for(lambda: _status_ok(cli_server), timeout=10)
    time.sleep(0.2)  # the last request's connection thread has ended
    threads_before = _threads(cli_server)
    slow = [cli_server.connect() for _ in range(MAX_CONNECTIONS)]  # the cap, filled by trickling clients
    extra = []
    try:
        for sock in slow:
            sock.sendall(b"GET /v1/mod")
        time.sleep(0.2)
        started = time.monotonic()
        extra = [cli_server.connect(timeout=5) for _ in range(10)]  # all open at once, complete requests
        for sock in extra:
            sock.sendall(b"GET /v1/models/toy HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.2)
        assert _threads(cli_server) <= threads_before + MAX_CONNECTIONS  # no thread for the extra ones
        for sock in extra:  # each answered at once by the accepting thread, none queued
            status, headers, body = read_response(sock)
            assert status == 503 and headers["connection"] == "close", (status, body)
            assert json.loads(body) == {
                "error": f"Too many open connections (the limit is {MAX_CONNECTIONS}); retry later"}
            assert closed_by_server(sock, timeout=3)
        assert time.monotonic() - started < HEADER_TIMEOUT  # before the deadline freed any slot
        assert http("GET", f"{cli_server.url}/v1/models/toy", timeout=5)[0] == 503  # a normal client: answered
    finally:
        for sock in slow + extra:
            sock.close()
    # The slow clients' slots are freed (here by their close; a trickling one's at its header deadline).
    assert wait_for(lambda: _status_ok(cli_server), timeout=5)


def test_slow_clients_free_their_slots_at_the_header_deadline(cli_server):
    assert wait_for(lambda: _status_ok(cli_server), timeout=10)
    slow = [cli_server.connect() for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in slow:
            sock.sendall(b"GET /v1/mod")
        time.sleep(0.2)
        assert http("GET", f"{cli_server.url}/v1/models/toy", timeout=5)[0] == 503
        started = time.monotonic()
        assert wait_for(lambda: _status_ok(cli_server), timeout=HEADER_TIMEOUT + 3, interval=0.2)
        assert time.monotonic() - started < HEADER_TIMEOUT + 1.5
        for sock in slow:  # each was answered 408 and closed
            assert read_response(sock)[0] == 408 and closed_by_server(sock, timeout=2)
    finally:
        for sock in slow:
            sock.close()
