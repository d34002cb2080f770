"""finetune_bert_simcse on toy sentences from the tiny BERT run: a few steps separate a sentence's two dropout
views from other sentences; the job road (exact resume); resume through the CLI; the embedder export pools as the run records."""
import json
import shutil

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
from tests.job_harness import check_job
from tests.models.bert.classifier_toy import toy_examples


def positive_minus_negative_cosine(model, inputs):
    """Mean cosine of two dropout views of the same sentence minus that of two different sentences."""
    keras.utils.set_random_seed(1)
    a, b = (tf.math.l2_normalize(model(inputs, training=True), -1).numpy() for _ in range(2))
    cosines = a @ b.T
    off_diagonal = ~np.eye(len(a), dtype=bool)
    return float(np.diag(cosines).mean() - cosines[off_diagonal].mean())


def simcse_options(root, toy):
    return dict(train=str(root / "train.txt"), dev=str(root / "dev.txt"), init=toy["init"], schedule_steps=14,
                batch_size=16, learning_rate=5e-3, max_length=12, pooling="mean", verbose=0, jit_compile=False)


@pytest.fixture(scope="module")
def simcse_run(toy, tmp_path_factory):
    root = tmp_path_factory.mktemp("simcse")
    sentences = [text for text, _ in toy_examples(96, 3)]
    (root / "train.txt").write_text("\n".join(sentences) + "\n\n")
    (root / "dev.txt").write_text("\n".join(sentences[:12]) + "\n")
    out, lines = str(root / "run"), []
    summary = finetune_bert_simcse(out, log=lines.append, steps=12, **simcse_options(root, toy))
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


def test_the_job_road_and_the_export_with_its_pooling(simcse_run, toy, tmp_path):
    """The shared job road (tests/job_harness.py): stopped at step 6 and resumed, the same weights as 12 steps
    straight; the resumed run's embedder export, loaded with kerasplm blocked, pools as the run records."""
    texts = simcse_run["sentences"][:3]
    check = check_job(lambda out, steps: finetune_bert_simcse(out, log=lambda *_: None, steps=steps,
                                                              **simcse_options(simcse_run["root"], toy)),
                      tmp_path, steps=12, split_at=6, run=simcse_run["out"], family="bert_simcse",
                      export=lambda run, to: export_embedder(run, to),
                      export_calls=[("serving_default", {"text": texts})])
    model = check.model
    assert isinstance(model, BertSimCSE) and model.pooling == "mean" and not model.use_mlp
    meta = read_metadata(check.export_path)
    assert (meta["pooling"], meta["normalize"]) == ("mean", True)
    # the export's embedding is the model's test-time one, L2-normalized; the export pads to the longest text,
    # the preprocessor here to 12: padding changes nothing
    expected = tf.math.l2_normalize(model(model.preprocessor(tf.constant(texts)), training=False), -1).numpy()
    np.testing.assert_allclose(check.export_outputs[0]["embedding"], expected, atol=1e-5)


def test_resumes_through_the_cli(simcse_run, tmp_path):
    out = str(tmp_path / "run")
    shutil.copytree(simcse_run["out"], out)
    assert main(["finetune", "bert-simcse", "--out", out, "--train", str(simcse_run["root"] / "train.txt"),
                 "--steps", "14", "--quiet", "--no-jit"]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["step"] == 14 and metrics["dev"]["sentences"] == 12      # --dev is a RUN option: kept
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
