"""The classifier SavedModel of a tiny fine-tuned BERT: same probabilities as the Python model when loaded without
kerasplm, label names, sentence pairs, the bad-input battery, `kerasplm serve` and the CLI; the classify /
regress signatures over tf.Examples (TF Serving's rules for them, equal to serving_default), served by one
`kerasplm serve` process over REST (:classify, :regress) and gRPC (Classify, Regress), bad requests included."""
import contextlib
import io
import json
import os
import re
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2, inference_pb2,
                                     prediction_service_pb2_grpc, regression_pb2)

from kerasplm import serving
from kerasplm.cli import main
from kerasplm.export import read_metadata
from kerasplm.export.base import check_signature_method
from kerasplm.export.classifier import export_classifier
from kerasplm.models.bert.classifier_job import finetune_bert_classifier, load_bert_classifier
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, run_isolated
from tests.serving.client import REPO_ROOT, CLIServer, http, predict
from tests.models.bert.classifier_toy import toy_examples, write_tsv

TEXTS = ["the movie was good great nice", "awful bad plot", "", "sad !"]


@pytest.fixture(scope="module")
def runs(learned_run, pair_run, tmp_path_factory):
    """The finetune tests' runs (session fixtures): single sentences with named labels, and pairs."""
    return {"single": learned_run[0], "pair": pair_run, "export": str(tmp_path_factory.mktemp("classifier_export"))}


@pytest.fixture(scope="module")
def regression_run(toy):
    """A one-step regression fine-tune (labels are numbers): its export answers ``regress``."""
    rows = [(text, f"{label * 4.0 + 0.5:.1f}") for text, label in toy_examples(16, 3)]
    train = write_tsv(toy["root"] / "regression.tsv", rows, ["sentence", "label"])
    out = str(toy["root"] / "regression")
    finetune_bert_classifier(out, log=lambda *_: None, steps=1, task="regression", train=train, init=toy["init"],
                             batch_size=8, max_length=12, verbose=0)
    return out


@pytest.fixture(scope="module")
def exported(runs, regression_run):
    runs = {**runs, "regression": regression_run}
    return {name: export_classifier(runs[name], os.path.join(runs["export"], name))
            for name in ("single", "pair", "regression")}


def example(**features):
    """A serialized tf.Example with one bytes value per feature."""
    return tf.train.Example(features=tf.train.Features(feature={
        name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode()]))
        for name, value in features.items()})).SerializeToString()


def test_isolated_equals_python_model(runs, exported):
    model = load_bert_classifier(runs["single"])
    expected = model.predict_texts(TEXTS)
    outputs, classified = run_isolated(exported["single"], [
        ("serving_default", {"text": TEXTS}), ("classify", {"inputs": [example(text=t) for t in TEXTS]})])
    np.testing.assert_allclose(np.array(outputs["probabilities"]), expected, atol=1e-5)
    assert outputs["label"] == [["negative", "positive"][i] for i in expected.argmax(-1)]
    # the classify signature (serialized tf.Examples) gives the same numbers, every class named
    np.testing.assert_allclose(classified["scores"], outputs["probabilities"], atol=1e-6)
    assert classified["classes"] == [["negative", "positive"]] * len(TEXTS)
    meta = read_metadata(exported["single"])
    assert (meta["family"], meta["labels"], meta["pair_input"]) == ("bert_classifier", ["negative", "positive"], False)


def test_pairs_isolated_equal_python_model(runs, exported):
    model = load_bert_classifier(runs["pair"])
    expected = model.predict_texts(TEXTS, pairs=TEXTS[::-1])
    outputs, classified = run_isolated(exported["pair"], [
        ("serving_default", {"text": TEXTS, "text_pair": TEXTS[::-1]}),
        ("classify", {"inputs": [example(text=t, text_pair=p) for t, p in zip(TEXTS, TEXTS[::-1])]})])
    np.testing.assert_allclose(np.array(outputs["probabilities"]), expected, atol=1e-5)
    assert outputs["label"] == [["0", "1"][i] for i in expected.argmax(-1)]
    np.testing.assert_allclose(classified["scores"], outputs["probabilities"], atol=1e-6)
    assert classified["classes"] == [["0", "1"]] * len(TEXTS)


def _check(texts, outputs):
    probabilities = outputs["probabilities"]
    assert probabilities.shape == (len(texts), 2) and probabilities.dtype == np.float32
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    assert set(outputs["label"].tolist()) <= {b"negative", b"positive"}


