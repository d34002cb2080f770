"""`kerasplm serve`'s gRPC API through TF Serving's official stubs (tensorflow-serving-api), against a real
`kerasplm serve` process serving a model_config_list: a tiny translator export and the toy model (versions 1
and 2, label "stable"). Predict equals the REST answer for the same inputs; GetModelMetadata and
GetModelStatus; TF Serving's status codes for bad requests; export/README.md's client block run verbatim;
SIGTERM with a call in flight (last: it stops the module's server).

One server process for the module; the translator is exported while it starts (the server polls for it)."""
import contextlib
import io
import os
import re
import signal
import socket
import time
import urllib.request
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2, get_model_status_pb2,
                                     model_management_pb2, model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc)

from kerasplm.serving import ModelServer
from tests.export.tiny_exports import export_tiny_translator
from tests.serving.client import REPO_ROOT, CLIServer, http, predict as rest_predict, wait_for
from tests.serving.conftest import install_toy_version
from tests.serving.grpc_client import json_outputs, model_status

MAX_BATCH = 8
MAX_BODY = 256 * 1024
SENTENCES = ["Hace mucho frío aquí.", "¿Puedo tomar prestado este libro?", "Esta es mi vida.",
             "¿Todavía están en casa?", "Trata de averiguarlo."]
CONFIG = """model_config_list {
  config { name: "translator" base_path: "translator" }
  config {
    name: "toy"
    base_path: "toy"
    model_version_policy { all {} }
    version_labels { key: "stable" value: 1 }
  }
}
"""
AVAILABLE = get_model_status_pb2.ModelVersionStatus.AVAILABLE


def _translator_available(model_stub):
    try:
        statuses = model_status(model_stub, "translator").model_version_status
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND, e
        return False
    return any(s.state == AVAILABLE for s in statuses)


@pytest.fixture(scope="module")
def served(tmp_path_factory, toy_saved_models):
    root = tmp_path_factory.mktemp("grpc")
    install_toy_version(str(root / "toy"), 1, toy_saved_models["upper"])
    install_toy_version(str(root / "toy"), 2, toy_saved_models["reverse"])
    os.makedirs(root / "translator")
    (root / "models.config").write_text(CONFIG)
    server = CLIServer(["--model_config_file", str(root / "models.config"), "--max-batch-size", str(MAX_BATCH),
                        "--batch-chunk-size", "3", "--max-body-bytes", str(MAX_BODY), "--poll-seconds", "0.3",
                        "--shutdown-grace-seconds", "20"], root / "serve.log")
    channel = None
    try:
        export_tiny_translator(str(root / "translator"), SENTENCES)  # while the server imports TensorFlow
        server.wait_ready()
        channel = grpc.insecure_channel(server.grpc_target)
        model_stub = model_service_pb2_grpc.ModelServiceStub(channel)
        assert wait_for(lambda: _translator_available(model_stub), timeout=120), server.log()[-3000:]
        yield SimpleNamespace(cli=server, channel=channel, model_stub=model_stub,
                              stub=prediction_service_pb2_grpc.PredictionServiceStub(channel))
    finally:
        if channel is not None:
            channel.close()
        server.close()


def _tensor(value):
    """A TensorProto from a TensorProto, a (value, dtype) pair or a value (dtype inferred)."""
    if isinstance(value, tensor_pb2.TensorProto):
        return value
    if isinstance(value, tuple):
        return tf.make_tensor_proto(value[0], dtype=value[1])
    return tf.make_tensor_proto(value)


def _int64_values(values, shape):
    """An int64 TensorProto with these values (int64_val) and this shape, whether or not they fill it."""
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT64)
    proto.tensor_shape.dim.extend([tensor_shape_pb2.TensorShapeProto.Dim(size=n) for n in shape])
    proto.int64_val.extend(values)
    return proto


def _request(model, signature="", inputs=None, version=None, label=None, output_filter=()):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    if signature:
        request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    if label is not None:
        request.model_spec.version_label = label
    for name, value in (inputs or {}).items():
        request.inputs[name].CopyFrom(_tensor(value))
    request.output_filter.extend(output_filter)
    return request


