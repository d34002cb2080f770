"""The GPT language-model job, TextGenerator and the generate/score CLI, at a tiny size on a generated corpus."""
import json
import math
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from kerasplm import cli
from kerasplm.models.gpt.job import load_text_generator, make_lm_dataset, train_gpt
from kerasplm.models.gpt.generator import score_token_ids
from tests.harness import write_word_corpus
from tests.job_harness import check_job

WORDS = ["the", "king", "queen", "speaks", "walks", "to", "a", "castle", "garden", "and", "sleeps", "slowly"]
TINY = dict(preset="gpt_tiny", vocab_size=300, seq_len=16, batch_size=4, warmup_steps=2, learning_rate=3e-3,
            eval_max_windows=8, sample_tokens=0, verbose=0, log=lambda *_: None)
NO_XLA = dict(jit_compile=False)  # tracing the decoding loop is far cheaper than compiling it


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_word_corpus(tmp_path_factory.mktemp("corpus"), WORDS, 400)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, corpus):
    out = str(tmp_path_factory.mktemp("gpt") / "run")
    summary = train_gpt(out, corpus=corpus, steps=8, eval_every=4, **TINY)
    return out, summary


@pytest.fixture(scope="module")
def generator(tiny_run):
    return load_text_generator(tiny_run[0])


def test_run_directory_metrics_and_learning(tiny_run):
    out, summary = tiny_run
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["family"] == "gpt" and config["task"] == "causal_lm" and config["preset"] == "gpt_tiny"
    assert config["assets"] == {"spm_model": "spm.model"} and os.path.isfile(os.path.join(out, "spm.model"))
    assert config["model"]["class_name"] == "GPT" and config["model"]["config"]["backbone"]["config"]["vocab_size"] == 300
    assert config["preprocessor"]["class_name"] == "SentencePieceTokenizer"
    assert config["preprocessor"]["config"]["model"] == "spm.model"   # relative: the run directory can move
    assert config["options"]["seq_len"] == 16 and config["options"]["decay_steps"] == 8  # resolved, stored
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["step"] == 8 and "generator" not in metrics
    assert metrics["eval_perplexity"] == pytest.approx(math.exp(metrics["eval_loss"]), rel=1e-3)
    # An untrained model's loss is about ln(vocab) = 5.7; 8 steps on this repetitive text must beat it clearly.
    history = json.load(open(os.path.join(out, "history.json")))
    assert history["eval_step"] == [4, 8] and history["eval_loss"][-1] < math.log(300) - 0.3
    assert "samples" not in metrics  # sample_tokens=0


def test_packed_windows_are_a_pure_function_of_the_seed():
    ids = np.arange(1, 200, dtype=np.int32)
    first = [b.numpy() for b in make_lm_dataset(ids, 8, 4, seed=5).take(12)]
    again = [b.numpy() for b in make_lm_dataset(ids, 8, 4, seed=5).take(12)]
    other = [b.numpy() for b in make_lm_dataset(ids, 8, 4, seed=6).take(12)]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))
    for batch in first:  # each window is 9 consecutive tokens of the stream
        assert batch.shape == (4, 9) and np.all(np.diff(batch, axis=1) == 1)
    held_out = [b.numpy() for b in make_lm_dataset(ids[:20], 8, 4, shuffle=False)]
    # 19 predictions in 3 windows (8 + 8 + 3 predictions), the last 0-padded.
    assert np.concatenate(held_out).tolist() == [list(range(1, 10)), list(range(9, 18)), [17, 18, 19, 20] + [0] * 5]


def test_the_job_road_tiny_run_resume(tiny_run, corpus, tmp_path):
    """tests/job_harness.py: the run the module trained, and the same job stopped at 4 and resumed to 8, agree."""
    result = check_job(lambda out, steps: train_gpt(out, corpus=corpus, steps=steps, decay_steps=8, **TINY), tmp_path,
                       steps=8, split_at=4, run=tiny_run[0], family="gpt")
    assert result.config["task"] == "causal_lm" and result.resumed_summary["steps_this_run"] == 4