def test_bad_inputs(exported):
    check_bad_inputs(exported["single"], "serving_default", "text", output_check=_check)
    check_bad_inputs(exported["pair"], "serving_default", "text", extra_inputs={"text_pair": lambda texts: texts},
                     output_check=lambda texts, outputs: None)


def test_served_and_cli(runs, exported, tmp_path, capsys):
    server = serving.ModelServer(os.path.dirname(exported["single"]), "sentiment",
                                 rest_api_port=0, grpc_port=None, quiet=True)
    server.start()
    try:
        status, body = predict(f"{server.url}/v1/models/sentiment", {"instances": TEXTS[:2]})
    finally:
        server.stop()
    assert status == 200, body
    expected = load_bert_classifier(runs["single"]).predict_texts(TEXTS[:2])
    assert [row["label"] for row in body["predictions"]] == [["negative", "positive"][i] for i in expected.argmax(-1)]
    np.testing.assert_allclose([row["probabilities"] for row in body["predictions"]], expected, atol=1e-5)
    assert main(["export", "classifier", "--run", runs["single"], "--to", str(tmp_path / "cli")]) == 0
    assert capsys.readouterr().out.strip().endswith(os.path.join("cli", "1"))
    assert main(["export", "classifier", "--run", runs["single"], "--to", str(tmp_path / "cli"), "--version", "1"]) == 2
    assert "version 1 exists" in capsys.readouterr().err


def test_batch_safe_with_warmup_records(exported):
    """TF Serving's batching rule holds for every signature, and the warmup records cover and replay on each."""
    check_batch_safe(exported["single"])
    check_warmup(exported["single"])
    check_batch_safe(exported["pair"])
    check_warmup(exported["pair"])


# ---- classify / regress signatures --------------------------------------------------------------------------
def test_regress_signature_equals_serving_default_without_kerasplm(exported):
    scores, regressed = run_isolated(exported["regression"], [
        ("serving_default", {"text": TEXTS}), ("regress", {"inputs": [example(text=t) for t in TEXTS]})])
    assert len(regressed["outputs"]) == len(TEXTS)
    np.testing.assert_allclose(regressed["outputs"], scores["score"], atol=1e-6)
    assert read_metadata(exported["regression"])["regression"] is True


