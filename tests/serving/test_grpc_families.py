"""Every family's export through TF Serving's official gRPC stubs (tensorflow-serving-api), against ONE real
`kerasplm serve` process serving a model_config_list of all of them: a tiny random-weight translator, generator,
embedder, classifier, tagger, question answerer, fill-mask model and ELMo.

For each family and each of its predict signatures (all but ``metadata``): GetModelMetadata lists the signatures
as REST does, GetModelStatus says AVAILABLE, and Predict equals the REST :predict answer for the same inputs.
The inputs are built from the signature's own specs (strings: a few sentences; numbers: zeros, which every
decoding option reads as "the default", in the spec's shape), so a signature whose inputs change shape keeps
being tested as it is. Bad requests per family get TF Serving's status codes.

The models are exported while the server starts (it polls their base paths)."""
import json
import os
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2, model_service_pb2_grpc,
                                     predict_pb2, prediction_service_pb2_grpc)

from tests.export import tiny_exports
from tests.serving.client import CLIServer, http, wait_for
from tests.serving.grpc_client import json_outputs, model_status

# family -> f(base path) writing version 1 of a tiny export there
EXPORTS = {"translator": lambda base: tiny_exports.export_tiny_translator(base, TEXTS),
           "generator": tiny_exports.export_tiny_generator, "embedder": tiny_exports.export_tiny_embedder,
           "classifier": tiny_exports.export_tiny_classifier, "tagger": tiny_exports.export_tiny_tagger,
           "qa": tiny_exports.export_tiny_qa, "fill_mask": tiny_exports.export_tiny_fill_mask,
           "elmo": tiny_exports.export_tiny_elmo}
FAMILIES = list(EXPORTS)
# Signatures each family's export has at least (exports may add more; every one is tested).
SIGNATURES = {"translator": {"serving_default", "translate", "translate_with_attention"},
              "generator": {"serving_default", "generate", "score"}}
PREDICT_METHOD = "tensorflow/serving/predict"
# Short enough for every export's window (the generator's 16 prompt tokens, the tagger's 16 positions).
TEXTS = ["Where does John live?", "the [MASK] sat on the mat .", "Johanson lives in New York."]
MAX_BATCH = 4
# Far above every test's ordinary answer (the largest, ELMo's, is ~10 KB), far below ELMo's 4 rows x 200 tokens.
MAX_RESPONSE_BYTES = 256 * 1024
AVAILABLE = get_model_status_pb2.ModelVersionStatus.AVAILABLE


def _config(root):
    entries = "".join(f'  config {{ name: "{name}" base_path: "{root / name}" }}\n' for name in FAMILIES)
    return f"model_config_list {{\n{entries}}}\n"


def _all_available(model_stub):
    for name in FAMILIES:
        try:
            statuses = model_status(model_stub, name).model_version_status
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, e
            return False
        if not any(s.state == AVAILABLE for s in statuses):
            return False
    return True


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    for name in FAMILIES:
        os.makedirs(root / name)
    (root / "models.config").write_text(_config(root))
    server = CLIServer(["--model_config_file", str(root / "models.config"), "--max-batch-size", str(MAX_BATCH),
                        "--max-response-bytes", str(MAX_RESPONSE_BYTES), "--poll-seconds", "0.3"],
                       root / "serve.log")
    channel = None
    try:
        for name in FAMILIES:   # while the server imports TensorFlow and loads the first ones
            EXPORTS[name](str(root / name))
        server.wait_ready()
        channel = grpc.insecure_channel(server.grpc_target)
        model_stub = model_service_pb2_grpc.ModelServiceStub(channel)
        assert wait_for(lambda: _all_available(model_stub), timeout=180, interval=0.5), server.log()[-3000:]
        yield SimpleNamespace(cli=server, model_stub=model_stub,
                              stub=prediction_service_pb2_grpc.PredictionServiceStub(channel), defs={})
    finally:
        if channel is not None:
            channel.close()
        server.close()


