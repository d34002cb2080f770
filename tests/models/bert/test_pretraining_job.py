"""The BERT pretraining job: a tiny run, metrics, the job road (exact resume), the run's loaders, options and CLI
flags."""
import json
import math

import numpy as np
import pytest

from kerasplm.data.pretraining import BERT_SPECIAL_TOKENS
from kerasplm.models.bert.runs import bert_run_parts
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.pretrainer import BertPretrainer
from kerasplm.models.bert.pretraining_job import BertPretrainingOptions, train_bert
from kerasplm.options import OptionsConflict
from kerasplm.runs import load_run
from tests.job_harness import check_job
from tests.models.bert.pretraining_toy import WORDS


def run(out, corpus, steps, **overrides):
    options = dict(corpus=corpus[0], vocab=corpus[1], preset="bert_tiny", max_seq_length=24,
                   max_predictions_per_seq=4, batch_size=4, dev_documents=2, steps=steps, learning_rate=1e-3,
                   schedule_steps=8, warmup_steps=2, verbose=0, log=lambda *_: None)
    return train_bert(str(out), **{**options, **overrides})


@pytest.fixture(scope="module")
def straight(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("bert_runs") / "straight"
    return out, run(out, corpus, 8)


def test_run_metrics_and_loaders(straight):
    out, summary = straight
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("eval_mlm_accuracy", "eval_nsp_accuracy", "eval_mlm_loss", "eval_mlm_perplexity"):
        assert key in metrics and math.isfinite(metrics[key])
    assert metrics["eval_mlm_perplexity"] == pytest.approx(math.exp(metrics["eval_mlm_loss"]))
    assert 0.0 <= metrics["eval_mlm_accuracy"] <= 1.0 and metrics["step"] == 8
    config = json.loads((out / "config.json").read_text())
    assert (config["family"], config["task"], config["assets"]) == ("bert", "pretraining", {"vocab": "vocab.txt"})
    assert config["options"]["schedule_steps"] == 8 and config["options"]["sentence_task"] == "nsp"
    assert (config["model"]["class_name"], config["model"]["config"]["sentence_task"]) == ("BertPretrainer", "nsp")
    # load_run gives the whole pretrainer (the checkpoint's model), the embedder its backbone (model/backbone).
    trained = summary["pretrainer"]
    pretrainer = load_run(str(out))
    assert isinstance(pretrainer, BertPretrainer)
    for a, b in zip(pretrainer.weights, trained.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    assert pretrainer.preprocessor.tokenizer.vocab_size == len(BERT_SPECIAL_TOKENS) + len(WORDS) + 2
    backbone, tokenizer, _ = bert_run_parts(str(out))
    assert isinstance(backbone, BertBackbone) and tokenizer.lower_case
    for a, b in zip(backbone.weights, trained.backbone.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def test_weight_decay_skips_layer_norm_and_biases(straight, corpus):
    from kerasplm.models.bert.pretraining_job import _optimizer

    options = BertPretrainingOptions(corpus=corpus[0], schedule_steps=10)
    optimizer = _optimizer(options, 10)
    model = straight[1]["pretrainer"]
    decayed = {v.path for v in model.trainable_variables if optimizer._use_weight_decay(v)}
    assert any(p.endswith("kernel") for p in decayed) and any(p.endswith("embeddings") for p in decayed)
    assert not any(p.endswith(("gamma", "beta", "bias")) for p in decayed)
    assert optimizer.epsilon == 1e-6 and optimizer.weight_decay == 0.01


def test_the_job_road_tiny_run_resume(straight, corpus, tmp_path):
    """The shared job road (tests/job_harness.py): the run records the bert family and loads at step 8; stopped at
    step 4 and resumed it reaches the same weights and held-out loss; a resume that changes the masking is refused."""
    out, summary = straight
    check = check_job(lambda to, steps: run(to, corpus, steps), tmp_path, steps=8, split_at=4, run=out,
                      family="bert")
    for a, b in zip(summary["pretrainer"].weights, check.resumed_summary["pretrainer"].weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=a.path)
    m1 = json.loads((out / "metrics.json").read_text())
    m2 = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert m1["eval_mlm_loss"] == pytest.approx(m2["eval_mlm_loss"], rel=1e-5)
    with pytest.raises(OptionsConflict, match="masking"):
        run(tmp_path / "resumed", corpus, 9, masking="whole_word")


def test_options_and_cli_flags(corpus, capsys):
    from kerasplm.cli import build_parser
    from kerasplm.options import options_from_args

    args = build_parser().parse_args(["train", "bert", "--corpus", corpus[0], "--masking", "whole_word",
                                      "--sentence-task", "sop", "--static-masking", "--max-seq-length", "64",
                                      "--steps", "3", "--out", "x"])
    given = options_from_args(args, BertPretrainingOptions)
    assert given["masking"] == "whole_word" and given["sentence_task"] == "sop" and given["static_masking"] is True
    assert given["max_seq_length"] == 64 and given["steps"] == 3
    with pytest.raises(SystemExit) as stop:   # the help text formats (a bare % in a help string would not)
        build_parser().parse_args(["train", "bert", "--help"])
    assert stop.value.code == 0 and "--max-predictions-per-seq" in capsys.readouterr().out
    with pytest.raises(ValueError, match="span_separator"):
        BertPretrainingOptions(corpus=corpus[0], masking="span")
    with pytest.raises(ValueError, match="corpus"):
        train_bert("unused", steps=1, log=lambda *_: None)