def _rest_outputs(served, model, body, outputs, version=None):
    status, answer = rest_predict(f"{served.cli.url}/v1/models/{model}", body, version=version)
    assert status == 200, answer
    return answer["outputs"] if len(outputs) > 1 else {next(iter(outputs)): answer["outputs"]}


# ---- Predict: the same answers as REST ---------------------------------------------------------------
def test_translator_predict_equals_rest(served):
    response = served.stub.Predict(_request("translator", inputs={"inputs": SENTENCES}), timeout=120)
    assert response.model_spec.name == "translator" and response.model_spec.version.value == 1
    assert response.model_spec.signature_name == "serving_default"
    got = json_outputs(response)
    assert got == _rest_outputs(served, "translator", {"inputs": SENTENCES}, got)
    assert len(got["translation"]) == len(SENTENCES)

    rows = len(SENTENCES)
    inputs = {"inputs": SENTENCES, "beam_size": ([2] * rows, tf.int32), "max_length": ([0] * rows, tf.int32)}
    response = served.stub.Predict(_request("translator", "translate", inputs), timeout=120)
    got = json_outputs(response)
    rest = _rest_outputs(served, "translator", {"signature_name": "translate",
                                                "inputs": {"inputs": SENTENCES, "beam_size": [2] * rows,
                                                           "max_length": [0] * rows}},
                         got)
    assert set(got) == {"translation", "score"} and got == rest


@pytest.mark.parametrize("signature, grpc_inputs, json_inputs", [
    ("analyze", {"inputs": ["two words", "héllo", ""]}, {"inputs": ["two words", "héllo", ""]}),
    ("scale", {"values": np.array([[1, 2], [3, 4.5]], np.float32), "factor": (2.0, tf.float32)},
     {"values": [[1, 2], [3, 4.5]], "factor": 2.0}),
    ("add", {"values": (np.array([1, 2**40, -5]), tf.int64), "delta": (3, tf.int8)},
     {"values": [1, 2**40, -5], "delta": 3}),
    # 5 rows, 3 per signature call: chunked, ragged outputs padded across chunks, on both sides alike.
    ("split", {"inputs": ["a b c d", "e", "", "f g", "h i j"]}, {"inputs": ["a b c d", "e", "", "f g", "h i j"]}),
    ("total", {"inputs": ["x", "y"]}, {"inputs": ["x", "y"]}),  # a scalar output: one call
    # One value for the whole shape (what tf.make_tensor_proto(7, shape=[3]) writes).
    ("add", {"values": _int64_values([7], [3]), "delta": (1, tf.int8)}, {"values": [7, 7, 7], "delta": 1}),
])
def test_toy_predict_equals_rest(served, signature, grpc_inputs, json_inputs):
    response = served.stub.Predict(_request("toy", signature, grpc_inputs, version=1), timeout=60)
    got = json_outputs(response)
    assert got == _rest_outputs(served, "toy", {"signature_name": signature, "inputs": json_inputs}, got, version=1)


def test_versions_labels_and_output_filter(served):
    def outputs(**spec):
        response = served.stub.Predict(_request("toy", inputs={"inputs": ["abc"]}, **spec), timeout=60)
        return response.model_spec.version.value, tf.make_ndarray(response.outputs["outputs"]).tolist()

    assert outputs() == (2, [b"CBA"])  # latest
    assert outputs(version=1) == (1, [b"ABC"])
    assert outputs(version=2) == (2, [b"CBA"])
    assert outputs(label="stable") == (1, [b"ABC"])
    response = served.stub.Predict(_request("toy", "analyze", {"inputs": ["a b"]}, output_filter=["num_words"]),
                                   timeout=60)
    assert list(response.outputs) == ["num_words"] and tf.make_ndarray(response.outputs["num_words"]).tolist() == [2]


