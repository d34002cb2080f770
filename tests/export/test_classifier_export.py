"""The classifier SavedModel of a tiny fine-tuned BERT: same probabilities as the Python model when loaded without
kerasplm, label names, sentence pairs, the bad-input battery, `kerasplm serve` and the CLI."""
import os

import numpy as np
import pytest

from kerasplm import serving
from kerasplm.cli import main
from kerasplm.export import read_metadata
from kerasplm.export.classifier import export_classifier
from kerasplm.jobs.bert_finetune import load_bert_classifier
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, run_isolated
from tests.serving.client import predict
from tests.jobs.test_bert_finetune import learned_run, pair_run, toy  # noqa: F401 (session fixtures)

TEXTS = ["the movie was good great nice", "awful bad plot", "", "sad !"]


@pytest.fixture(scope="module")
def runs(learned_run, pair_run, tmp_path_factory):
    """The finetune tests' runs (session fixtures): single sentences with named labels, and pairs."""
    return {"single": learned_run[0], "pair": pair_run, "export": str(tmp_path_factory.mktemp("classifier_export"))}


@pytest.fixture(scope="module")
def exported(runs):
    return {name: export_classifier(runs[name], os.path.join(runs["export"], name)) for name in ("single", "pair")}


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


def test_batch_safe_with_warmup_records(exported):
    """TF Serving's batching rule holds for every signature, and the warmup records cover and replay on each."""
    check_batch_safe(exported["single"])
    check_warmup(exported["single"])
    check_batch_safe(exported["pair"])
    check_warmup(exported["pair"])