def test_generation_is_seeded_and_batch_independent(tiny_run, generator):
    assert generator.step == 8
    prompts = ["the king", "a", "the queen walks to the castle and"]
    sample = dict(max_new_tokens=6, temperature=1.0, top_k=20, seed=3, **NO_XLA)
    assert generator.generate(prompts, **sample) == tiny_run[1]["generator"].generate(prompts, **sample)
    assert generator.generate(prompts, **sample) == generator.generate(prompts, **sample)
    assert generator.generate(prompts, **sample) != generator.generate(prompts, **{**sample, "seed": 4})
    greedy = generator.generate(prompts, max_new_tokens=6, **NO_XLA)
    assert greedy == [generator.generate([p], max_new_tokens=6, **NO_XLA)[0] for p in prompts]
    out = generator.generate_ids(prompts, max_new_tokens=6, num_beams=2, **NO_XLA)
    assert out.tokens.shape[0] == 3 and out.scores is not None
    with pytest.raises(ValueError, match="top_k and top_p need sampling"):
        generator.generate(prompts, top_k=3)
    with pytest.raises(ValueError, match=r"max_new_tokens must be an integer in \[1, 63\]"):
        generator.generate(prompts, max_new_tokens=64)


def test_score_equals_the_log_likelihood_from_the_logits(generator):
    lines = ["the king speaks.", "", "a castle", " ".join(WORDS * 5)]  # the last is longer than 64 positions
    results = generator.score(lines)
    model, tok, eot = generator.model, generator.tokenizer, generator.end_of_text_id
    for line, result in zip(lines, results):
        ids = [eot] + tok.tokenize(tf.constant([line])).to_list()[0]
        expected = 0.0
        for start in range(0, len(ids) - 1, 64):  # windows of 64 predictions, each seeing only itself
            window = ids[start:start + 65]
            log_probs = tf.nn.log_softmax(model(tf.constant([window[:-1]]))[0]).numpy()
            expected += sum(log_probs[t, window[t + 1]] for t in range(len(window) - 1))
        assert result["num_tokens"] == len(ids) - 1
        assert result["log_likelihood"] == pytest.approx(expected, rel=1e-4, abs=1e-4)
        assert result["perplexity"] == pytest.approx(math.exp(-expected / max(len(ids) - 1, 1)), rel=1e-4)
    assert results[3]["num_tokens"] > 64
    ll, n = score_token_ids(model, tf.ragged.constant([[5, 6, 7]], tf.int64), None, 64)
    direct = tf.nn.log_softmax(model(tf.constant([[5, 6]]))[0]).numpy()
    assert int(n[0]) == 2 and float(ll[0]) == pytest.approx(direct[0, 6] + direct[1, 7], rel=1e-5)


def test_cli_generate_and_score(tiny_run, generator, tmp_path, capsys):
    out = tiny_run[0]
    assert cli.main(["generate", "--run", out, "--max-new-tokens", "5", "the king"]) == 0
    printed = capsys.readouterr().out.splitlines()
    # The CLI decodes with XLA; the reference without (cheaper to trace): greedy tokens agree.
    assert printed[0] == "the king" + generator.generate(["the king"], max_new_tokens=5, **NO_XLA)[0]
    # Without --max-new-tokens: 64 tokens, or as many as gpt_tiny's 64 positions leave (63) after the prompt.
    assert cli.main(["generate", "--run", out, "--temperature", "0.8", "--top-k", "40", "--seed", "1", "the"]) == 0
    assert capsys.readouterr().out.startswith("the")
    lines = tmp_path / "lines.txt"
    lines.write_text("the king speaks.\na castle\n", encoding="utf-8")
    assert cli.main(["score", "--run", out, str(lines)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "log_likelihood\tnum_tokens\tperplexity" and len(rows) == 3
    expected = generator.score(["the king speaks.", "a castle"])
    assert float(rows[1].split("\t")[0]) == pytest.approx(expected[0]["log_likelihood"], abs=1e-3)


def test_errors_are_one_line(tiny_run, corpus, tmp_path, capsys):
    assert cli.main(["train", "gpt", "--steps", "1", "--out", str(tmp_path / "r")]) == 2
    assert "give a training corpus" in capsys.readouterr().err
    with pytest.raises(ValueError, match="only a time budget needs decay_steps"):
        train_gpt(str(tmp_path / "budget"), corpus=corpus, time_budget=1, **TINY)
    no_tokenizer = tmp_path / "no_tokenizer"
    shutil.copytree(tiny_run[0], no_tokenizer)
    config = json.load(open(no_tokenizer / "config.json"))
    config["preprocessor"] = None
    (no_tokenizer / "config.json").write_text(json.dumps(config))
    assert cli.main(["generate", "--run", str(no_tokenizer), "hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert "the run has no tokenizer" in err and len(err.splitlines()) == 1