# ---- GetModelMetadata, GetModelStatus ------------------------------------------------------------------
def test_get_model_metadata_lists_the_signatures_as_rest_does(served):
    for model in ("translator", "toy"):
        request = get_model_metadata_pb2.GetModelMetadataRequest(model_spec={"name": model},
                                                                 metadata_field=["signature_def"])
        response = served.stub.GetModelMetadata(request, timeout=60)
        signature_defs = get_model_metadata_pb2.SignatureDefMap()
        assert response.metadata["signature_def"].Unpack(signature_defs)
        status, rest = http("GET", f"{served.cli.url}/v1/models/{model}/metadata")
        assert status == 200
        assert response.model_spec.name == model and str(response.model_spec.version.value) == \
            rest["model_spec"]["version"]
        rest_defs = rest["metadata"]["signature_def"]["signature_def"]
        assert set(signature_defs.signature_def) == set(rest_defs)
        for name, signature in signature_defs.signature_def.items():
            assert signature.method_name == rest_defs[name]["method_name"] == "tensorflow/serving/predict"
            for side in ("inputs", "outputs"):
                tensors = getattr(signature, side)
                assert set(tensors) == set(rest_defs[name][side])
                for key, info in tensors.items():
                    expected = rest_defs[name][side][key]
                    assert types_pb2.DataType.Name(info.dtype) == expected["dtype"]
                    assert info.name == expected["name"]
                    assert [d.size for d in info.tensor_shape.dim] == \
                        [int(d["size"]) for d in expected["tensor_shape"]["dim"]]


def test_get_model_status_says_available(served):
    versions = model_status(served.model_stub, "toy").model_version_status
    assert [(s.version, s.state, s.status.error_code) for s in versions] == [(2, AVAILABLE, 0), (1, AVAILABLE, 0)]
    assert [s.version for s in model_status(served.model_stub, "toy", version={"value": 1}).model_version_status] == [1]
    assert [s.version for s in model_status(served.model_stub, "toy",
                                            version_label="stable").model_version_status] == [1]
    translator = model_status(served.model_stub, "translator").model_version_status
    assert [(s.version, s.state) for s in translator] == [(1, AVAILABLE)]


# ---- TF Serving's status codes --------------------------------------------------------------------------
def _int8_out_of_range():
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT8)
    proto.int_val.append(300)
    return proto


BAD_PREDICTS = {
    "unknown model": (_request("nope", inputs={"inputs": ["a"]}), "NOT_FOUND", "Latest(nope)"),
    "unknown version": (_request("toy", inputs={"inputs": ["a"]}, version=7), "NOT_FOUND", "Specific(toy, 7)"),
    "unknown label": (_request("toy", inputs={"inputs": ["a"]}, label="canary"), "NOT_FOUND", "canary"),
    "unknown signature": (_request("toy", "nope", {"inputs": ["a"]}), "FAILED_PRECONDITION", "nope"),
    "wrong input name": (_request("toy", inputs={"text": ["a"]}), "INVALID_ARGUMENT", "'text'"),
    "missing input": (_request("toy", "scale", {"values": np.ones([1, 2], np.float32)}), "INVALID_ARGUMENT",
                      "'factor'"),
    "wrong dtype": (_request("toy", "scale", {"values": np.ones([1, 2], np.float32), "factor": (2, tf.int32)}),
                    "INVALID_ARGUMENT", "DT_INT32"),
    "floats for strings": (_request("toy", inputs={"inputs": np.ones([2], np.float32)}), "INVALID_ARGUMENT",
                           "DT_STRING"),
    "wrong shape": (_request("toy", "scale", {"values": np.ones([3], np.float32), "factor": (2.0, tf.float32)}),
                    "INVALID_ARGUMENT", "shape"),
    "non-UTF-8 text": (_request("toy", inputs={"inputs": (["ok", b"\xff\xfe"], tf.string)}), "INVALID_ARGUMENT",
                       "UTF-8"),
    "int8 out of range": (_request("toy", "add", {"values": (np.array([1]), tf.int64),
                                                  "delta": _int8_out_of_range()}), "INVALID_ARGUMENT", "delta"),
    "values that do not fill the shape": (_request("toy", "add", {"values": _int64_values([1, 2], [3]),
                                                                  "delta": (0, tf.int8)}), "INVALID_ARGUMENT",
                                          "2 values for shape [3]"),
    "model's own check": (_request("toy", "repeat", {"inputs": ["a"], "times": (-1, tf.int32)}),
                          "INVALID_ARGUMENT", "times must be >= 0"),
    "unknown output_filter": (_request("toy", inputs={"inputs": ["a"]}, output_filter=["nope"]),
                              "INVALID_ARGUMENT", "nope"),
    "more rows than the cap": (_request("toy", inputs={"inputs": ["a"] * (MAX_BATCH + 1)}), "RESOURCE_EXHAUSTED",
                               f"limit is {MAX_BATCH}"),
    "message over --max-body-bytes": (_request("toy", inputs={"inputs": ["x" * (MAX_BODY + 1)]}),
                                      "RESOURCE_EXHAUSTED", ""),
}


