"""Request batching: the parameters file parser, the batcher with fake signature functions (no sockets),
the `kerasplm serve --enable_batching` flags, and one real `kerasplm serve --enable_batching` process
(export/README.md's parameters file) answering concurrent REST and gRPC requests exactly as unbatched."""
import json
import os
import re
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from kerasplm import cli
from kerasplm.serving import ModelServer, api
from kerasplm.serving.batching import (QUEUE_FULL_MESSAGE, Batcher, BatchingParameters, BatchingParametersError,
                                       batch_safe, merge_inputs, parse_batching_parameters,
                                       read_batching_parameters_file, split_outputs)
from kerasplm.serving.metrics import Metrics
from tests.serving.client import REPO_ROOT, CLIServer, http, parse_prometheus
from tests.serving.conftest import install_toy_version

FULL = """# every field
max_batch_size { value: 8 }
batch_timeout_micros { value: 2500 }
max_enqueued_batches { value: 3 }
num_batch_threads { value: 2 }
thread_pool_name { value: "my_batch_threads" }
allowed_batch_sizes: 2
allowed_batch_sizes: 4
allowed_batch_sizes: 8
pad_variable_length_inputs: true
"""


# --------------------------------------------------------------------------------------------
# Parser


def test_every_field_is_read():
    params = parse_batching_parameters(FULL, "b.config")
    assert params == BatchingParameters(max_batch_size=8, batch_timeout_micros=2500, max_enqueued_batches=3,
                                        num_batch_threads=2, thread_pool_name="my_batch_threads",
                                        allowed_batch_sizes=(2, 4, 8), pad_variable_length_inputs=True)
    # list syntax and false
    listed = parse_batching_parameters("max_batch_size { value: 4 } allowed_batch_sizes: [1, 4] "
                                       "pad_variable_length_inputs: false")
    assert (listed.allowed_batch_sizes, listed.pad_variable_length_inputs) == ((1, 4), False)
    assert [params.padded_size(n) for n in (1, 2, 3, 5, 8)] == [2, 2, 4, 8, 8]
    assert listed.padded_size(3) == 4 and BatchingParameters().padded_size(7) == 7


def test_tf_servings_documented_example_parses():
    params = parse_batching_parameters("max_batch_size { value : 128 }\nbatch_timeout_micros { value: 0 }\n"
                                       "max_enqueued_batches { value: 1000000 }\nnum_batch_threads { value: 8 }\n")
    assert (params.max_batch_size, params.batch_timeout_micros, params.max_enqueued_batches,
            params.num_batch_threads) == (128, 0, 1000000, 8)


def test_empty_file_gives_tf_servings_defaults(tmp_path):
    path = tmp_path / "empty.config"
    path.write_text("# nothing set\n")
    params = read_batching_parameters_file(str(path))
    assert (params.max_batch_size, params.batch_timeout_micros, params.max_enqueued_batches,
            params.allowed_batch_sizes, params.pad_variable_length_inputs) == (1000, 0, 10, (), False)
    assert params.num_batch_threads >= 1


