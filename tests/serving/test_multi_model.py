"""Several models from one TF Serving model config: version policies, labels, per-model API, metrics."""
import time

import pytest

from kerasplm.serving import ModelServer
from tests.serving.conftest import install_toy_version
from tests.serving.client import http, parse_prometheus, predict

CONFIG = """
model_config_list {
  config {                     # versions 1 (upper), 2 (reverse), 3 (upper): the two newest are served
    name: "a"
    base_path: "base_a"
    model_platform: "tensorflow"
    model_version_policy { latest { num_versions: 2 } }
    version_labels { key: "stable" value: 2 }
    version_labels { key: "old" value: 1 }
  }
  config {                     # versions 1 (upper), 2 (reverse): both served
    name: "b"
    base_path: "base_bc"
    model_version_policy { all {} }
  }
  config {                     # the same base path, version 1 only
    name: "c"
    base_path: "base_bc"
    model_version_policy { specific { versions: 1 } }
  }
}
"""


@pytest.fixture(scope="module")
def multi(tmp_path_factory, toy_saved_models):
    root = tmp_path_factory.mktemp("multi")
    for version, kind in ((1, "upper"), (2, "reverse"), (3, "upper")):
        install_toy_version(str(root / "base_a"), version, toy_saved_models[kind])
    for version, kind in ((1, "upper"), (2, "reverse")):
        install_toy_version(str(root / "base_bc"), version, toy_saved_models[kind])
    (root / "models.config").write_text(CONFIG)
    server = ModelServer(model_config_file=str(root / "models.config"),
                         rest_api_port=0, grpc_port=None, quiet=True).start()
    yield server
    server.stop()


def _status(server, path):
    status, body = http("GET", f"{server.url}/v1/models/{path}")
    assert status == 200, body
    return [(s["version"], s["state"]) for s in body["model_version_status"]]


def test_policies_load_the_right_versions(multi):
    assert {name: m.versions for name, m in multi.models.items()} == {"a": [3, 2], "b": [2, 1], "c": [1]}
    assert _status(multi, "a") == [("3", "AVAILABLE"), ("2", "AVAILABLE")]
    assert _status(multi, "b") == [("2", "AVAILABLE"), ("1", "AVAILABLE")]
    assert _status(multi, "c") == [("1", "AVAILABLE")]
    assert _status(multi, "a/versions/2") == [("2", "AVAILABLE")]
    assert _status(multi, "a/labels/stable") == [("2", "AVAILABLE")]
    assert http("GET", f"{multi.url}/v1/models/a/versions/1")[0] == 404
    assert http("GET", f"{multi.url}/v1/models/c/versions/2")[0] == 404


@pytest.mark.parametrize(
    "path, answer",
    [("a", "ABC"), ("a/versions/3", "ABC"), ("a/versions/2", "CBA"), ("a/labels/stable", "CBA"),
     ("b", "CBA"), ("b/versions/2", "CBA"), ("b/versions/1", "ABC"), ("c", "ABC"), ("c/versions/1", "ABC")],
)
def test_predict_per_model_and_version(multi, path, answer):
    assert predict(f"{multi.url}/v1/models/{path}", {"instances": ["abc"]}) == (200, {"predictions": [answer]})


@pytest.mark.parametrize(
    "path, fragment",
    [("a/versions/1", "Specific(a, 1)"), ("c/versions/2", "Specific(c, 2)"), ("a/labels/nope", "label: nope"),
     ("a/labels/old", "Specific(a, 1)"), ("d", "Latest(d)"), ("d/versions/1", "Specific(d, 1)")],
)
def test_unserved_versions_labels_and_models_are_404(multi, path, fragment):
    status, err = predict(f"{multi.url}/v1/models/{path}", {"instances": ["abc"]})
    assert status == 404 and fragment in err["error"]


def test_metadata_per_model(multi):
    for path, name, version in (("a", "a", "3"), ("a/versions/2", "a", "2"), ("b", "b", "2"), ("c", "c", "1")):
        status, body = http("GET", f"{multi.url}/v1/models/{path}/metadata")
        assert status == 200
        assert body["model_spec"] == {"name": name, "signature_name": "", "version": version}
        assert "serving_default" in body["metadata"]["signature_def"]["signature_def"]


def _metrics(server):
    status, text = _get_text(f"{server.url}/monitoring/prometheus/metrics")
    assert status == 200
    return parse_prometheus(text)


def _get_text(url):
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return response.status, response.read().decode()


def test_prometheus_metrics_count_requests_per_model(multi):
    def value(samples, name, **labels):
        return samples.get((name, frozenset(labels.items())), 0)

    count = ":tensorflow:serving:request_count"
    latency_count = ":tensorflow:serving:request_latency_count"
    ok_b = dict(model_name="b", API="predict", signature_name="serving_default", status="OK")
    bad_b = dict(model_name="b", API="predict", signature_name="repeat", status="INVALID_ARGUMENT")
    hist_b = dict(model_name="b", API="predict", entrypoint="REST", signature_name="serving_default")
    before = _metrics(multi)
    for _ in range(3):
        assert predict(f"{multi.url}/v1/models/b", {"instances": ["x"]})[0] == 200
    assert predict(f"{multi.url}/v1/models/b", {"signature_name": "repeat", "instances": ["x"]})[0] == 400
    assert http("GET", f"{multi.url}/v1/models/c/metadata")[0] == 200
    assert http("GET", f"{multi.url}/v1/models/unknown")[0] == 404  # not a configured model: not recorded
    after = _metrics(multi)
    assert value(after, count, **ok_b) - value(before, count, **ok_b) == 3
    assert value(after, count, **bad_b) - value(before, count, **bad_b) == 1
    assert value(after, latency_count, **hist_b) - value(before, latency_count, **hist_b) == 3
    assert value(after, count, model_name="c", API="metadata", signature_name="", status="OK") >= 1
    assert not any(dict(labels).get("model_name") == "unknown" for _, labels in after)
    latency_sum = ":tensorflow:serving:request_latency_sum"
    assert value(after, latency_sum, **hist_b) > value(before, latency_sum, **hist_b)


def test_latest_policy_follows_new_versions(tmp_path, toy_saved_models):
    base = str(tmp_path / "m")
    for version in (1, 2):
        install_toy_version(base, version, toy_saved_models["upper"])
    config = tmp_path / "models.config"
    config.write_text('model_config_list { config { name: "m" base_path: "m" '
                      'model_version_policy { latest { num_versions: 2 } } } }')
    with ModelServer(model_config_file=str(config),
                     rest_api_port=0, grpc_port=None, poll_seconds=0.2, quiet=True) as server:
        assert server.model("m").versions == [2, 1]
        install_toy_version(base, 3, toy_saved_models["reverse"])
        deadline = time.monotonic() + 60
        while server.model("m").versions != [3, 2] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.model("m").versions == [3, 2]  # 3 loaded before 1 was unloaded
        assert predict(f"{server.url}/v1/models/m", {"instances": ["ab"]}) == (200, {"predictions": ["BA"]})
        assert predict(f"{server.url}/v1/models/m/versions/1", {"instances": ["ab"]})[0] == 404
