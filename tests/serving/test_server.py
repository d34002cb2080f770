"""kerasplm.serving: the TF Serving REST subset, driven over HTTP on loopback (one model, in process)."""
import base64
import json
import os
import shutil
import threading
import time
from http.client import HTTPConnection

import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from kerasplm import serving as srv
from tests.serving.client import http, predict, wait_for
from tests.serving.conftest import TOY_SIGNATURES, install_toy_version

MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def toy_model_server(tmp_path_factory, toy_saved_models):
    """A server for the toy model (version 3) shared by this module's read-only tests."""
    base = str(tmp_path_factory.mktemp("served") / "toy")
    install_toy_version(base, 3, toy_saved_models["upper"])
    server = srv.ModelServer(base, "toy", rest_api_port=0, grpc_port=None, max_body_bytes=MAX_BODY,
                             poll_seconds=0.2, quiet=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def toy_url(toy_model_server):
    return f"{toy_model_server.url}/v1/models/toy"


def test_binds_loopback(toy_model_server):
    assert toy_model_server.url == f"http://127.0.0.1:{toy_model_server.rest_api_port}"
    assert toy_model_server.grpc_port is None  # gRPC off
    with pytest.raises(RuntimeError, match="gRPC is off"):
        toy_model_server.grpc_target


def test_model_status(toy_url):
    status, body = http("GET", toy_url)
    assert status == 200
    assert body == {
        "model_version_status": [
            {"version": "3", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        ]
    }
    assert http("GET", f"{toy_url}/versions/3") == (200, body)
    status, err = http("GET", f"{toy_url}/versions/2")
    assert status == 404 and "Specific(toy, 2)" in err["error"]


def test_metadata(toy_url):
    status, body = http("GET", f"{toy_url}/metadata")
    assert status == 200
    assert body["model_spec"] == {"name": "toy", "signature_name": "", "version": "3"}
    sigs = body["metadata"]["signature_def"]["signature_def"]
    assert set(sigs) == {"serving_default", *TOY_SIGNATURES}
    default = sigs["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    inputs = default["inputs"]["inputs"]
    assert inputs["dtype"] == "DT_STRING"
    assert inputs["tensor_shape"] == {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False}
    assert isinstance(inputs["name"], str) and inputs["name"].endswith(":0")
    assert default["outputs"]["outputs"]["dtype"] == "DT_STRING"
    assert sigs["repeat"]["inputs"]["times"]["dtype"] == "DT_INT32"
    assert sigs["repeat"]["inputs"]["times"]["tensor_shape"] == {"dim": [], "unknown_rank": False}
    assert sigs["analyze"]["outputs"]["num_words"]["dtype"] == "DT_INT64"
    assert sigs["scale"]["inputs"]["values"]["dtype"] == "DT_FLOAT"
    assert sigs["scale"]["inputs"]["values"]["tensor_shape"]["dim"] == [
        {"size": "-1", "name": ""}, {"size": "2", "name": ""}
    ]
    assert http("GET", f"{toy_url}/versions/3/metadata") == (200, body)


def test_row_format_single_input_and_output(toy_url):
    assert predict(toy_url, {"instances": ["hello", "wörld"]}) == (200, {"predictions": ["HELLO", "WöRLD"]})
    # Named instances and an explicit version/signature work too.
    body = {"signature_name": "serving_default", "instances": [{"inputs": "a"}, {"inputs": "b"}]}
    assert predict(toy_url, body, version=3) == (200, {"predictions": ["A", "B"]})


def test_row_format_multiple_inputs_and_outputs(toy_url):
    body = {"signature_name": "repeat", "instances": [{"inputs": "ab", "times": 2}, {"inputs": "c", "times": 2}]}
    assert predict(toy_url, body) == (200, {"predictions": ["ab ab", "c c"]})
    status, out = predict(toy_url, {"signature_name": "analyze", "instances": ["a b", "c"]})
    assert status == 200
    assert out["predictions"] == [
        {"echo_bytes": {"b64": base64.b64encode(b"a b").decode()}, "num_words": 2, "upper": "A B"},
        {"echo_bytes": {"b64": base64.b64encode(b"c").decode()}, "num_words": 1, "upper": "C"},
    ]
    # A scalar option must agree across instances.
    body = {"signature_name": "repeat", "instances": [{"inputs": "a", "times": 1}, {"inputs": "b", "times": 2}]}
    status, err = predict(toy_url, body)
    assert status == 400 and "times" in err["error"]


def test_columnar_format(toy_url):
    assert predict(toy_url, {"inputs": ["x", "y"]}) == (200, {"outputs": ["X", "Y"]})
    assert predict(toy_url, {"inputs": {"inputs": ["x"]}}) == (200, {"outputs": ["X"]})
    body = {"signature_name": "repeat", "inputs": {"inputs": ["x", "y"], "times": 3}}
    assert predict(toy_url, body) == (200, {"outputs": ["x x x", "y y y"]})
    status, out = predict(toy_url, {"signature_name": "analyze", "inputs": ["one two three"]})
    assert status == 200
    assert out["outputs"]["upper"] == ["ONE TWO THREE"] and out["outputs"]["num_words"] == [3]
    body = {"signature_name": "scale", "inputs": {"values": [[1, 2], [3.5, -1]], "factor": 2}}
    assert predict(toy_url, body) == (200, {"outputs": [[2.0, 4.0], [7.0, -2.0]]})


def test_b64_inputs_and_invalid_utf8(toy_url):
    raw = b"ab\xff"
    b64 = {"b64": base64.b64encode(raw).decode()}
    status, out = predict(toy_url, {"instances": [b64]})
    assert status == 200 and out == {"predictions": ["AB\ufffd"]}
    status, out = predict(toy_url, {"signature_name": "analyze", "inputs": [b64]})
    assert status == 200
    assert base64.b64decode(out["outputs"]["echo_bytes"][0]["b64"]) == raw
    status, err = predict(toy_url, {"instances": [{"b64": "not base64!"}]})
    assert status == 400 and "base64" in err["error"]


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"signature_name": "nope", "instances": ["a"]}, "nope"),
        ({"instances": ["a"], "inputs": ["a"]}, "exactly one"),
        ({"signature_name": "serving_default"}, "exactly one"),
        ({"instances": []}, "non-empty"),
        ({"instances": [{"wrong": "a"}]}, "wrong"),
        ({"signature_name": "repeat", "inputs": {"inputs": ["a"]}}, "times"),
        ({"signature_name": "repeat", "instances": ["a"]}, "object"),
        ({"inputs": [1, 2]}, "strings"),
        ({"signature_name": "scale", "inputs": {"values": [1.0, 2.0], "factor": 1}}, "shape"),
        ({"signature_name": "scale", "inputs": {"values": [["a", "b"]], "factor": 1}}, "DT_FLOAT"),
    ],
)
def test_bad_requests_are_400(toy_url, body, fragment):
    status, err = predict(toy_url, body)
    assert status == 400
    assert fragment in err["error"]