@pytest.mark.parametrize("case", list(BAD_PREDICTS))
def test_bad_predicts_get_tf_servings_codes(served, case):
    request, code, fragment = BAD_PREDICTS[case]
    with pytest.raises(grpc.RpcError) as info:
        served.stub.Predict(request, timeout=60)
    assert info.value.code() == getattr(grpc.StatusCode, code), info.value.details()
    assert fragment in info.value.details()


def test_other_calls_codes(served):
    def code(call, request):
        with pytest.raises(grpc.RpcError) as info:
            call(request, timeout=60)
        return info.value.code(), info.value.details()

    metadata = get_model_metadata_pb2.GetModelMetadataRequest
    assert code(served.stub.GetModelMetadata, metadata(model_spec={"name": "toy"}))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT  # no metadata_field
    assert code(served.stub.GetModelMetadata, metadata(model_spec={"name": "toy"}, metadata_field=["x"]))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    assert code(served.stub.GetModelMetadata, metadata(model_spec={"name": "nope"},
                                                       metadata_field=["signature_def"]))[0] == \
        grpc.StatusCode.NOT_FOUND
    status = get_model_status_pb2.GetModelStatusRequest
    assert code(served.model_stub.GetModelStatus, status(model_spec={"name": "nope"}))[0] == grpc.StatusCode.NOT_FOUND
    assert code(served.model_stub.GetModelStatus, status(model_spec={"name": "toy", "version": {"value": 9}}))[0] \
        == grpc.StatusCode.NOT_FOUND
    got, details = code(served.stub.Classify, classification_pb2.ClassificationRequest(model_spec={"name": "toy"}))
    assert got == grpc.StatusCode.INVALID_ARGUMENT and "method_name to be tensorflow/serving/classify" in details
    # A reload request without a model_config_list (tests/serving/test_reload.py reloads for real).
    assert code(served.model_stub.HandleReloadConfigRequest, model_management_pb2.ReloadConfigRequest()) == (
        grpc.StatusCode.INVALID_ARGUMENT, "ServerModelConfig type not supported by HandleReloadConfigRequest. Only "
                                          "ModelConfigList is currently supported")


def test_grpc_calls_are_in_the_metrics(served):
    served.stub.Predict(_request("toy", inputs={"inputs": ["m"]}), timeout=60)
    with pytest.raises(grpc.RpcError):
        served.stub.Predict(_request("toy", inputs={"inputs": ["m"]}, version=7), timeout=60)
    with urllib.request.urlopen(f"{served.cli.url}/monitoring/prometheus/metrics", timeout=30) as response:
        status, text = response.status, response.read().decode()
    assert status == 200
    assert re.search(r':tensorflow:serving:request_latency_count\{model_name="toy",API="predict",entrypoint="GRPC",'
                     r'signature_name="serving_default"\} [1-9]', text), text
    assert 'model_name="toy",API="predict",signature_name="",status="NOT_FOUND"' in text


# ---- export/README.md's client, verbatim ------------------------------------------------------------------
def test_readme_grpc_client_runs(served):
    with open(os.path.join(REPO_ROOT, "export", "README.md"), encoding="utf-8") as f:
        block = re.search(r"<!-- grpc-client -->\s*```python\n(.*?)```", f.read(), re.S)
    assert block, "export/README.md lacks the <!-- grpc-client --> block"
    code = block.group(1)
    assert '"localhost:8500"' in code
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace("localhost:8500", served.cli.grpc_target), "export/README.md", "exec"), {})
    lines = printed.getvalue().splitlines()
    status, body = rest_predict(f"{served.cli.url}/v1/models/translator", {
        "signature_name": "translate", "inputs": {"inputs": ["Hace mucho frío aquí."], "beam_size": [2], "max_length": [0]}})
    assert status == 200
    assert lines == [repr(body["outputs"]["translation"]),
                     repr(["metadata", "serving_default", "translate", "translate_with_attention"]),
                     "[(1, 'AVAILABLE')]"]


