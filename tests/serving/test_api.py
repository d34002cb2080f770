"""kerasplm.serving.api / metrics as plain functions: JSON checks, routes, chunked calls, Prometheus text."""
import json

import numpy as np
import pytest
import tensorflow as tf

from kerasplm.serving import Metrics, RequestError, api, load_version
from kerasplm.serving.metrics import LATENCY_BUCKETS_US
from tests.serving.client import parse_prometheus
from tests.serving.conftest import install_toy_version


@pytest.fixture(scope="module")
def toy(tmp_path_factory, toy_saved_models):
    base = str(tmp_path_factory.mktemp("api") / "toy")
    install_toy_version(base, 1, toy_saved_models["upper"])
    return load_version(base, 1)


def _error(fn, *args, **kwargs) -> RequestError:
    with pytest.raises(RequestError) as info:
        fn(*args, **kwargs)
    return info.value


# ---- JSON values -> tensors --------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, dtype, fragment",
    [
        (4294967299, tf.int32, "out of range [-2147483648, 2147483647]"),  # would wrap to 3
        (-2147483649, tf.int32, "out of range"),
        (True, tf.int32, "true/false are not integers"),
        (False, tf.int64, "true/false are not integers"),
        (2.0, tf.int32, "expects integers"),
        (2.5, tf.int64, "expects integers"),
        (200, tf.int8, "out of range [-128, 127]"),
        (2**63, tf.int64, "out of range"),
        (-1, tf.uint8, "out of range [0, 255]"),
        ("3", tf.int32, "expects integers"),
        (None, tf.int32, "expects integers"),
        (1, tf.bool, "expects true or false"),
        (True, tf.float32, "expects numbers"),
        (1e39, tf.float32, "out of range for DT_FLOAT"),
        (10**400, tf.float64, "out of range for DT_DOUBLE"),
        (7, tf.string, "expects strings"),
    ],
)
def test_scalars_are_checked_against_the_dtype(value, dtype, fragment):
    err = _error(api.to_tensor, value, tf.TensorSpec([], dtype), "opt")
    assert err.status == 400
    assert err.message.startswith("Input 'opt' ") and fragment in err.message, err.message


def test_valid_values_convert_exactly():
    assert int(api.to_tensor(2147483647, tf.TensorSpec([], tf.int32), "x")) == 2147483647
    assert int(api.to_tensor(2**63 - 1, tf.TensorSpec([], tf.int64), "x")) == 2**63 - 1
    assert int(api.to_tensor(255, tf.TensorSpec([], tf.uint8), "x")) == 255
    assert bool(api.to_tensor(True, tf.TensorSpec([], tf.bool), "x")) is True
    np.testing.assert_array_equal(api.to_tensor([[1, 2.5]], tf.TensorSpec([None, 2], tf.float32), "x"), [[1, 2.5]])
    nan = api.to_tensor(float("nan"), tf.TensorSpec([], tf.float32), "x")  # JSON NaN, as TF Serving accepts
    assert np.isnan(nan.numpy())
    assert api.to_tensor([{"b64": "YQ=="}, "b"], tf.TensorSpec([None], tf.string), "x").numpy().tolist() == [b"a", b"b"]


def test_nesting_deeper_than_the_signature_rank_is_400_without_recursion():
    deep = 0
    for _ in range(50_000):  # far deeper than Python's recursion limit
        deep = [deep]
    err = _error(api.to_tensor, deep, tf.TensorSpec([None], tf.int32), "x")
    assert err.status == 400 and "nested deeper than the 1 dimension(s)" in err.message
    err = _error(api.to_tensor, deep, tf.TensorSpec(None, tf.string), "x")
    assert "nested deeper than the 32" in err.message
    # An element inside a list is checked too.
    err = _error(api.to_tensor, [1, 2, 4294967299], tf.TensorSpec([None], tf.int32), "x")
    assert "out of range" in err.message


# ---- routes and bodies -------------------------------------------------------------------------
def test_routes():
    assert api.parse_route("GET", "/v1/models/m") == api.Route("status", "m")
    assert api.parse_route("HEAD", "/v1/models/m/versions/7/metadata") == api.Route("metadata", "m", 7)
    labelled = api.Route("predict", "m", None, "stable")
    assert api.parse_route("POST", "/v1/models/m/labels/stable:predict?x=1") == labelled
    assert api.parse_route("GET", "/monitoring/prometheus/metrics") == api.Route("metrics")
    assert api.Route("predict", "m", None, "stable").servable() == "Label(m, stable)"
    for method, path, status in [("POST", "/monitoring/prometheus/metrics", 405), ("GET", "/v1/models/m:predict", 405),
                                 ("GET", "/v1/models", 404), ("POST", "/v1/models/m:explain", 404),
                                 ("GET", "/v1/models/m/versions/" + "5" * 5000, 400),
                                 ("GET", "/v1/models/m/versions/9223372036854775808", 400),
                                 ("GET", "/v1/models/m/versions/abc", 400)]:
        err = _error(api.parse_route, method, path)
        assert err.status == status, (method, path, err.message)
        assert len(err.message) < 300
    assert api.parse_route("GET", "/v1/models/m/versions/9223372036854775807").version == 2**63 - 1
    assert api.parse_route("POST", "/v1/models/m/versions/2:classify") == api.Route("classify", "m", 2)
    assert api.parse_route("POST", "/v1/models/m/labels/stable:regress") == api.Route("regress", "m", None, "stable")
    assert _error(api.parse_route, "GET", "/v1/models/m:classify").status == 405


