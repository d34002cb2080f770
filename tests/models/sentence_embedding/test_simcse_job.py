"""finetune_bert_simcse on toy sentences from the tiny BERT run: a few steps separate a sentence's two dropout
views from other sentences; resume through the CLI; the embedder export pools as the run records."""
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.cli import main
from kerasplm.export.base import read_metadata
from kerasplm.models.sentence_embedding.embedder_export import bert_run_parts, export_embedder
from kerasplm.models.sentence_embedding.simcse import BertSimCSE
from kerasplm.models.sentence_embedding.simcse_job import finetune_bert_simcse
from kerasplm.runs import load_run
from kerasplm.text.bert_tokenizer import BertPreprocessor
from tests.models.bert.classifier_toy import toy_examples


def positive_minus_negative_cosine(model, inputs):
    """Mean cosine of two dropout views of the same sentence minus that of two different sentences."""
    keras.utils.set_random_seed(1)
    a, b = (tf.math.l2_normalize(model(inputs, training=True), -1).numpy() for _ in range(2))
    cosines = a @ b.T
    off_diagonal = ~np.eye(len(a), dtype=bool)
    return float(np.diag(cosines).mean() - cosines[off_diagonal].mean())


@pytest.fixture(scope="module")
def simcse_run(toy, tmp_path_factory):
    root = tmp_path_factory.mktemp("simcse")
    sentences = [text for text, _ in toy_examples(96, 3)]
    (root / "train.txt").write_text("\n".join(sentences) + "\n\n")
    (root / "dev.txt").write_text("\n".join(sentences[:12]) + "\n")
    out, lines = str(root / "run"), []
    summary = finetune_bert_simcse(out, log=lines.append, train=str(root / "train.txt"), dev=str(root / "dev.txt"),
                                   init=toy["init"], steps=12, schedule_steps=14, batch_size=16, learning_rate=5e-3,
                                   max_length=12, pooling="mean", verbose=0, jit_compile=False)
    return {"root": root, "out": out, "summary": summary, "lines": lines, "sentences": sentences}


def test_a_few_steps_separate_positives_from_negatives(simcse_run, toy):
    backbone, tokenizer, _ = bert_run_parts(toy["init"])
    inputs = BertPreprocessor(tokenizer, 12)(tf.constant(simcse_run["sentences"][:16]))
    # the random tiny BERT embeds every sentence alike (the two gaps about 0); 12 steps open a clear gap
    before = positive_minus_negative_cosine(BertSimCSE(backbone, pooling="mean"), inputs)
    after = positive_minus_negative_cosine(simcse_run["summary"]["model"], inputs)
    assert after > before + 0.3, (before, after)
    summary = simcse_run["summary"]
    assert summary["step"] == 12 and set(summary["dev"]) == {"uniformity", "mean_cosine", "sentences"}
    assert any(line.startswith("dev uniformity") for line in simcse_run["lines"])


def test_resumes_through_the_cli_and_exports_with_its_pooling(simcse_run, tmp_path):
    out = simcse_run["out"]
    assert main(["finetune", "bert-simcse", "--out", out, "--train", str(simcse_run["root"] / "train.txt"),
                 "--steps", "14", "--quiet", "--no-jit"]) == 0
    metrics = json.loads((simcse_run["root"] / "run" / "metrics.json").read_text())
    assert metrics["step"] == 14 and metrics["dev"]["sentences"] == 12      # --dev is a RUN option: kept
    model = load_run(out)
    assert isinstance(model, BertSimCSE) and model.pooling == "mean" and not model.use_mlp
    path = export_embedder(out, str(tmp_path / "embedder"))
    meta = read_metadata(path)
    assert (meta["pooling"], meta["normalize"]) == ("mean", True)
    texts = simcse_run["sentences"][:3]
    served = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(texts))["embedding"].numpy()
    # the export's embedding is the model's test-time one, L2-normalized; the export pads to the longest text,
    # the preprocessor here to 12: padding changes nothing
    expected = tf.math.l2_normalize(model(model.preprocessor(tf.constant(texts)), training=False), -1).numpy()
    np.testing.assert_allclose(served, expected, atol=1e-5)
    with pytest.raises(ValueError, match="--init|init"):
        finetune_bert_simcse(str(tmp_path / "other"), train=str(simcse_run["root"] / "train.txt"), steps=1,
                             batch_size=4)


def test_recorded_pooling_names_are_the_exporters():
    from kerasplm.models.bert.classifier import SENTENCE_TRANSFORMERS_POOLING as _SENTENCE_TRANSFORMERS_POOLING
    from kerasplm.models.sentence_embedding.simcse_job import _RECORDED_POOLING

    from kerasplm.models.bert.classifier import POOLINGS, sentence_embedding_record

    back = {_SENTENCE_TRANSFORMERS_POOLING[v]: k for k, v in _RECORDED_POOLING.items()}
    assert back == {"cls": "cls", "mean": "mean", "max": "max"}
    for pooling in POOLINGS:   # what a sentence-embedding run records is what the exporter reads back
        (mode,) = sentence_embedding_record(pooling, True)["pooling"]
        assert _SENTENCE_TRANSFORMERS_POOLING[mode] == pooling