def _signature_defs(served, model):
    """``{signature name: SignatureDef}`` of ``model`` from GetModelMetadata (fetched once per model)."""
    if model not in served.defs:
        request = get_model_metadata_pb2.GetModelMetadataRequest(model_spec={"name": model},
                                                                 metadata_field=["signature_def"])
        response = served.stub.GetModelMetadata(request, timeout=60)
        assert response.model_spec.name == model and response.model_spec.version.value == 1
        defs = get_model_metadata_pb2.SignatureDefMap()
        assert response.metadata["signature_def"].Unpack(defs)
        served.defs[model] = dict(defs.signature_def)
    return served.defs[model]


def _predict_signatures(served, model):
    """The signatures Predict is tested on: all predict-method ones but ``metadata`` (a classification
    signature takes serialized tf.Example, not sentences)."""
    return sorted(name for name, signature in _signature_defs(served, model).items()
                  if name != "metadata" and signature.method_name == PREDICT_METHOD)


def _inputs(signature, rows):
    """``{input name: numpy array}`` for a SignatureDef's inputs: string inputs get ``rows`` of TEXTS (cycled),
    numeric ones zeros; unknown dimensions are ``rows`` for the 0th (the batch), else 1."""
    texts = [TEXTS[i % len(TEXTS)] for i in range(rows)]
    inputs = {}
    for name, info in signature.inputs.items():
        shape = [rows if i == 0 and d.size == -1 else max(d.size, 1) for i, d in enumerate(info.tensor_shape.dim)]
        if info.dtype == types_pb2.DT_STRING:
            inputs[name] = np.resize(np.array(texts, object), shape) if shape else np.array(texts[0], object)
        else:
            inputs[name] = np.zeros(shape, tf.dtypes.as_dtype(info.dtype).as_numpy_dtype)
    return inputs


def _request(model, signature, inputs, dtypes):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value, dtype=dtypes[name]))
    return request


def _dtypes(signature):
    return {name: tf.dtypes.as_dtype(info.dtype) for name, info in signature.inputs.items()}


def _json(value):
    return value.tolist() if value.dtype != object else np.vectorize(str, otypes=[object])(value).tolist()


def _rest_outputs(served, model, signature, inputs, outputs):
    """The REST :predict answer (columnar) for the same inputs, as ``{output name: value}``."""
    body = {"signature_name": signature, "inputs": {name: _json(value) for name, value in inputs.items()}}
    status, answer = http("POST", f"{served.cli.url}/v1/models/{model}:predict", body, timeout=120)
    assert status == 200, answer
    return answer["outputs"] if len(outputs) > 1 else {next(iter(outputs)): answer["outputs"]}


# ---- one model_config_list, every model AVAILABLE ---------------------------------------------------------
def test_every_family_available_from_one_config(served):
    for model in FAMILIES:
        statuses = model_status(served.model_stub, model).model_version_status
        assert [(s.version, s.state, s.status.error_code) for s in statuses] == [(1, AVAILABLE, 0)], model
        status, body = http("GET", f"{served.cli.url}/v1/models/{model}")
        assert status == 200 and [v["state"] for v in body["model_version_status"]] == ["AVAILABLE"], body


@pytest.mark.parametrize("model", FAMILIES)
def test_metadata_lists_the_signatures_as_rest_does(served, model):
    defs = _signature_defs(served, model)
    assert {"metadata", "serving_default"} | SIGNATURES.get(model, set()) <= set(defs)
    status, rest = http("GET", f"{served.cli.url}/v1/models/{model}/metadata")
    assert status == 200, rest
    rest_defs = rest["metadata"]["signature_def"]["signature_def"]
    assert set(defs) == set(rest_defs)
    for name, signature in defs.items():
        assert signature.method_name == rest_defs[name]["method_name"]
        for side in ("inputs", "outputs"):
            assert {key: types_pb2.DataType.Name(info.dtype) for key, info in getattr(signature, side).items()} == \
                {key: info["dtype"] for key, info in rest_defs[name][side].items()}


