"""The ELECTRA pretraining job: a tiny run, its metrics and loaders, exact resume, the CLI, and its discriminator as
a BERT fine-tuning init and embedder export."""
import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from kerasplm.data.pretraining import BERT_SPECIAL_TOKENS
from kerasplm.models.bert.runs import bert_run_parts
from kerasplm.models.electra.pretraining_job import ElectraPretrainingOptions, train_electra
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.electra.model import ElectraPretrainer
from kerasplm.options import OptionsConflict
from kerasplm.runs import load_run
from tests.job_harness import check_job
from tests.models.bert.pretraining_toy import WORDS, write_pretraining_corpus



@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """8 documents of simple sentences, their vocabulary, and a sentiment-free toy TSV (label = has 'cat')."""
    root = tmp_path_factory.mktemp("electra_corpus")
    rng = np.random.default_rng(0)
    write_pretraining_corpus(root, rng)
    rows = [" ".join(rng.choice(WORDS, size=4)) for _ in range(16)]
    (root / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{r}\t{int('cat' in r)}\n" for r in rows),
                                    encoding="utf-8")
    return {"corpus": str(root / "corpus.txt"), "vocab": str(root / "vocab.txt"), "train": str(root / "train.tsv")}


def run(out, corpus, steps, **overrides):
    options = dict(corpus=corpus["corpus"], vocab=corpus["vocab"], preset="electra_tiny", max_seq_length=24,
                   max_predictions_per_seq=4, batch_size=4, dev_documents=2, steps=steps, learning_rate=1e-3,
                   schedule_steps=6, warmup_steps=2, verbose=0, log=lambda *_: None)
    return train_electra(str(out), **{**options, **overrides})


@pytest.fixture(scope="module")
def straight(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("electra_runs") / "straight"
    return out, run(out, corpus, 6)


def test_run_metrics_and_loaders(straight):
    out, summary = straight
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("eval_mlm_accuracy", "eval_mlm_loss", "eval_mlm_perplexity", "eval_rtd_loss", "eval_rtd_accuracy",
                "eval_rtd_precision", "eval_rtd_recall", "eval_replaced_fraction"):
        assert key in metrics and math.isfinite(metrics[key]), key
    assert 0.0 < metrics["eval_replaced_fraction"] < 0.3 and metrics["step"] == 6
    config = json.loads((out / "config.json").read_text())
    assert (config["family"], config["task"]) == ("electra", "electra_pretraining")
    assert config["options"]["rtd_weight"] == 50.0 and config["options"]["sentence_task"] == "none"
    assert (config["model"]["class_name"], config["model"]["config"]["generator_size"]) == ("ElectraPretrainer", 0.25)
    trained = summary["pretrainer"]
    pretrainer = load_run(str(out))
    assert isinstance(pretrainer, ElectraPretrainer)
    for a, b in zip(pretrainer.weights, trained.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    # What --init and the exports read: the discriminator's backbone and the corpus' vocabulary.
    backbone, tokenizer, _ = bert_run_parts(str(out))
    assert isinstance(backbone, BertBackbone) and backbone.config.hidden_size == 32
    assert tokenizer.vocab_size == len(BERT_SPECIAL_TOKENS) + len(WORDS) + 2
    for a, b in zip(backbone.weights, trained.backbone.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def test_interrupted_and_resumed_run_equals_uninterrupted(straight, corpus, tmp_path):
    """tests/job_harness.py, the interrupted run recorded as the bert run it was before ELECTRA had a folder."""
    def as_before(run_dir):
        stored = os.path.join(run_dir, "config.json")
        with open(stored, encoding="utf-8") as f:
            text = f.read()
        with open(stored, "w", encoding="utf-8") as f:
            f.write(text.replace('"family": "electra"', '"family": "bert"'))

    out, _ = straight
    result = check_job(lambda run_dir, steps: run(run_dir, corpus, steps), tmp_path, steps=6, split_at=3, run=out,
                       family="electra", between=as_before)
    assert json.loads(open(os.path.join(result.resumed_run, "config.json")).read())["family"] == "bert"
    m1, m2 = (json.loads(open(os.path.join(d, "metrics.json")).read()) for d in (result.run, result.resumed_run))
    assert m1["eval_rtd_loss"] == pytest.approx(m2["eval_rtd_loss"], rel=1e-5)
    with pytest.raises(OptionsConflict, match="rtd_weight"):
        run(result.resumed_run, corpus, 7, rtd_weight=1.0)


def test_the_discriminator_fine_tunes_as_a_classifier_and_exports_as_an_embedder(straight, corpus, tmp_path):
    from kerasplm.models.sentence_embedding.embedder_export import export_embedder
    from kerasplm.models.bert.classifier_job import finetune_bert_classifier

    out, summary = straight
    discriminator = summary["pretrainer"].backbone
    classifier = tmp_path / "classifier"
    finetune_bert_classifier(str(classifier), init=str(out), train=corpus["train"], steps=1, learning_rate=1e-12,
                             batch_size=8, max_length=12, verbose=0, log=lambda *_: None)
    tuned = load_run(str(classifier)).backbone
    for a, b in zip(tuned.weights, discriminator.weights):    # started from the discriminator (lr ~ 0: unchanged)
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, err_msg=a.path)
    path = export_embedder(str(out), str(tmp_path / "embedder"))
    texts = ["the cat sat on the mat .", "a big red dog"]
    served = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(texts))["embedding"].numpy()
    backbone, tokenizer, _ = bert_run_parts(str(out))
    ids = [[2, *tokenizer.tokenize(tf.constant([t])).flat_values.numpy(), 3] for t in texts]
    width = max(map(len, ids))
    inputs = {"token_ids": tf.constant([i + [0] * (width - len(i)) for i in ids]),
              "padding_mask": tf.constant([[1] * len(i) + [0] * (width - len(i)) for i in ids])}
    hidden = backbone(inputs, training=False)["sequence_output"].numpy()
    mask = inputs["padding_mask"].numpy()[..., None]
    mean = (hidden * mask).sum(1) / mask.sum(1)
    np.testing.assert_allclose(served, mean / np.linalg.norm(mean, axis=-1, keepdims=True), atol=1e-5)


def test_options_and_cli_flags(corpus, capsys):
    from kerasplm.cli import build_parser
    from kerasplm.options import options_from_args

    args = build_parser().parse_args(["train", "electra", "--corpus", corpus["corpus"], "--preset", "electra_base",
                                      "--generator-size", "0.25", "--rtd-weight", "20", "--steps", "3",
                                      "--out", "x"])
    given = options_from_args(args, ElectraPretrainingOptions)
    assert (given["preset"], given["generator_size"], given["rtd_weight"]) == ("electra_base", 0.25, 20.0)
    assert ElectraPretrainingOptions().preset == "electra_small"
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["train", "electra", "--help"])
    assert stop.value.code == 0 and "--generator-size" in capsys.readouterr().out
    with pytest.raises(ValueError, match="bert_tiny"):
        ElectraPretrainingOptions(corpus=corpus["corpus"], preset="bert_tiny")
    with pytest.raises(ValueError, match="corpus"):
        train_electra("unused", steps=1, log=lambda *_: None)