@pytest.mark.parametrize("text, line, problem", [
    ("max_batch_size { value: 8 }\nmax_batch_sise { value: 8 }", 2, "unknown field 'max_batch_sise'"),
    ("max_batch_size: 8", 1, "'max_batch_size' is a wrapper message: write max_batch_size { value: ... }"),
    ("max_batch_size { value: 8.5 }", 1, "'value' must be an integer, got '8.5'"),
    ("max_batch_size { value: 0 }", 1, "'max_batch_size' must be an integer in [1, 2147483647], got 0"),
    ("max_batch_size { }", 1, "'max_batch_size' needs a 'value'"),
    ("max_batch_size { value: 8 }\n\nmax_batch_size { value: 9 }", 3, "'max_batch_size' given twice"),
    ("num_batch_threads { value: 0 }", 1, "'num_batch_threads' must be an integer in [1, 1024], got 0"),
    ("batch_timeout_micros { value: -1 }", 1, "'value' must be an integer in [0, 2^63), got -1"),
    ("batch_timeout_micros { value: 99999999999 }", 1, "'batch_timeout_micros' must be an integer in [0, 3600000000]"),
    ("max_enqueued_batches { value: 0 }", 1, "'max_enqueued_batches' must be an integer in [1, "),
    ("max_batch_size { value: 8 }\nallowed_batch_sizes: [4, 2, 8]", 2, "must be in increasing order, got [4, 2, 8]"),
    ("max_batch_size { value: 8 }\nallowed_batch_sizes: 4", 2,
     "the last entry of 'allowed_batch_sizes' must equal max_batch_size (8), got 4"),
    ("allowed_batch_sizes: 0", 1, "'allowed_batch_sizes' must be an integer in [1, 2^63), got 0"),
    ("pad_variable_length_inputs: maybe", 1, "'pad_variable_length_inputs' must be true or false, got 'maybe'"),
    ("thread_pool_name { value: 3 }", 1, "'value' must be a quoted string"),
    ("enable_large_batch_splitting { value: true }", 1, "'enable_large_batch_splitting' is not supported"),
    ("max_batch_size { value: 8 ", 1, "missing '}' before end of file"),
])
def test_errors_name_the_file_line_and_field(text, line, problem):
    with pytest.raises(BatchingParametersError) as info:
        parse_batching_parameters(text, "b.config")
    message = str(info.value)
    assert message.startswith(f"b.config:{line}: ") and problem in message, message
    assert "\n" not in message


def test_every_spelling_tf_serving_accepts_is_read_identically():
    spelled = """# protobuf's text format as TF Serving reads it: colon and angle-bracket forms, separators, lists
max_batch_size: { value: 8 }, batch_timeout_micros < value: 2500 >;
max_enqueued_batches { value: 3 } num_batch_threads { value: 2 }  # two on one line
thread_pool_name { value: "my_batch" '_threads' }
allowed_batch_sizes: [2, 4]
allowed_batch_sizes: 8
pad_variable_length_inputs: True
"""
    assert parse_batching_parameters(spelled, "b.config") == parse_batching_parameters(FULL, "b.config")


@pytest.mark.parametrize("text, message", [
    ("max_batch_size { value: 8 }\n# a comment\nbatch_timeout_micros { value 5 }",
     "3: expected ':' after 'value' (column 30)"),
    ('max_batch_size { value: 8 }\nthread_pool_name { value: "x }',
     "2: String missing ending quote: '\"x }' (column 27)"),
    ("max_batch_size { value: 8 } }", "1: Expected identifier or number, got } (column 29)"),
    ("max_batch_size { value: 8 }\nnum_batch_threads { valeu: 2 }",
     "2: unknown field 'valeu' in Int64Value; expected one of: value"),
    ("max_batch_size { value: 8 }\n\nmax_batch_sise { value: 8 }",
     "3: unknown field 'max_batch_sise' in BatchingParameters; expected one of: max_batch_size, batch_timeout_micros, "
     "max_enqueued_batches, num_batch_threads, thread_pool_name, allowed_batch_sizes, pad_variable_length_inputs"),
    ("max_batch_size { value: 8 }\nmax_execution_batch_size { value: 8 }",
     "2: 'max_execution_batch_size' is not supported by kerasplm serve"),
    ("allowed_batch_sizes: [2, x]", "1: 'allowed_batch_sizes' must be an integer, got 'x'"),
])
def test_syntax_errors_and_unknown_fields_name_the_line(text, message):
    with pytest.raises(BatchingParametersError) as info:
        parse_batching_parameters(text, "b.config")
    assert str(info.value) == f"b.config:{message}"


# --------------------------------------------------------------------------------------------
# Merging, splitting, the batch-safe rule


def test_batch_safe_is_tf_servings_rule():
    s = tf.TensorShape
    assert batch_safe({"inputs": s([None])}, {"outputs": s([None]), "tokens": s([None, None])})
    assert not batch_safe({"inputs": s([None]), "times": s([])}, {"outputs": s([None])})  # a scalar option
    assert not batch_safe({"inputs": s([None])}, {"rows": s([]), "outputs": s([None])})  # a scalar output
    assert not batch_safe({"inputs": s([2])}, {"outputs": s([None])})  # a fixed 0th dimension
    assert not batch_safe({"inputs": s(None)}, {"outputs": s([None])})  # unknown rank
    assert not batch_safe({}, {"outputs": s([None])})