def _signature_defs(version_dir):
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(version_dir, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    (meta_graph,) = saved_model.meta_graphs
    return meta_graph.signature_def


def test_signature_defs_follow_tf_serving_rules(exported):
    defs = _signature_defs(exported["single"])
    assert {n: defs[n].method_name for n in ("serving_default", "classify", "metadata")} == {
        "serving_default": "tensorflow/serving/predict", "classify": "tensorflow/serving/classify",
        "metadata": "tensorflow/serving/predict"}
    classify = defs["classify"]
    assert list(classify.inputs) == ["inputs"] and sorted(classify.outputs) == ["classes", "scores"]
    assert classify.inputs["inputs"].dtype == tf.string.as_datatype_enum
    assert [d.size for d in classify.outputs["scores"].tensor_shape.dim] == [-1, 2]
    assert classify.outputs["classes"].dtype == tf.string.as_datatype_enum
    check_signature_method("classify", classify)
    check_signature_method("classify", _signature_defs(exported["pair"])["classify"])
    regress = _signature_defs(exported["regression"])["regress"]
    assert regress.method_name == "tensorflow/serving/regress" and list(regress.outputs) == ["outputs"]
    assert [d.size for d in regress.outputs["outputs"].tensor_shape.dim] == [-1]
    check_signature_method("regress", regress)
    # What TF Serving would refuse is refused here too.
    for name, broken, problem in (("classify", defs["serving_default"], "exactly one input 'inputs'"),
                                  ("regress", classify, "exactly one output 'outputs'")):
        wrong = type(broken)()
        wrong.CopyFrom(broken)
        wrong.method_name = f"tensorflow/serving/{name}"
        with pytest.raises(ValueError, match=problem):
            check_signature_method(name, wrong)
    scores_int = type(classify)()
    scores_int.CopyFrom(classify)
    scores_int.outputs["scores"].dtype = tf.int32.as_datatype_enum
    with pytest.raises(ValueError, match="'scores' must be DT_FLOAT"):
        check_signature_method("classify", scores_int)


# ---- served: one `kerasplm serve` process, REST and gRPC -----------------------------------------------------
MAX_BATCH = 5
CONFIG = """model_config_list {
  config { name: "sentiment" base_path: "single" }
  config { name: "pairs" base_path: "pair" }
  config { name: "scores" base_path: "regression" }
}
"""


@pytest.fixture(scope="module")
def served(exported, tmp_path_factory):
    root = os.path.dirname(os.path.dirname(exported["single"]))
    config = tmp_path_factory.mktemp("classify_serve") / "models.config"
    config.write_text(CONFIG.replace('base_path: "', f'base_path: "{root}/'))
    server = CLIServer(["--model_config_file", str(config), "--max-batch-size", str(MAX_BATCH),
                        "--batch-chunk-size", "2", "--quiet"], config.parent / "serve.log")
    channel = None
    try:
        server.wait_ready()
        channel = grpc.insecure_channel(server.grpc_target)
        server.stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        yield server
    finally:
        if channel is not None:
            channel.close()
        server.close()


def _readme_block(marker, language):
    with open(os.path.join(REPO_ROOT, "export", "README.md"), encoding="utf-8") as f:
        block = re.search(rf"<!-- {marker} -->\s*```{language}\n(.*?)```", f.read(), re.S)
    assert block, f"export/README.md lacks the <!-- {marker} --> block"
    return block.group(1)


def _rest(served, model, verb, body):
    return http("POST", f"{served.url}/v1/models/{model}:{verb}", body)


def _probabilities(served, model, inputs):
    status, body = predict(f"{served.url}/v1/models/{model}", {"inputs": inputs})
    assert status == 200, body
    outputs = body["outputs"]   # a regression model's only output, "score", comes back bare
    return np.array(outputs["probabilities"] if isinstance(outputs, dict) else outputs)


def _grpc_request(kind, model, signature, examples, context=None):
    request = (classification_pb2.ClassificationRequest if kind == "classify" else regression_pb2.RegressionRequest)()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    examples = [tf.train.Example.FromString(example(**e)) for e in examples]
    if context is None:
        request.input.example_list.examples.extend(examples)
    else:
        request.input.example_list_with_context.context.CopyFrom(tf.train.Example.FromString(example(**context)))
        request.input.example_list_with_context.examples.extend(examples)
    return request


def _grpc_error(call, request):
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=60)
    return caught.value.code(), caught.value.details()


def test_served_classify_equals_serving_default(served):
    body = json.loads(_readme_block("classify-rest", "json"))
    texts = [e["text"] for e in body["examples"]]
    status, answer = _rest(served, "sentiment", "classify", body)
    assert status == 200, answer
    expected = _probabilities(served, "sentiment", {"text": texts})
    assert [[label for label, _ in row] for row in answer["results"]] == [["negative", "positive"]] * len(texts)
    np.testing.assert_allclose([[score for _, score in row] for row in answer["results"]], expected, atol=1e-6)

    code = _readme_block("classify-grpc", "python")
    assert '"localhost:8500"' in code
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace("localhost:8500", served.grpc_target), "export/README.md", "exec"), {})
    assert printed.getvalue().strip() == repr([[(label, round(score, 4)) for label, score in row]
                                                for row in answer["results"]])
    # more rows than --batch-chunk-size (2): chunked, same numbers
    many = TEXTS + ["good"]
    response = served.stub.Classify(_grpc_request("classify", "sentiment", "classify", [{"text": t} for t in many]),
                                    timeout=60)
    assert response.model_spec.signature_name == "classify" and response.model_spec.version.value == 1
    np.testing.assert_allclose([[c.score for c in row.classes] for row in response.result.classifications],
                               _probabilities(served, "sentiment", {"text": many}), atol=1e-6)