def test_unknown_signature_lists_available(toy_url):
    status, err = predict(toy_url, {"signature_name": "nope", "instances": ["a"]})
    assert status == 400
    assert all(name in err["error"] for name in ("serving_default", *TOY_SIGNATURES))


def test_malformed_json(toy_url):
    for raw in (b"{not json", b"\xff\xfe", b"[1, 2]", b""):
        status, err = http("POST", f"{toy_url}:predict", raw=raw)
        assert status == 400 and "JSON" in err["error"], raw


def test_model_rejecting_its_input_is_400(toy_url):
    # TF Serving maps INVALID_ARGUMENT (a failed tf.debugging assertion here) to HTTP 400.
    status, err = predict(toy_url, {"signature_name": "repeat", "inputs": {"inputs": ["a"], "times": -1}})
    assert status == 400
    assert "times must be >= 0" in err["error"]


def test_unknown_model_version_and_path(toy_model_server, toy_url):
    base = toy_model_server.url
    status, err = http("GET", f"{base}/v1/models/other")
    assert status == 404 and "other" in err["error"]
    assert http("POST", f"{base}/v1/models/other:predict", {"instances": ["a"]})[0] == 404
    assert predict(toy_url, {"instances": ["a"]}, version=7)[0] == 404
    assert http("GET", f"{base}/v2/whatever")[0] == 404
    assert http("POST", f"{toy_url}:explode", {"instances": ["a"]})[0] == 404