def test_merge_pads_rows_and_variable_lengths_like_tf_serving():
    a = {"ids": np.array([[5, 6, 7]], np.int32)}
    b = {"ids": np.array([[8], [9]], np.int32)}
    merged = merge_inputs([a, b], 5, pad_variable_length=True)
    # b is padded along axis 1 with its own first element (8); rows 4-5 copy b's first row.
    np.testing.assert_array_equal(merged["ids"], [[5, 6, 7], [8, 8, 8], [9, 8, 8], [8, 8, 8], [8, 8, 8]])
    strings = merge_inputs([{"s": np.array([b"x"], object)}, {"s": np.array([b"y", b"z"], object)}], 3, False)
    assert strings["s"].tolist() == [b"x", b"y", b"z"]


def test_split_gives_each_request_its_rows_cropped_to_its_own_length():
    # words padded with b"" to the longest row of the call; ids has a genuine 0 at the end of b's row,
    # and is cropped like words, which shares its axis.
    words = np.array([[b"a", b"b", b"c"], [b"dd", b"a", b""], [b"e", b"", b""]], object)
    ids = np.array([[0, 0, 0], [1, 0, 0], [0, 0, 0]], np.int64)
    lengths = np.array([3, 2, 1])
    parts = split_outputs({"words": words, "ids": ids, "lengths": lengths}, [1, 2], 3,
                          {"words": [1], "ids": [1], "lengths": []})
    assert parts[0]["words"].tolist() == [[b"a", b"b", b"c"]] and parts[0]["ids"].tolist() == [[0, 0, 0]]
    assert parts[1]["words"].tolist() == [[b"dd", b"a"], [b"e", b""]]
    assert parts[1]["ids"].tolist() == [[1, 0], [0, 0]] and parts[1]["lengths"].tolist() == [2, 1]
    with pytest.raises(ValueError, match="expected 4 rows"):
        split_outputs({"lengths": lengths}, [4], 4, {"lengths": []})


# --------------------------------------------------------------------------------------------
# The batcher with fake signature functions


class FakeSignature:
    """Upper-cases ``inputs`` and splits them into words (padded with b"" to the call's longest row);
    records each call's rows; raises a 400 for the input b"bad"; can block until ``release`` is set."""

    def __init__(self, block=False):
        self.calls = []
        self.release = threading.Event()
        self.entered = threading.Event()
        if not block:
            self.release.set()

    def __call__(self, arrays):
        inputs = arrays["inputs"]
        self.calls.append(len(inputs))
        self.entered.set()
        self.release.wait(10)
        if b"bad" in inputs.tolist():
            raise api.RequestError(400, "bad input")
        split = [s.upper().split() for s in inputs.tolist()]
        width = max([len(w) for w in split] + [0])
        words = np.array([w + [b""] * (width - len(w)) for w in split], object).reshape(len(split), width)
        return {"outputs": np.array([s.upper() for s in inputs.tolist()], object), "words": words,
                "lengths": np.array([len(w) for w in split], np.int64)}


UNKNOWN = {"outputs": [], "words": [1], "lengths": []}


def _queued_rows(batcher):
    with batcher._cv:
        return sum(b.rows for q in batcher._queues.values() for b in q.batches)


def _run_concurrently(batcher, submits, flush_at_rows=None):
    """Run the ``submits`` (callables) from concurrent threads; ``[result or exception]`` in order.

    With ``flush_at_rows``, once that many rows wait in the queues the batcher is flushed: the batch
    then runs at once instead of after its (long) timeout, so merging does not depend on timing."""
    results = [None] * len(submits)

    def one(i):
        try:
            results[i] = submits[i]()
        except Exception as e:  # noqa: BLE001 (the test inspects it)
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(submits))]
    for t in threads:
        t.start()
    if flush_at_rows is not None:
        deadline = time.monotonic() + 20
        while _queued_rows(batcher) < flush_at_rows and time.monotonic() < deadline:
            time.sleep(0.005)
        batcher.flush()
    for t in threads:
        t.join(20)
    return results