# ---- either API alone, in process ------------------------------------------------------------------------
def test_grpc_only_model_server(tmp_path, toy_saved_models):
    base = str(tmp_path / "toy")
    install_toy_version(base, 1, toy_saved_models["upper"])
    with ModelServer(base, "toy", rest_api_port=None, grpc_port=0, quiet=True) as server:
        assert server.rest_api_port is None and server.grpc_port > 0
        with pytest.raises(RuntimeError, match="REST is off"):
            server.url
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            response = stub.Predict(_request("toy", inputs={"inputs": ["abc"]}), timeout=60)
            assert tf.make_ndarray(response.outputs["outputs"]).tolist() == [b"ABC"]
        assert server.stop() is True
    with pytest.raises(ValueError, match="both None"):
        ModelServer(base, "toy", rest_api_port=None, grpc_port=None)


def test_calls_over_max_connections_are_resource_exhausted_and_handshakes_have_a_deadline(tmp_path, toy_saved_models):
    """gRPC serves connections without a thread each: ``max_connections`` bounds its calls in progress instead."""
    base = str(tmp_path / "toy")
    install_toy_version(base, 1, toy_saved_models["upper"])
    with ModelServer(base, "toy", rest_api_port=None, grpc_port=0, quiet=True, max_connections=2,
                     header_timeout_seconds=1) as server:
        # --header-timeout-seconds is the HTTP/2 handshake deadline: a connection that sends only the
        # connection preface (no SETTINGS) is closed after it.
        with socket.create_connection(("127.0.0.1", server.grpc_port), timeout=10) as sock:
            sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            started = time.monotonic()
            while sock.recv(4096):  # bounded by the socket timeout
                pass
            assert 0.9 < time.monotonic() - started < 3
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            slow = _request("toy", "slow", {"inputs": ["late"], "milliseconds": (1000, tf.int64)})
            in_flight = [stub.Predict.future(slow, timeout=60) for _ in range(2)]
            time.sleep(0.3)  # both calls are now running
            with pytest.raises(grpc.RpcError) as info:  # refused at once, not queued
                stub.Predict(_request("toy", inputs={"inputs": ["abc"]}), timeout=10)
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            for future in in_flight:
                assert tf.make_ndarray(future.result(timeout=60).outputs["outputs"]).tolist() == [b"LATE"]
            response = stub.Predict(_request("toy", inputs={"inputs": ["abc"]}), timeout=60)  # a slot is free again
            assert tf.make_ndarray(response.outputs["outputs"]).tolist() == [b"ABC"]


# ---- SIGTERM (last: it stops the module's server) -------------------------------------------------------
def test_sigterm_lets_a_call_in_flight_finish(served):
    request = _request("toy", "slow", {"inputs": ["late"], "milliseconds": (1500, tf.int64)}, version=1)
    future = served.stub.Predict.future(request, timeout=60)
    finished = []
    future.add_done_callback(lambda _: finished.append(time.monotonic()))
    time.sleep(0.7)  # the call is now sleeping inside the graph
    assert not finished
    signalled = time.monotonic()
    served.cli.proc.send_signal(signal.SIGTERM)
    response = future.result(timeout=60)
    assert tf.make_ndarray(response.outputs["outputs"]).tolist() == [b"LATE"]
    assert wait_for(lambda: bool(finished), timeout=10) and finished[0] > signalled
    assert served.cli.proc.wait(timeout=60) == 0, served.cli.log()[-3000:]
    with pytest.raises(grpc.RpcError) as info:  # no longer serving
        served.stub.Predict(_request("toy", inputs={"inputs": ["a"]}), timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "Traceback" not in served.cli.log()