def test_wrong_method_is_405(toy_url):
    assert http("GET", f"{toy_url}:predict")[0] == 405
    assert http("POST", toy_url, {"instances": ["a"]})[0] == 405
    assert http("DELETE", f"{toy_url}/metadata")[0] == 405
    assert http("PUT", f"{toy_url}:predict", {"instances": ["a"]})[0] == 405


def test_oversized_body_is_413_and_server_survives(toy_url):
    big = json.dumps({"instances": ["x" * (4 * MAX_BODY)]}).encode()
    status, err = http("POST", f"{toy_url}:predict", raw=big)
    assert status == 413 and str(MAX_BODY) in err["error"]
    # A client announcing a huge body but never sending it is answered without waiting for it.
    host, port = toy_url.split("/")[2].split(":")
    for expect in (False, True):
        conn = HTTPConnection(host, int(port), timeout=10)
        conn.putrequest("POST", "/v1/models/toy:predict")
        conn.putheader("Content-Length", str(10**12))
        if expect:  # what curl sends with large bodies
            conn.putheader("Expect", "100-continue")
        conn.endheaders()
        response = conn.getresponse()
        assert response.status == 413
        assert "exceeds the limit" in json.loads(response.read())["error"]
        conn.close()
    assert predict(toy_url, {"instances": ["still alive"]}) == (200, {"predictions": ["STILL ALIVE"]})


def test_concurrent_requests(toy_url):
    n = 50
    results = [None] * n

    def worker(i):
        try:
            results[i] = predict(toy_url, {"instances": [f"req{i}", "x"]})
        except Exception as e:  # recorded, then reported by the assertion below
            results[i] = e

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [(200, {"predictions": [f"REQ{i}", "X"]}) for i in range(n)]


def test_new_version_is_picked_up_without_restart(toy_export_dir, toy_saved_models):
    server = srv.ModelServer(toy_export_dir, "toy",
                             rest_api_port=0, grpc_port=None, poll_seconds=0.2, quiet=True).start()
    try:
        url = f"{server.url}/v1/models/toy"
        assert predict(url, {"instances": ["abc"]}) == (200, {"predictions": ["ABC"]})
        # Ignored: a half-written version (no saved_model.pb), a temporary sibling, a non-integer name.
        half = os.path.join(toy_export_dir, "5")
        os.makedirs(os.path.join(half, "variables"))
        install_toy_version(toy_export_dir, 6, toy_saved_models["reverse"])
        os.rename(os.path.join(toy_export_dir, "6"), os.path.join(toy_export_dir, ".tmp-6-x"))
        install_toy_version(toy_export_dir, 7, toy_saved_models["reverse"])
        os.rename(os.path.join(toy_export_dir, "7"), os.path.join(toy_export_dir, "latest"))
        assert srv.list_versions(toy_export_dir) == [1]
        time.sleep(3 * server.poll_seconds)  # several polls
        assert server.model("toy").versions == [1]
        assert predict(url, {"instances": ["abc"]}) == (200, {"predictions": ["ABC"]})

        # A complete new version (tmp sibling, then rename) replaces it; requests keep working.
        install_toy_version(toy_export_dir, 2, toy_saved_models["reverse"])
        answers = []
        model = server.model("toy")
        assert wait_for(lambda: answers.append(predict(url, {"instances": ["abc"]})) or model.versions == [2])
        assert all(a in ((200, {"predictions": ["ABC"]}), (200, {"predictions": ["CBA"]})) for a in answers)
        assert predict(url, {"instances": ["abc"]}) == (200, {"predictions": ["CBA"]})
        assert http("GET", url)[1]["model_version_status"][0]["version"] == "2"
        assert predict(url, {"instances": ["abc"]}, version=2)[0] == 200
        assert predict(url, {"instances": ["abc"]}, version=1)[0] == 404

        # A broken newer version is skipped; version 2 keeps serving.
        broken = os.path.join(toy_export_dir, ".tmp-9")
        os.makedirs(broken)
        with open(os.path.join(broken, "saved_model.pb"), "wb") as f:
            f.write(b"not a saved model")
        os.rename(broken, os.path.join(toy_export_dir, "9"))
        assert wait_for(lambda: 9 in server.model("toy").failed_versions, timeout=10)
        assert server.model("toy").versions == [2]
        assert predict(url, {"instances": ["abc"]}) == (200, {"predictions": ["CBA"]})
    finally:
        server.stop()