def _submit_all(batcher, fn, texts, flush_at_rows=None):
    """One request per text list, concurrently (see :func:`_run_concurrently`)."""
    return _run_concurrently(batcher, [
        lambda t=t: batcher.submit("sig", {"inputs": np.array(t, object)}, fn, UNKNOWN) for t in texts
    ], flush_at_rows)


def _alone(fn, texts):
    return FakeSignature()({"inputs": np.array(texts, object)})


def _assert_same(result, expected):
    assert sorted(result) == sorted(expected)
    for name in expected:
        assert result[name].tolist() == expected[name].tolist(), name


def test_concurrent_requests_are_merged_and_split_exactly():
    fn = FakeSignature()
    metrics = Metrics()
    # The batch is full at 6 rows: it runs then, whatever the machine's load (the timeout is a minute).
    batcher = Batcher(BatchingParameters(max_batch_size=6, batch_timeout_micros=60_000_000, num_batch_threads=1),
                      on_batch=metrics.record_batch, on_request=metrics.record_batching_request,
                      on_call=metrics.record_batching_call)
    texts = [[b"a b c"], [b"d"], [b"e f", b"g"], [b"h i j k"], [b"l"]]
    results = _submit_all(batcher, fn, texts)
    for text, result in zip(texts, results):
        _assert_same(result, _alone(fn, text))  # the words matrix cropped back to each request's own width
    assert fn.calls == [6]  # 5 requests, 6 rows, one call
    samples = parse_prometheus(metrics.render())
    assert samples[(":tensorflow:serving:batching_session:input_batch_size_count", frozenset())] == 5
    assert samples[(":tensorflow:serving:batching_session:processed_batch_size_sum", frozenset())] == 6
    assert samples[(":tensorflow:serving:batching_session:wrapped_run_count", frozenset())] == 1
    assert batcher.close(5)


def test_a_batch_closes_at_max_batch_size_or_after_the_timeout():
    fn = FakeSignature()
    batcher = Batcher(BatchingParameters(max_batch_size=2, batch_timeout_micros=10_000_000, num_batch_threads=1))
    started = time.monotonic()
    results = _submit_all(batcher, fn, [[b"a"], [b"b"]])  # full at 2 rows: runs without waiting 10 s
    assert time.monotonic() - started < 5 and fn.calls == [2]
    assert [r["outputs"].tolist() for r in results] == [[b"A"], [b"B"]]
    batcher.close(5)

    quick = Batcher(BatchingParameters(max_batch_size=8, batch_timeout_micros=50_000, num_batch_threads=1))
    started = time.monotonic()
    assert quick.submit("k", {"inputs": np.array([b"x"], object)}, fn, UNKNOWN)["outputs"].tolist() == [b"X"]
    assert 0.045 <= time.monotonic() - started < 5  # waited the batch timeout for company, then ran alone
    quick.close(5)


def test_batches_are_padded_to_allowed_sizes_and_padding_rows_dropped():
    fn = FakeSignature()
    metrics = Metrics()
    batcher = Batcher(BatchingParameters(max_batch_size=8, batch_timeout_micros=60_000_000, num_batch_threads=1,
                                         allowed_batch_sizes=(4, 8)), on_batch=metrics.record_batch)
    results = _submit_all(batcher, fn, [[b"a b"], [b"c", b"d e f"]], flush_at_rows=3)
    assert fn.calls == [4]  # 3 rows padded to 4
    assert results[0]["outputs"].tolist() == [b"A B"] and results[1]["outputs"].tolist() == [b"C", b"D E F"]
    assert results[0]["words"].tolist() == [[b"A", b"B"]]
    samples = parse_prometheus(metrics.render())
    assert samples[(":tensorflow:serving:batching_session:padding_size_sum",
                    frozenset({("execution_batch_size", "4")}))] == 1
    batcher.close(5)