# ---- Predict equals REST, signature by signature -----------------------------------------------------------
@pytest.mark.parametrize("model", FAMILIES)
def test_predict_equals_rest_for_every_signature(served, model):
    signatures = _predict_signatures(served, model)
    assert "serving_default" in signatures
    for name in signatures:
        signature = _signature_defs(served, model)[name]
        inputs = _inputs(signature, len(TEXTS))
        response = served.stub.Predict(_request(model, name, inputs, _dtypes(signature)), timeout=120)
        assert (response.model_spec.name, response.model_spec.version.value, response.model_spec.signature_name) \
            == (model, 1, name)
        got = json_outputs(response)
        assert set(got) == set(signature.outputs), name
        assert got == _rest_outputs(served, model, name, inputs, got), f"{model} {name}"
        # One answer per row: every output whose 0th dimension is the batch has len(TEXTS) rows.
        batched = [key for key, info in signature.outputs.items() if info.tensor_shape.dim
                   and info.tensor_shape.dim[0].size == -1]
        assert batched and all(len(got[key]) == len(TEXTS) for key in batched), f"{model} {name}"


# ---- TF Serving's status codes for bad requests, per family -------------------------------------------------
def _string_input(signature):
    names = [name for name, info in signature.inputs.items() if info.dtype == types_pb2.DT_STRING]
    assert names, "every family's serving_default takes text"
    return sorted(names)[0]


def _bad_request(served, model, case):
    """``(request, expected code, fragment of the details)`` for one bad request to ``model``."""
    signature = _signature_defs(served, model)["serving_default"]
    inputs, dtypes = _inputs(signature, len(TEXTS)), _dtypes(signature)
    text = _string_input(signature)
    if case == "wrong dtype":
        inputs[text], dtypes[text] = np.ones([len(TEXTS)], np.float32), tf.float32
        return _request(model, "serving_default", inputs, dtypes), "INVALID_ARGUMENT", "DT_STRING"
    if case == "missing input":
        del inputs[text]
        return _request(model, "serving_default", inputs, dtypes), "INVALID_ARGUMENT", f"Missing input(s) '{text}'"
    if case == "more rows than --max-batch-size":
        inputs = _inputs(signature, MAX_BATCH + 1)
        return _request(model, "serving_default", inputs, dtypes), "RESOURCE_EXHAUSTED", f"limit is {MAX_BATCH}"
    if case == "unknown signature":
        return _request(model, "nope", inputs, dtypes), "FAILED_PRECONDITION", "nope"  # TF Serving's code
    assert case == "invalid UTF-8"
    inputs[text] = np.array([b"ok", b"\xff\xfe", b"fine"], object)
    return _request(model, "serving_default", inputs, dtypes), "INVALID_ARGUMENT", "UTF-8"


BAD_CASES = ["wrong dtype", "missing input", "more rows than --max-batch-size", "unknown signature", "invalid UTF-8"]


@pytest.mark.parametrize("case", BAD_CASES)
@pytest.mark.parametrize("model", FAMILIES)
def test_bad_requests_get_tf_servings_codes(served, model, case):
    request, code, fragment = _bad_request(served, model, case)
    with pytest.raises(grpc.RpcError) as info:
        served.stub.Predict(request, timeout=60)
    assert info.value.code() == getattr(grpc.StatusCode, code), info.value.details()
    assert fragment in info.value.details()


# a numeric input sent with a wider dtype than the signature's (TF Serving converts nothing)
WIDER = {types_pb2.DT_INT32: tf.int64, types_pb2.DT_FLOAT: tf.float64}


@pytest.mark.parametrize("model", FAMILIES)
def test_numeric_inputs_of_another_dtype_are_refused(served, model):
    checked = 0
    for name in _predict_signatures(served, model):
        signature = _signature_defs(served, model)[name]
        for key, info in signature.inputs.items():
            if info.dtype == types_pb2.DT_STRING:
                continue
            inputs, dtypes = _inputs(signature, len(TEXTS)), _dtypes(signature)
            dtypes[key] = WIDER[info.dtype]
            with pytest.raises(grpc.RpcError) as error:
                served.stub.Predict(_request(model, name, inputs, dtypes), timeout=60)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, error.value.details()
            sent = types_pb2.DataType.Name(dtypes[key].as_datatype_enum)
            assert f"Input '{key}' has dtype {sent}" in error.value.details()
            checked += 1
    assert checked >= {"translator": 2, "generator": 5}.get(model, 0)


