"""The classifier SavedModel of a tiny fine-tuned BERT: same probabilities as the Python model when loaded without
kerasplm, label names, sentence pairs, the bad-input battery, `kerasplm serve` and the CLI; the classify /
regress signatures over tf.Examples (TF Serving's rules for them, equal to serving_default), served by one
`kerasplm serve` process over REST (:classify, :regress) and gRPC (Classify, Regress), bad requests included."""
import json
import os
import re
import contextlib
import io

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2, input_pb2,
                                     prediction_service_pb2_grpc, regression_pb2)

from kerasplm import serving
from kerasplm.cli import main
from kerasplm.export import read_metadata
from kerasplm.export.base import check_signature_method
from kerasplm.export.classifier import export_classifier
from kerasplm.jobs.bert_finetune import finetune_bert_classifier, load_bert_classifier
from tests.export.contract import check_bad_inputs, run_isolated
from tests.serving.client import REPO_ROOT, CLIServer, http, predict
from tests.jobs.test_bert_finetune import learned_run, pair_run, toy, toy_examples, write_tsv  # noqa: F401

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
    (outputs,) = run_isolated(exported["single"], [("serving_default", {"text": TEXTS})])
    np.testing.assert_allclose(np.array(outputs["probabilities"]), expected, atol=1e-5)
    assert outputs["label"] == [["negative", "positive"][i] for i in expected.argmax(-1)]
    meta = read_metadata(exported["single"])
    assert (meta["family"], meta["labels"], meta["pair_input"]) == ("bert_classifier", ["negative", "positive"], False)


def test_pairs_isolated_equal_python_model(runs, exported):
    model = load_bert_classifier(runs["pair"])
    expected = model.predict_texts(TEXTS, pairs=TEXTS[::-1])
    (outputs,) = run_isolated(exported["pair"], [("serving_default", {"text": TEXTS, "text_pair": TEXTS[::-1]})])
    np.testing.assert_allclose(np.array(outputs["probabilities"]), expected, atol=1e-5)
    assert outputs["label"] == [["0", "1"][i] for i in expected.argmax(-1)]


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


# ---- classify / regress signatures --------------------------------------------------------------------------
def test_example_signatures_equal_serving_default_without_kerasplm(exported):
    pairs = TEXTS[::-1]
    single, single_classify = run_isolated(exported["single"], [
        ("serving_default", {"text": TEXTS}), ("classify", {"inputs": [example(text=t) for t in TEXTS]})])
    np.testing.assert_allclose(single_classify["scores"], single["probabilities"], atol=1e-6)
    assert single_classify["classes"] == [["negative", "positive"]] * len(TEXTS)
    pair, pair_classify = run_isolated(exported["pair"], [
        ("serving_default", {"text": TEXTS, "text_pair": pairs}),
        ("classify", {"inputs": [example(text=t, text_pair=p) for t, p in zip(TEXTS, pairs)]})])
    np.testing.assert_allclose(pair_classify["scores"], pair["probabilities"], atol=1e-6)
    assert pair_classify["classes"] == [["0", "1"]] * len(TEXTS)
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


def test_classify_signature_rejects_bad_examples(exported):
    fn = tf.saved_model.load(exported["pair"]).signatures["classify"]
    for inputs, message in (([example(text="good")], "Feature: text_pair .* is required but could not be found"),
                            ([b"not an example"], "Could not parse example input"),
                            ([tf.train.Example(features=tf.train.Features(feature={
                                "text": tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
                                "text_pair": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"a"]))}))
                              .SerializeToString()], "text.*[Dd]ata types don't match")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            fn(inputs=tf.constant(inputs))