def test_variable_length_inputs_are_padded_and_outputs_cropped():
    calls = []

    def doubler(arrays):  # ids [rows, length] -> doubled, and each row's count of non-zero ids
        calls.append(arrays["ids"].shape)
        ids = arrays["ids"]
        return {"doubled": ids * 2, "nonzero": (ids != 0).sum(axis=1)}

    batcher = Batcher(BatchingParameters(max_batch_size=3, batch_timeout_micros=60_000_000, num_batch_threads=1,
                                         pad_variable_length_inputs=True))
    requests = [np.array([[1, 2, 3]], np.int32), np.array([[4], [5]], np.int32)]
    results = _run_concurrently(batcher, [
        lambda r=r: batcher.submit("ids", {"ids": r}, doubler, {"doubled": [1], "nonzero": []}) for r in requests])
    assert calls == [(3, 3)]  # merged: padded along axis 1 with the request's first element
    assert results[0]["doubled"].tolist() == [[2, 4, 6]]
    # TF Serving pads with the first element (4), which the model sees: the padded positions are cropped
    # only where the output holds the padding value, so they remain here.
    assert results[1]["doubled"].tolist() == [[8, 8, 8], [10, 8, 8]]
    batcher.close(5)


def test_without_padding_only_requests_of_equal_trailing_shapes_merge():
    calls = []

    def ident(arrays):
        calls.append(arrays["ids"].shape)
        return {"ids": arrays["ids"]}

    batcher = Batcher(BatchingParameters(max_batch_size=8, batch_timeout_micros=60_000_000, num_batch_threads=2))
    shapes = [(1, 3), (2, 3), (1, 2)]
    results = _run_concurrently(batcher, [
        lambda shape=shape: batcher.submit("ids", {"ids": np.ones(shape, np.int32)}, ident, {"ids": []})
        for shape in shapes], flush_at_rows=4)
    assert sorted(calls) == [(1, 2), (3, 3)]
    assert [r["ids"].shape for r in results] == shapes
    batcher.close(5)


def test_a_failing_batch_is_run_again_request_by_request():
    fn = FakeSignature()
    batcher = Batcher(BatchingParameters(max_batch_size=3, batch_timeout_micros=60_000_000, num_batch_threads=1))
    results = _submit_all(batcher, fn, [[b"good one"], [b"bad"], [b"fine"]])
    assert isinstance(results[1], api.RequestError) and results[1].status == 400
    assert results[0]["words"].tolist() == [[b"GOOD", b"ONE"]] and results[2]["outputs"].tolist() == [b"FINE"]
    assert fn.calls[0] == 3 and sorted(fn.calls[1:]) == [1, 1, 1] and batcher.calls == 4
    batcher.close(5)


def test_a_full_queue_answers_unavailable():
    fn = FakeSignature(block=True)
    batcher = Batcher(BatchingParameters(max_batch_size=1, max_enqueued_batches=1, num_batch_threads=1))
    results = {}
    first = threading.Thread(target=lambda: results.setdefault(
        1, batcher.submit("k", {"inputs": np.array([b"a"], object)}, fn, UNKNOWN)))
    first.start()
    assert fn.entered.wait(10)  # the first batch runs (out of the queue) and blocks
    second = threading.Thread(target=lambda: results.setdefault(
        2, batcher.submit("k", {"inputs": np.array([b"b"], object)}, fn, UNKNOWN)))
    second.start()
    deadline = time.monotonic() + 10
    while not batcher._queues and time.monotonic() < deadline:  # the second fills the queue (1 batch)
        time.sleep(0.01)
    with pytest.raises(api.RequestError) as info:
        batcher.submit("k", {"inputs": np.array([b"c"], object)}, fn, UNKNOWN)
    assert (info.value.status, info.value.code, info.value.message) == (503, "UNAVAILABLE", QUEUE_FULL_MESSAGE)
    fn.release.set()
    first.join(10)
    second.join(10)
    assert results[1]["outputs"].tolist() == [b"A"] and results[2]["outputs"].tolist() == [b"B"]
    batcher.close(5)