@pytest.mark.parametrize("model", FAMILIES)
def test_invalid_utf8_is_a_400_over_rest_too(served, model):
    signature = _signature_defs(served, model)["serving_default"]
    inputs = {name: _json(value) for name, value in _inputs(signature, len(TEXTS)).items()}
    inputs[_string_input(signature)][1] = "\udcff"    # a lone surrogate: written as the raw byte 0xff below
    body = json.dumps({"inputs": inputs}, ensure_ascii=False).encode("utf-8", "surrogateescape")
    assert b"\xff" in body
    status, answer = http("POST", f"{served.cli.url}/v1/models/{model}:predict", raw=body)
    assert status == 400 and "UTF-8" in answer["error"], answer


# ---- the work and the answer of one request are capped ---------------------------------------------------------
LONG = " ".join(["word"] * 5000)


def _rest_and_grpc(served, model, texts):
    """The same serving_default request (``texts`` as every string input) over REST and gRPC:
    ``((status, JSON answer, answer bytes), grpc.RpcError or None)``."""
    signature = _signature_defs(served, model)["serving_default"]
    inputs = _inputs(signature, len(texts))
    for name, info in signature.inputs.items():
        if info.dtype == types_pb2.DT_STRING:
            inputs[name] = np.array(texts, object)
    raw = json.dumps({"inputs": {name: _json(value) for name, value in inputs.items()}}).encode()
    status, answer = http("POST", f"{served.cli.url}/v1/models/{model}:predict", raw=raw, timeout=120)
    try:
        served.stub.Predict(_request(model, "serving_default", inputs, _dtypes(signature)), timeout=120)
        error = None
    except grpc.RpcError as e:
        error = e
    return (status, answer, len(json.dumps(answer))), error


def test_the_elmo_request_of_the_report_is_refused_before_the_biLM_runs(served):
    """One 2,000-word sentence among empty ones used to be answered with ~95 MB of JSON after 42 s."""
    (status, answer, _), error = _rest_and_grpc(served, "elmo", ["w " * 2000] + [""] * (MAX_BATCH - 1))
    message = "sentence 0 has 2000 tokens; this export accepts at most 256 per sentence (kerasplm export elmo " \
              "--max-tokens)"
    assert status == 400 and answer["error"] == f"assertion failed: [{message}]"
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and message in error.details()


def test_an_answer_over_max_response_bytes_is_413_and_resource_exhausted(served):
    (status, answer, _), error = _rest_and_grpc(served, "elmo", ["w " * 200] * MAX_BATCH)
    fragment = f"would exceed the limit of {MAX_RESPONSE_BYTES:,} bytes per response (--max-response-bytes)"
    assert status == 413 and fragment in answer["error"], answer
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and fragment in error.details()
    (status, _, size), error = _rest_and_grpc(served, "elmo", ["w " * 200])   # one such row is within it
    assert status == 200 and error is None and size > 100_000


@pytest.mark.parametrize("model", FAMILIES)
def test_a_5000_word_row_is_answered_within_bounds_or_refused(served, model):
    """Every family bounds a row: the BERT-shaped exports cut it at their window, the translator at its source
    length, the generator keeps its prompt's end; ELMo, whose every token comes back as vectors, refuses it."""
    (status, answer, size), error = _rest_and_grpc(served, model, [LONG, TEXTS[0]])
    if model == "elmo":
        assert status == 400 and "this export accepts at most 256 per sentence" in answer["error"]
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    else:
        assert status == 200 and error is None, answer
        assert size < 20_000, f"{model}: a 5,000-word row gave {size:,} bytes of JSON"
