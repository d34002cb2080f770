"""Config reload in a real `kerasplm serve` process: `--model_config_file_poll_wait_seconds` (the file is read
again and a changed model_config_list applied) and gRPC `ModelService.HandleReloadConfigRequest` through TF
Serving's official stub. New models are loaded before they answer, removed ones answer 404 / NOT_FOUND while a
request already running on one finishes, changed ones switch, unchanged ones are not reloaded, and a config
that cannot be applied leaves the running one in place (one log line; a gRPC status naming the problem).

One server process for the module (file polled every 0.2 s). The tests run in order: the gRPC test leaves
the config file broken so that the poller keeps what gRPC applies."""
import contextlib
import io
import os
import re
import threading
import time
from types import SimpleNamespace

import grpc
import pytest
import tensorflow as tf
from google.protobuf import any_pb2
from tensorflow_serving.apis import (get_model_status_pb2, model_management_pb2, model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc)
from tensorflow_serving.config import model_server_config_pb2

from tests.serving.client import REPO_ROOT, CLIServer, http, predict, wait_for
from tests.serving.conftest import install_toy_version

POLL = 0.2
KEEPING = "keeping the running model config"
START = """model_config_list {
  config { name: "a" base_path: "a" model_version_policy { all {} } version_labels { key: "stable" value: 1 } }
  config { name: "b" base_path: "b" }
}
"""
# START with label "stable" moved to version 2 and model c added.
ADDED = START.replace("value: 1", "value: 2").replace('"b" }', '"b" }\n  config { name: "c" base_path: "c" }')
# ADDED without b.
REMOVED = ADDED.replace('  config { name: "b" base_path: "b" }\n', "")