def test_served_pairs_context_and_regress(served):
    texts, pair = ["good great", "awful bad", "sad !"], "the plot"
    expected = _probabilities(served, "pairs", {"text": texts, "text_pair": [pair] * len(texts)})
    # the context gives every example its text_pair; an example's own "text" wins over the context's
    status, answer = _rest(served, "pairs", "classify", {
        "signature_name": "classify", "context": {"text_pair": pair, "text": "ignored"},
        "examples": [{"text": t} for t in texts]})
    assert status == 200, answer
    np.testing.assert_allclose([[s for _, s in row] for row in answer["results"]], expected, atol=1e-6)
    response = served.stub.Classify(_grpc_request("classify", "pairs", "classify", [{"text": t} for t in texts],
                                                  context={"text_pair": pair, "text": "ignored"}), timeout=60)
    np.testing.assert_allclose([[c.score for c in row.classes] for row in response.result.classifications],
                               expected, atol=1e-6)
    assert [c.label for c in response.result.classifications[0].classes] == ["0", "1"]
    # b64 values are bytes too
    status, b64 = _rest(served, "pairs", "classify", {"signature_name": "classify", "examples": [
        {"text": {"b64": "Z29vZCBncmVhdA=="}, "text_pair": [pair]}]})
    assert status == 200 and b64["results"][0] == answer["results"][0]

    scores = _probabilities(served, "scores", {"text": texts})
    status, answer = _rest(served, "scores", "regress", {"signature_name": "regress",
                                                          "examples": [{"text": t} for t in texts]})
    assert status == 200, answer
    np.testing.assert_allclose(answer["results"], scores, atol=1e-6)
    response = served.stub.Regress(_grpc_request("regress", "scores", "regress", [{"text": t} for t in texts]),
                                   timeout=60)
    np.testing.assert_allclose([r.value for r in response.result.regressions], scores, atol=1e-6)


def test_served_metadata_reports_method_names(served):
    status, body = http("GET", f"{served.url}/v1/models/sentiment/metadata")
    assert status == 200
    defs = body["metadata"]["signature_def"]["signature_def"]
    assert defs["classify"]["method_name"] == "tensorflow/serving/classify"
    assert defs["serving_default"]["method_name"] == "tensorflow/serving/predict"
    metadata = served.stub.GetModelMetadata(get_model_metadata_pb2.GetModelMetadataRequest(
        model_spec={"name": "scores"}, metadata_field=["signature_def"]), timeout=60)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    metadata.metadata["signature_def"].Unpack(signatures)
    assert signatures.signature_def["regress"].method_name == "tensorflow/serving/regress"
    assert sorted(signatures.signature_def["regress"].outputs) == ["outputs"]


BAD_REST = [  # (model, verb, body, status, part of the error)
    ("pairs", "classify", {"signature_name": "classify", "examples": [{"text": "good"}]}, 400,
     "Feature: text_pair (data type: string) is required but could not be found"),
    ("sentiment", "classify", {"signature_name": "classify", "examples": [{"text": 3}]}, 400,
     "Key: text, Index: 0.  Data types don't match. Data type: int64 but expected type: string"),
    ("sentiment", "classify", {"signature_name": "classify", "examples": [{"text": ["a", 3]}]}, 400,
     "Unexpected element type in feature: text expecting type: bytes"),
    ("sentiment", "classify", {"signature_name": "classify", "examples": [{"text": None}]}, 400,
     "unexpected JSON type: null"),
    ("sentiment", "classify", {"signature_name": "classify", "examples": ["good"]}, 400,
     "Example must be JSON object"),
    ("sentiment", "classify", {"signature_name": "classify", "examples": []}, 400,
     "'examples' value is an empty array"),
    ("sentiment", "classify", {"signature_name": "classify"}, 400, "key 'examples' is expected"),
    ("sentiment", "classify", {"signature_name": "classify", "examples": [{"text": "a"}] * (MAX_BATCH + 1)}, 400,
     f"the limit is {MAX_BATCH} per request"),
    ("sentiment", "classify", {"examples": [{"text": "a"}]}, 400,
     "Expected classification signature method_name to be tensorflow/serving/classify. "
     "Was: tensorflow/serving/predict"),
    ("sentiment", "classify", {"signature_name": "nope", "examples": [{"text": "a"}]}, 400,
     "No signature was found with the name: nope"),
    ("sentiment", "regress", {"signature_name": "classify", "examples": [{"text": "a"}]}, 400,
     "Expected regression signature method_name to be tensorflow/serving/regress. Was: tensorflow/serving/classify"),
    ("nope", "classify", {"signature_name": "classify", "examples": [{"text": "a"}]}, 404, "nope"),
]