def test_close_runs_queued_requests_without_waiting_for_the_timeout():
    fn = FakeSignature()
    batcher = Batcher(BatchingParameters(max_batch_size=8, batch_timeout_micros=60_000_000, num_batch_threads=1))
    results = []
    thread = threading.Thread(target=lambda: results.append(
        batcher.submit("k", {"inputs": np.array([b"late"], object)}, fn, UNKNOWN)))
    thread.start()
    deadline = time.monotonic() + 10
    while not batcher._queues and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    assert batcher.close(10)
    thread.join(10)
    assert time.monotonic() - started < 5 and results[0]["outputs"].tolist() == [b"LATE"]
    # after close a request runs inline
    assert batcher.submit("k", {"inputs": np.array([b"x"], object)}, fn, UNKNOWN)["outputs"].tolist() == [b"X"]
    assert not batcher.accepts(9) and not batcher.accepts(0) and batcher.accepts(8)


# --------------------------------------------------------------------------------------------
# Flags


def test_enable_batching_flags(tmp_path, capsys):
    parse = cli.build_parser().parse_args
    assert parse(["serve", "--model-base-path", "x"]).enable_batching is False
    assert parse(["serve", "--model-base-path", "x", "--enable_batching"]).enable_batching is True
    assert parse(["serve", "--model-base-path", "x", "--enable_batching=true"]).enable_batching is True
    assert parse(["serve", "--enable_batching=false", "--model-base-path", "x"]).enable_batching is False

    bad = tmp_path / "batching.config"
    bad.write_text("max_batch_size { value: 8 }\nallowed_batch_sizes: 4\n")
    base = ["serve", "--model-base-path", str(tmp_path), "--rest_api_port", "0", "--port", "0"]
    assert cli.main([*base, "--batching_parameters_file", str(bad)]) == 2
    assert capsys.readouterr().err == ("kerasplm: error: --batching_parameters_file is set without setting "
                                       "--enable_batching to true\n")
    assert cli.main([*base, "--enable_batching", "--batching_parameters_file", str(bad)]) == 2
    assert capsys.readouterr().err == (f"kerasplm: error: {bad}:2: the last entry of 'allowed_batch_sizes' must "
                                       "equal max_batch_size (8), got 4\n")


# --------------------------------------------------------------------------------------------
# Through a real `kerasplm serve --enable_batching` process: REST and gRPC requests at once


def _readme_batching_config() -> str:
    """The parameters file export/README.md shows (the fenced block after its batching.config line)."""
    with open(os.path.join(REPO_ROOT, "export", "README.md"), encoding="utf-8") as f:
        text = f.read()
    match = re.search(r"saved as `export/batching\.config`.*?\n```\n(.*?)```", text, re.S)
    assert match, "export/README.md lost its batching.config example"
    return match.group(1)


@pytest.fixture(scope="module")
def batching_server(tmp_path_factory, toy_saved_models):
    root = tmp_path_factory.mktemp("batching")
    base = str(root / "toy")
    install_toy_version(base, 1, toy_saved_models["upper"])
    config = root / "batching.config"
    config.write_text(_readme_batching_config())
    server = CLIServer(["--model_base_path", base, "--model_name", "toy", "--enable_batching",
                        "--batching_parameters_file", str(config), "--quiet"], root / "serve.log")
    try:
        server.wait_ready()
        reference = ModelServer(base, "toy", rest_api_port=0, grpc_port=None)  # unbatched, in process
        reference.refresh()
        yield SimpleNamespace(server=server, reference=reference, params=parse_batching_parameters(
            _readme_batching_config()))
    finally:
        server.close()


def _rest_body(signature, sentences):
    return {"signature_name": signature, "inputs": {"inputs": sentences}}