@pytest.fixture(scope="module")
def served(tmp_path_factory, toy_saved_models):
    root = tmp_path_factory.mktemp("reload")
    install_toy_version(str(root / "a"), 1, toy_saved_models["upper"])
    install_toy_version(str(root / "a"), 2, toy_saved_models["reverse"])
    install_toy_version(str(root / "b"), 1, toy_saved_models["reverse"])
    install_toy_version(str(root / "c"), 1, toy_saved_models["upper"])
    install_toy_version(str(root / "d"), 1, toy_saved_models["reverse"])
    broken = root / "broken" / "1"
    os.makedirs(broken)
    (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
    config = root / "models.config"
    config.write_text(START)
    server = CLIServer(["--model_config_file", str(config), "--model_config_file_poll_wait_seconds", str(POLL),
                        "--file_system_poll_wait_seconds", str(POLL), "--quiet"], root / "serve.log")
    channel = None
    try:
        server.wait_ready()
        channel = grpc.insecure_channel(server.grpc_target)
        yield SimpleNamespace(cli=server, root=root, config=config, channel=channel,
                              model_stub=model_service_pb2_grpc.ModelServiceStub(channel),
                              stub=prediction_service_pb2_grpc.PredictionServiceStub(channel))
    finally:
        if channel is not None:
            channel.close()
        server.close()


def _write(path, text):
    """Replace the config file in one rename, as a deployment tool would."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _answer(served, path, text="abc", signature=None):
    """(HTTP status, first prediction or the error) of ``POST /v1/models/<path>:predict``."""
    body = {"instances": [text]}
    if signature:
        body["signature_name"] = signature
    status, payload = predict(f"{served.cli.url}/v1/models/{path}", body)
    return status, payload["predictions"][0] if status == 200 else payload["error"]


def _loads(served, model):
    """How many times the server loaded each version of ``model``: {version: count}."""
    counts = {}
    for version in re.findall(rf"Loaded {model} version (\d+) from", served.cli.log()):
        counts[int(version)] = counts.get(int(version), 0) + 1
    return counts


def _keeping_lines(served):
    return [line for line in served.cli.log().splitlines() if KEEPING in line]


def test_file_poll_adds_a_model_and_moves_a_label_without_reloading_the_rest(served):
    assert _answer(served, "a/labels/stable") == (200, "ABC") and _answer(served, "c")[0] == 404
    _write(served.config, ADDED)
    assert wait_for(lambda: _answer(served, "c") == (200, "ABC"), timeout=30), served.cli.log()[-2000:]
    assert wait_for(lambda: _answer(served, "a/labels/stable") == (200, "CBA"), timeout=30)
    assert _answer(served, "a/versions/1") == (200, "ABC") and _answer(served, "b") == (200, "CBA")
    # a kept its loaded versions (its labels changed, its base path did not); b was not touched at all.
    assert _loads(served, "a") == {1: 1, 2: 1} and _loads(served, "b") == {1: 1} and _loads(served, "c") == {1: 1}
    log = served.cli.log()
    assert "Added model c" in log and "Updated model a" in log and "Updated model b" not in log


def test_a_removed_model_is_404_while_a_request_already_on_it_finishes(served):
    assert _answer(served, "b") == (200, "CBA")
    url = f"{served.cli.url}/v1/models/b"
    result = {}
    # ~3 s in flight: the slow signature's SleepDataset sleeps before its element and again before the end.
    request = threading.Thread(target=lambda: result.update(answer=predict(url, {
        "signature_name": "slow", "inputs": {"inputs": ["late"], "milliseconds": 1500}})))
    request.start()
    time.sleep(0.8)  # the request is now sleeping inside the graph
    _write(served.config, REMOVED)
    assert wait_for(lambda: _answer(served, "b")[0] == 404, timeout=30)
    assert request.is_alive(), "the slow request finished before the reload: the test proves nothing"
    assert _answer(served, "b") == (404, "Servable not found for request: Latest(b)")
    with pytest.raises(grpc.RpcError) as info:
        served.model_stub.GetModelStatus(get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "b"}),
                                         timeout=30)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    request.join(timeout=60)
    assert result["answer"] == (200, {"outputs": ["ETAL"]})  # columnar in, columnar out
    assert "Removed model b" in served.cli.log() and _answer(served, "a") == (200, "CBA")


def test_a_config_that_cannot_be_applied_is_logged_once_and_the_running_one_kept(served):
    before = len(_keeping_lines(served))
    _write(served.config, REMOVED.replace('"c" }', '"c" }\n  config { name: "x" base_path: "nowhere" }'))
    assert wait_for(lambda: len(_keeping_lines(served)) == before + 1, timeout=30)
    _write(served.config, "model_config_list { config { name: 'a' base_path: 'a' }")  # unterminated
    assert wait_for(lambda: len(_keeping_lines(served)) == before + 2, timeout=30)
    time.sleep(5 * POLL)  # more polls of the same broken file: nothing more is logged
    missing, broken = _keeping_lines(served)[before:]
    assert len(_keeping_lines(served)) == before + 2
    assert f"{served.config}: Could not find base path {served.root / 'nowhere'} for servable x" in missing
    assert f"{served.config}:1: " in broken and "end of file" in broken
    assert _answer(served, "a/labels/stable") == (200, "CBA") and _answer(served, "c") == (200, "ABC")
    assert _answer(served, "x")[0] == 404 and "Traceback" not in served.cli.log()


def _reload(served, *configs, **fields):
    """HandleReloadConfigRequest with a model_config_list of ``configs`` (dicts) and/or ``fields`` of the
    ModelServerConfig (neither: no config at all); returns (status code, details, response or None)."""
    request = model_management_pb2.ReloadConfigRequest()
    for name, value in fields.items():
        getattr(request.config, name).CopyFrom(value)
    if configs:
        request.config.model_config_list.config.extend(model_server_config_pb2.ModelConfig(**c) for c in configs)
    try:
        response = served.model_stub.HandleReloadConfigRequest(request, timeout=60)
    except grpc.RpcError as e:
        return e.code(), e.details(), None
    return grpc.StatusCode.OK, "", response


def _grpc_predict(served, name, text="abc"):
    request = predict_pb2.PredictRequest(model_spec={"name": name})
    request.inputs["inputs"].CopyFrom(tf.make_tensor_proto([text]))
    return tf.make_ndarray(served.stub.Predict(request, timeout=30).outputs["outputs"]).tolist()[0].decode()


def test_grpc_handle_reload_config_request(served):
    # A broken file: the poller keeps whatever is running, so what gRPC applies stays.
    _write(served.config, "model_config_list {")
    time.sleep(5 * POLL)
    root = served.root
    a = {"name": "a", "base_path": str(root / "a"), "model_platform": "tensorflow",
         "model_version_policy": {"all": {}}, "version_labels": {"stable": 2}}
    assert _grpc_predict(served, "c") == "ABC"
    code, _, response = _reload(served, a, {"name": "d", "base_path": str(root / "d")},
                                {"name": "c", "base_path": str(root / "b")})
    assert code == grpc.StatusCode.OK and response.status.error_code == 0 and not response.status.error_message
    # Loaded before the answer: the new d, and c from its new base path (b's reversing model), answer at once.
    assert (_grpc_predict(served, "d"), _grpc_predict(served, "c"), _grpc_predict(served, "a")) == ("CBA", "CBA", "CBA")
    assert _loads(served, "a") == {1: 1, 2: 1} and _loads(served, "c") == {1: 2}  # a untouched, c from b's path
    assert "Updated model c" in served.cli.log()

    any_config = any_pb2.Any()
    any_config.Pack(model_server_config_pb2.ModelConfig(name="z"))
    wrong_kind = "ServerModelConfig type not supported by HandleReloadConfigRequest. Only ModelConfigList is " \
                 "currently supported"
    cases = [
        (_reload(served, custom_model_config=any_config), grpc.StatusCode.INVALID_ARGUMENT, wrong_kind),
        (_reload(served), grpc.StatusCode.INVALID_ARGUMENT, wrong_kind),  # no config at all
        (_reload(served, a, {"name": "e", "base_path": "d"}), grpc.StatusCode.INVALID_ARGUMENT,
         "Expected model e to have an absolute path or URI; got base_path()=d"),
        (_reload(served, a, a), grpc.StatusCode.INVALID_ARGUMENT, "Illegal to list model a multiple times"),
        (_reload(served, a, {"name": "e", "base_path": str(root / "nowhere")}), grpc.StatusCode.NOT_FOUND,
         f"Could not find base path {root / 'nowhere'} for servable e"),
        (_reload(served, a, {"name": "e", "base_path": str(root / "d"), "model_platform": "pytorch"}),
         grpc.StatusCode.INVALID_ARGUMENT, "model_platform 'pytorch' is not supported"),
    ]
    for (code, details, _), expected_code, expected in cases:
        assert (code, expected in details) == (expected_code, True), details
    # None of them changed anything.
    assert (_grpc_predict(served, "d"), _grpc_predict(served, "c")) == ("CBA", "CBA")

    # A model whose only version fails to load: applied (as TF Serving does), the call says so.
    code, details, _ = _reload(served, a, {"name": "e", "base_path": str(root / "broken")})
    assert code == grpc.StatusCode.UNKNOWN and details.startswith("1 model(s) did not become available: {e: version 1")
    status = http("GET", f"{served.cli.url}/v1/models/e")[1]["model_version_status"]
    assert [(s["version"], s["state"]) for s in status] == [("1", "END")]
    assert _answer(served, "d")[0] == 404 and "Traceback" not in served.cli.log()



def test_readme_reload_block_runs(served):
    """export/README.md's HandleReloadConfigRequest block, verbatim but for the base path (the file is still
    broken from the test above, so the poller leaves the result alone)."""
    with open(os.path.join(REPO_ROOT, "export", "README.md"), encoding="utf-8") as f:
        block = re.search(r"<!-- grpc-reload -->\s*```python\n(.*?)```", f.read(), re.S)
    assert block, "export/README.md lacks the <!-- grpc-reload --> block"
    code = block.group(1)
    assert '"/abs/path/export/translator"' in code
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace("/abs/path/export/translator", str(served.root / "d")), "export/README.md",
                     "exec"), {"channel": served.channel})
    assert printed.getvalue() == "0\n"
    assert _grpc_predict(served, "translator") == "CBA" and _answer(served, "a")[0] == 404