def test_served_bad_classify_requests(served):
    for model, verb, body, status, message in BAD_REST:
        got, answer = _rest(served, model, verb, body)
        assert (got, set(answer)) == (status, {"error"}), (body, answer)
        assert message in answer["error"], (body, answer)
    # predict still works on the classify signature (TF Serving's predict takes any signature)
    status, answer = predict(f"{served.url}/v1/models/sentiment", {
        "signature_name": "classify", "instances": [{"b64": "bm90IGFuIGV4YW1wbGU="}]})
    assert status == 400 and "Could not parse example input" in answer["error"]

    invalid, exhausted = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED
    classify, regress = served.stub.Classify, served.stub.Regress
    for call, request, code, message in (
            (classify, _grpc_request("classify", "pairs", "classify", [{"text": "good"}]), invalid,
             "text_pair (data type: string) is required"),
            (classify, _grpc_request("classify", "sentiment", "classify", []), invalid, "Input is empty."),
            (classify, classification_pb2.ClassificationRequest(model_spec={"name": "sentiment",
                                                                            "signature_name": "classify"}),
             invalid, "Input is empty."),
            (classify, _grpc_request("classify", "sentiment", "classify", [{"text": "a"}] * (MAX_BATCH + 1)),
             exhausted, f"the limit is {MAX_BATCH}"),
            (classify, _grpc_request("classify", "sentiment", "", [{"text": "a"}]), invalid,
             "method_name to be tensorflow/serving/classify. Was: tensorflow/serving/predict"),
            (classify, _grpc_request("classify", "sentiment", "nope", [{"text": "a"}]), invalid,
             "No signature was found with the name: nope"),
            (regress, _grpc_request("regress", "sentiment", "classify", [{"text": "a"}]), invalid,
             "Expected regression signature method_name"),
            (classify, _grpc_request("classify", "scores", "regress", [{"text": "a"}]), invalid,
             "Expected classification signature method_name"),
            (classify, _grpc_request("classify", "nope", "classify", [{"text": "a"}]), grpc.StatusCode.NOT_FOUND,
             "nope")):
        got, details = _grpc_error(call, request)
        assert got == code and message in details, (request, got, details)
    wrong_type = _grpc_request("classify", "sentiment", "classify", [])
    wrong_type.input.example_list.examples.add().features.feature["text"].int64_list.value.append(3)
    got, details = _grpc_error(classify, wrong_type)
    assert got == invalid and "Key: text, Index: 0.  Data types don't match" in details


def test_served_multi_inference(served):
    texts = ["good great", "awful bad"]
    request = inference_pb2.MultiInferenceRequest()
    request.tasks.add(model_spec={"name": "sentiment", "signature_name": "classify"},
                      method_name="tensorflow/serving/classify")
    request.input.example_list.examples.extend(tf.train.Example.FromString(example(text=t)) for t in texts)
    (result,) = served.stub.MultiInference(request, timeout=60).results
    assert (result.model_spec.name, result.model_spec.signature_name) == ("sentiment", "classify")
    np.testing.assert_allclose([[c.score for c in row.classes] for row in result.classification_result.classifications],
                               _probabilities(served, "sentiment", {"text": texts}), atol=1e-6)
    predict_task = inference_pb2.MultiInferenceRequest()
    predict_task.CopyFrom(request)
    predict_task.tasks[0].method_name = "tensorflow/serving/predict"
    other_model = inference_pb2.MultiInferenceRequest()
    other_model.CopyFrom(request)
    other_model.tasks.add(model_spec={"name": "scores", "signature_name": "regress"},
                          method_name="tensorflow/serving/regress")
    twice = inference_pb2.MultiInferenceRequest()
    twice.CopyFrom(request)
    twice.tasks.add().CopyFrom(request.tasks[0])
    for bad, code, message in ((predict_task, grpc.StatusCode.UNIMPLEMENTED, "Unsupported signature method_name"),
                               (other_model, grpc.StatusCode.INVALID_ARGUMENT, "must access the same model name"),
                               (twice, grpc.StatusCode.INVALID_ARGUMENT, "Duplicate evaluation of signature: classify"),
                               (inference_pb2.MultiInferenceRequest(), grpc.StatusCode.INVALID_ARGUMENT,
                                "at least one task")):
        got, details = _grpc_error(served.stub.MultiInference, bad)
        assert got == code and message in details, (got, details)


def test_served_classify_in_the_metrics(served):
    _rest(served, "sentiment", "classify", {"signature_name": "classify", "examples": [{"text": "good"}]})
    served.stub.Regress(_grpc_request("regress", "scores", "regress", [{"text": "good"}]), timeout=60)
    text = urllib.request.urlopen(f"{served.url}/monitoring/prometheus/metrics", timeout=30).read().decode()
    assert re.search(r':tensorflow:serving:request_count\{model_name="sentiment",API="classify",'
                     r'signature_name="classify",status="OK"\} [1-9]', text), text
    assert re.search(r':tensorflow:serving:request_latency_count\{model_name="scores",API="regress",'
                     r'entrypoint="GRPC",signature_name="regress"\} [1-9]', text), text