def test_request_lines_logged_unless_quiet(toy_export_dir, capsys):
    server = srv.ModelServer(toy_export_dir, "toy", rest_api_port=0, grpc_port=None, quiet=False).start()
    try:
        http("GET", f"{server.url}/v1/models/toy")
    finally:
        server.stop()
    assert '"GET /v1/models/toy HTTP/1.1" 200' in capsys.readouterr().err


def _write_warmup(version_dir, logs):
    path = os.path.join(version_dir, "assets.extra", "tf_serving_warmup_requests")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for log in logs:
            writer.write(log.SerializeToString())


def _predict_log(signature, **inputs):
    log = prediction_log_pb2.PredictionLog()
    log.predict_log.request.model_spec.signature_name = signature
    for name, value in inputs.items():
        log.predict_log.request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return log


def test_warmup_records_replay_before_a_version_is_available(tmp_path, toy_saved_models, caplog):
    """TF Serving's warmup file is replayed while the version loads: the version is AVAILABLE only afterwards (here the
    record sleeps 600 ms in the graph); a record the model rejects fails the version (END, the error named), and the
    previous version keeps serving."""
    base = str(tmp_path / "toy")
    _write_warmup(install_toy_version(base, 1, toy_saved_models["upper"]), [
        _predict_log("slow", inputs=tf.constant(["warm"]), milliseconds=tf.constant(600, tf.int64)),
        _predict_log("", inputs=tf.constant(["a", "b"]))])
    server = srv.ModelServer(base, "toy", rest_api_port=0, grpc_port=None, poll_seconds=0.2, quiet=True)
    started = time.monotonic()
    with caplog.at_level("INFO", logger="kerasplm.serving.models"):
        server.start()
    try:
        assert time.monotonic() - started >= 0.6
        assert any("Replayed 2 warmup record(s)" in r.getMessage() for r in caplog.records)
        status, body = http("GET", f"{server.url}/v1/models/toy")
        assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"
        _write_warmup(install_toy_version(base, 2, toy_saved_models["reverse"]),
                      [_predict_log("repeat", inputs=tf.constant(["x"]), times=tf.constant(-1))])
        assert wait_for(lambda: 2 in server.model("toy").failed_versions, timeout=30)
        status, body = http("GET", f"{server.url}/v1/models/toy/versions/2")
        assert status == 200 and body["model_version_status"][0]["state"] == "END"
        assert "times must be >= 0" in body["model_version_status"][0]["status"]["error_message"]
        status, body = predict(f"{server.url}/v1/models/toy", {"instances": ["ok"]})
        assert status == 200 and body == {"predictions": ["OK"]}   # version 1 (upper-casing) still serves
    finally:
        server.stop()


def test_a_half_copied_version_is_retried_once_its_files_are_complete(tmp_path, toy_saved_models):
    """A deploy by ``cp -r`` lands saved_model.pb before variables/: the version fails to load (END) while version 1
    keeps serving, and is loaded once the copy completes, without touching saved_model.pb again."""
    base = str(tmp_path / "toy")
    install_toy_version(base, 1, toy_saved_models["upper"])
    server = srv.ModelServer(base, "toy", rest_api_port=0, grpc_port=None, poll_seconds=0.2, quiet=True)
    server.start()
    try:
        partial = os.path.join(base, "2")
        os.makedirs(partial)
        shutil.copy2(os.path.join(toy_saved_models["reverse"], "saved_model.pb"), partial)  # no variables/ yet
        assert wait_for(lambda: 2 in server.model("toy").failed_versions, timeout=30)
        assert predict(f"{server.url}/v1/models/toy", {"instances": ["ab"]}) == (200, {"predictions": ["AB"]})
        for name in os.listdir(toy_saved_models["reverse"]):
            source = os.path.join(toy_saved_models["reverse"], name)
            if name != "saved_model.pb":
                (shutil.copytree if os.path.isdir(source) else shutil.copy2)(source, os.path.join(partial, name))
        assert wait_for(lambda: server.model("toy").versions == [2], timeout=30), server.model("toy").failed_versions
        assert predict(f"{server.url}/v1/models/toy", {"instances": ["ab"]}) == (200, {"predictions": ["BA"]})
    finally:
        server.stop()