def test_examples_from_json_follow_tf_serving():
    """TF Serving's JSON -> tf.Example rules: value kinds, one kind per feature, the context's bytes first."""
    serialized = api.serialized_examples_from_json({
        "context": {"shared": "c", "text": "from context"},
        "examples": [{"text": "a", "ids": [1, True], "weight": 0.5, "raw": {"b64": "AP8="}}, {"text": ["b", "c"]}]},
        "classify")
    first, second = (tf.train.Example.FromString(s) for s in serialized)
    assert first.features.feature["text"].bytes_list.value == [b"a"]          # the example's value wins
    assert first.features.feature["shared"].bytes_list.value == [b"c"]
    assert first.features.feature["ids"].int64_list.value == [1, 1]
    assert first.features.feature["weight"].float_list.value == [0.5]
    assert first.features.feature["raw"].bytes_list.value == [b"\x00\xff"]
    assert second.features.feature["text"].bytes_list.value == [b"b", b"c"]
    context = api.example_from_json({"shared": "c", "text": "from context"}).SerializeToString()
    assert serialized[1].startswith(context)
    for body, message in (({"examples": [{"x": [1, "a"]}]},
                           "Unexpected element type in feature: x expecting type: int64"),
                          ({"examples": [{"x": [[1]]}]}, "Feature: x has element with unexpected JSON type: array"),
                          ({"examples": [{"x": {"a": 1}}]}, "unexpected JSON type: object"),
                          ({"examples": [{"x": 2**63}]}, "outside int64"),
                          ({"examples": [1]}, "Example must be JSON object but got JSON number"),
                          ({"context": [], "examples": [{}]}, "'context' must be JSON object but got JSON array"),
                          ({"examples": {}}, "Expecting 'examples' value to be an list/array"),
                          ({"examples": [{}] * 3}, "the limit is 2 per request")):
        err = _error(api.serialized_examples_from_json, body, "classify", 2)
        assert err.status == 400 and message in err.message, (body, err.message)


@pytest.mark.parametrize(
    "raw, fragment",
    [(b"[" * 100_000, "nested too deeply"), (b'{"x": ' + b"1" * 5000 + b"}", "too many digits"),
     (b"{not json", "JSON Parse error"), (b"\xff\xfe\xfd", "JSON Parse error"), (b"[1]", "JSON object")],
)
def test_bad_bodies_are_400(raw, fragment):
    err = _error(api.parse_json_body, raw)
    assert err.status == 400 and fragment in err.message


# ---- bounded work per request --------------------------------------------------------------------
def test_rows_per_request_are_capped(toy):
    err = _error(api.predict, toy, {"instances": ["a"] * 11}, max_batch_size=10)
    assert err.status == 400 and "'instances' has 11 rows; the limit is 10 per request" in err.message
    err = _error(api.predict, toy, {"signature_name": "repeat", "inputs": {"inputs": ["a"] * 11, "times": 1}},
                 max_batch_size=10)
    assert "Input 'inputs' has 11 rows; the limit is 10" in err.message
    assert api.predict(toy, {"instances": ["a"] * 10}, max_batch_size=10) == {"predictions": ["A"] * 10}


def _counting(fn, calls):
    def call(**tensors):
        calls.append({name: tuple(t.shape) for name, t in tensors.items()})
        return fn(**tensors)
    return call


def _run(toy, signature, tensors, chunk_size):
    calls = []
    fn = _counting(toy.signatures[signature], calls)
    out = api.run_signature(fn, tensors, toy.input_specs(signature), toy.output_specs(signature), chunk_size)
    return out, calls


def test_large_batches_run_in_chunks_and_equal_one_call(toy):
    texts = [" ".join(["w"] * (i % 7)) + f" row{i}" for i in range(23)]  # ragged: 1..7 words
    tensors = {"inputs": tf.constant(texts)}
    whole, calls = _run(toy, "split", tensors, chunk_size=100)
    assert len(calls) == 1
    chunked, calls = _run(toy, "split", tensors, chunk_size=5)
    assert [c["inputs"] for c in calls] == [(5,), (5,), (5,), (5,), (3,)]
    # Each chunk pads its words to its own longest row; the concatenation pads to the request's.
    assert chunked["words"].shape == whole["words"].shape == (23, 7)
    np.testing.assert_array_equal(chunked["words"], whole["words"])
    np.testing.assert_array_equal(chunked["lengths"], whole["lengths"])
    # Scalar inputs (options) go whole to every chunk.
    out, calls = _run(toy, "repeat", {"inputs": tf.constant(["a", "b", "c"]), "times": tf.constant(2)}, 2)
    assert calls == [{"inputs": (2,), "times": ()}, {"inputs": (1,), "times": ()}]
    assert out["outputs"].tolist() == [b"a a", b"b b", b"c c"]