def test_concurrent_rest_and_grpc_answers_equal_the_unbatched_ones(batching_server):
    # batch-safe signatures (merged), with ragged "words" to crop; "repeat" has a scalar option: unbatched.
    cases = [("serving_default", ["hola"]), ("split", ["uno dos tres"]), ("split", ["a", "b c"]),
             ("serving_default", ["¿qué tal?", "bien"]), ("split", ["una frase bastante larga de verdad"]),
             ("split", ["x"]), ("serving_default", ["z"]), ("split", ["dos palabras"])]
    expected = {}
    for signature, sentences in cases:
        status, payload = batching_server.reference.handle(
            "POST", "/v1/models/toy:predict", json.dumps(_rest_body(signature, sentences)).encode())
        assert status == 200, payload
        expected[(signature, tuple(sentences))] = payload["outputs"]
    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(batching_server.server.grpc_target))
    barrier = threading.Barrier(2 * len(cases) + 1)

    def rest(signature, sentences):
        barrier.wait()
        status, payload = http("POST", f"{batching_server.server.url}/v1/models/toy:predict",
                               _rest_body(signature, sentences))
        assert status == 200, payload
        return payload["outputs"]

    def over_grpc(signature, sentences):
        request = predict_pb2.PredictRequest()
        request.model_spec.name, request.model_spec.signature_name = "toy", signature
        request.inputs["inputs"].CopyFrom(tf.make_tensor_proto(sentences, dtype=tf.string))
        barrier.wait()
        response = stub.Predict(request, timeout=60)
        outputs = {name: tf.make_ndarray(proto).tolist() for name, proto in response.outputs.items()}
        decoded = {name: json.loads(json.dumps(value, default=lambda b: b.decode("utf-8")))
                   for name, value in outputs.items()}
        return next(iter(decoded.values())) if len(decoded) == 1 else decoded

    def unbatched():
        barrier.wait()
        return http("POST", f"{batching_server.server.url}/v1/models/toy:predict",
                    {"signature_name": "repeat", "instances": [{"inputs": "ab", "times": 2}]})

    with ThreadPoolExecutor(2 * len(cases) + 1) as pool:
        rest_answers = [pool.submit(rest, *case) for case in cases]
        grpc_answers = [pool.submit(over_grpc, *case) for case in cases]
        repeat = pool.submit(unbatched)
        for (signature, sentences), answer in zip(cases + cases, rest_answers + grpc_answers):
            assert answer.result(timeout=120) == expected[(signature, tuple(sentences))], (signature, sentences)
        assert repeat.result(timeout=120) == (200, {"predictions": ["ab ab"]})

    with urllib.request.urlopen(f"{batching_server.server.url}/monitoring/prometheus/metrics", timeout=30) as r:
        text = r.read().decode()
    samples = parse_prometheus(text)
    requests = samples[(":tensorflow:serving:batching_session:input_batch_size_count", frozenset())]
    calls = samples[(":tensorflow:serving:batching_session:wrapped_run_count", frozenset())]
    batches = samples[(":tensorflow:serving:batching_session:processed_batch_size_count", frozenset())]
    assert requests == 2 * len(cases)  # every batch-safe request went through the batcher, "repeat" did not
    assert calls == batches < requests  # merged: fewer signature calls than requests, none failed
    # every call ran at an allowed batch size
    sizes = {dict(labels)["execution_batch_size"] for (name, labels) in samples
             if name.endswith("padding_size_count")}
    assert sizes and sizes <= {str(s) for s in batching_server.params.allowed_batch_sizes}


def test_stop_answers_the_requests_waiting_in_the_batcher(toy_saved_models, tmp_path):
    """A request waiting for its batch (a minute's timeout) is answered when the server stops, at once."""
    base = str(tmp_path / "toy")
    install_toy_version(base, 1, toy_saved_models["upper"])
    params = BatchingParameters(max_batch_size=8, batch_timeout_micros=60_000_000, num_batch_threads=1)
    server = ModelServer(base, "toy", rest_api_port=0, grpc_port=None, quiet=True, batching_parameters=params)
    server.start()
    answers = []
    thread = threading.Thread(target=lambda: answers.append(
        http("POST", f"{server.url}/v1/models/toy:predict", {"instances": ["waiting"]})))
    thread.start()
    deadline = time.monotonic() + 30
    while _queued_rows(server.batcher) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    assert server.stop(grace_seconds=20) is True
    thread.join(10)
    assert time.monotonic() - started < 10
    assert answers == [(200, {"predictions": ["WAITING"]})]