def test_signatures_with_scalar_outputs_are_not_split(toy):
    out, calls = _run(toy, "total", {"inputs": tf.constant(["a"] * 9)}, chunk_size=2)
    assert len(calls) == 1 and int(out["rows"]) == 9
    # Through predict: the scalar output is repeated per instance, as before.
    body = {"signature_name": "total", "instances": ["a", "b", "c"]}
    result = api.predict(toy, body, batch_chunk_size=1)
    assert result == {"predictions": [{"outputs": c, "rows": 3} for c in "ABC"]}


def test_an_answer_over_max_response_bytes_is_413_after_the_chunk_that_crosses(toy):
    """Each row of "split" on "abcd" answers one 4-byte word and one int64 length: 12 bytes. With chunks of 2 rows
    and a limit of 50 bytes the third chunk crosses it (72 bytes): refused then, and no fourth chunk runs."""
    tensors = {"inputs": tf.constant(["abcd"] * 10)}
    specs, out_specs = toy.input_specs("split"), toy.output_specs("split")
    calls = []
    with pytest.raises(api.RequestError) as info:
        api.run_signature(_counting(toy.signatures["split"], calls), tensors, specs, out_specs, 2,
                          max_response_bytes=50)
    err = info.value
    assert (err.status, err.code, len(calls)) == (413, "RESOURCE_EXHAUSTED", 3)
    assert ("would exceed the limit of 50 bytes per response (--max-response-bytes): the outputs of its first "
            "6 of 10 rows alone come to 72 bytes") in err.message
    # At the limit the answer is whole; unsplittable and small requests are counted too.
    out = api.run_signature(toy.signatures["split"], tensors, specs, out_specs, 2, max_response_bytes=120)
    assert out["words"].shape == (10, 1)
    err = _error(api.predict, toy, {"signature_name": "total", "instances": ["abc"] * 4}, max_response_bytes=15)
    assert err.status == 413 and "its outputs come to 16 bytes" in err.message   # 4 x 3 bytes + an int32
    assert api.predict(toy, {"signature_name": "total", "instances": ["abc"] * 4}, max_response_bytes=16)


def test_answer_size_counts_padding_as_the_concatenated_answer_holds_it():
    """A later, wider chunk widens every row before it: the count equals the concatenated array's bytes."""
    size = api.AnswerSize(None)
    first, second = np.zeros((2, 3), np.float32), np.zeros((3, 5), np.float32)
    size.add({"x": first, "s": np.array([b"ab", b""], object)}, 2)
    size.add({"x": second, "s": np.array([b"c", b"", b"def"], object)}, 3)
    assert size.bytes == api._concat_rows([first, second]).nbytes + 6 == 106


def test_predict_chunked_equals_unchunked(toy):
    body = {"signature_name": "analyze", "instances": [f"w{i} " * (i % 4) for i in range(10)]}
    assert api.predict(toy, body, batch_chunk_size=3) == api.predict(toy, body, batch_chunk_size=64)


# ---- metrics -------------------------------------------------------------------------------------
def test_metrics_text_format():
    metrics = Metrics()
    metrics.record("m", "predict", "serving_default", 200, 0.003)  # 3,000 µs
    metrics.record("m", "predict", "serving_default", 200, 0.0001)
    metrics.record("m", "predict", "serving_default", 400, 120.0)  # beyond the last bucket
    metrics.record('we"ird\\name', "status", "", 404, 0.001)
    samples = parse_prometheus(metrics.render())
    count = ":tensorflow:serving:request_count"
    labels = {"model_name": "m", "API": "predict", "signature_name": "serving_default"}
    assert samples[(count, frozenset({**labels, "status": "OK"}.items()))] == 2
    assert samples[(count, frozenset({**labels, "status": "INVALID_ARGUMENT"}.items()))] == 1
    weird = frozenset({"model_name": 'we\\"ird\\\\name', "API": "status", "signature_name": "",
                       "status": "NOT_FOUND"}.items())
    assert samples[(count, weird)] == 1
    base = {**labels, "entrypoint": "REST"}
    buckets = {float(le): samples[(":tensorflow:serving:request_latency_bucket", frozenset({**base, "le": le}.items()))]
               for le in [str(b) for b in LATENCY_BUCKETS_US] + ["+Inf"]}
    assert buckets[100] == 1 and buckets[2500] == 1 and buckets[5000] == 2 and buckets[60_000_000] == 2
    assert buckets[float("inf")] == 3
    assert list(buckets.values()) == sorted(buckets.values())  # cumulative
    assert samples[(":tensorflow:serving:request_latency_count", frozenset(base.items()))] == 3
    assert samples[(":tensorflow:serving:request_latency_sum", frozenset(base.items()))] == pytest.approx(120_003_100)
    json.dumps(metrics.render())  # plain text
