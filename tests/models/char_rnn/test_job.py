"""`kerasplm train char-rnn` at a tiny size on a generated corpus: the run directory, per-character perplexity and
bits per character, learning, resume, option conflicts, and `kerasplm generate` / `score` on the run."""
import json
import math
import os

import pytest

from kerasplm import cli
from kerasplm.models.char_rnn.job import train_char_rnn
from kerasplm.models.gpt.generator import load_text_generator
from kerasplm.options import OptionsConflict
from kerasplm.text.char_vocab import build_char_vocab
from tests.job_harness import check_job

CYCLE = "abcdefgh\n"
TINY = dict(preset="char_rnn_tiny", seq_len=16, batch_size=8, learning_rate=0.03, sample_chars=12, verbose=0,
            jit_compile=False, seed=1)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    directory = tmp_path_factory.mktemp("corpus")
    train, valid = directory / "train.txt", directory / "valid.txt"
    train.write_text(CYCLE * 300, encoding="utf-8")
    valid.write_text(CYCLE * 20 + "abcZefgh\n", encoding="utf-8")    # Z: not a training character
    return str(train), str(valid)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, corpus):
    out = str(tmp_path_factory.mktemp("char") / "run")
    logged = []
    summary = train_char_rnn(out, corpus=corpus[0], valid_corpus=corpus[1], steps=80, log=logged.append, **TINY)
    return out, summary, logged


def test_run_directory_and_per_character_metrics(tiny_run, corpus):
    out, summary, logged = tiny_run
    config = json.load(open(os.path.join(out, "config.json")))
    assert (config["family"], config["task"], config["preset"]) == ("char_rnn", "char_lm", "char_rnn_tiny")
    assert config["assets"] == {"char_vocab": "chars.json"}
    assert config["preprocessor"]["class_name"] == "CharacterTokenizer"
    assert config["preprocessor"]["config"]["vocabulary"] == "chars.json"   # relative: the run can move
    vocab = json.load(open(os.path.join(out, "chars.json"), encoding="utf-8"))
    assert vocab == build_char_vocab(CYCLE * 300) and len(vocab) == 12
    assert config["model"]["config"]["backbone"]["config"]["vocab_size"] == 12
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["step"] == 80 and "generator" not in metrics
    assert metrics["eval_perplexity"] == pytest.approx(math.exp(metrics["eval_loss"]), rel=1e-3)
    assert metrics["eval_bits_per_char"] == pytest.approx(metrics["eval_loss"] / math.log(2), rel=1e-3)
    # The cycle is deterministic after its first characters: a learned model is far below ln(12) = 2.5 nats
    # (the one <unk> held-out character costs its share).
    assert metrics["eval_loss"] < 0.5
    assert any("1 held-out <unk>" in line for line in logged)
    assert any("bits per character" in line for line in logged)
    assert [s["prompt"] for s in metrics["samples"]] == ["", "abcdefgh"]


def test_the_run_generates_and_scores_through_the_text_generator(tiny_run, capsys):
    generator = load_text_generator(tiny_run[0])
    assert generator.generate(["abc", "fg"], max_new_tokens=9, jit_compile=False) == ["defgh\nabc", "h\nabcdefg"]
    sampled = generator.generate(["abc"], max_new_tokens=20, temperature=2.0, seed=3, jit_compile=False)
    assert sampled == generator.generate(["abc"], max_new_tokens=20, temperature=2.0, seed=3, jit_compile=False)
    assert cli.main(["generate", "--run", tiny_run[0], "--max-new-tokens", "6", "cde"]) == 0
    assert capsys.readouterr().out == "cdefgh\nab\n"
    scored = generator.score(["abcdefgh", "hgfedcba"])
    assert scored[0]["num_tokens"] == 8 and scored[0]["perplexity"] < scored[1]["perplexity"]


def test_the_job_road_tiny_run_resume(tiny_run, corpus, tmp_path):
    """tests/job_harness.py: the module's 80-step run, and the same job stopped at 40 and resumed, agree."""
    result = check_job(lambda out, steps: train_char_rnn(out, corpus=corpus[0], valid_corpus=corpus[1], steps=steps,
                                                         log=lambda *_: None, **TINY),
                       tmp_path, steps=80, split_at=40, run=tiny_run[0], family="char_rnn")
    assert result.resumed_summary["steps_this_run"] == 40


def test_resume_continues_and_refuses_another_model(tiny_run, corpus):
    out = tiny_run[0]
    with pytest.raises(OptionsConflict, match=r"cell='lstm' \(the run has None\)"):
        train_char_rnn(out, corpus=corpus[0], valid_corpus=corpus[1], steps=90, cell="lstm", log=lambda *_: None,
                       **TINY)
    summary = train_char_rnn(out, corpus=corpus[0], valid_corpus=corpus[1], steps=90, log=lambda *_: None,
                             **{**TINY, "sample_chars": 0})
    assert summary["step"] == 90 and summary["steps_this_run"] == 10
    history = json.load(open(os.path.join(out, "history.json")))
    assert history["step"][-1] == 90


def test_a_missing_corpus_is_named(tmp_path):
    with pytest.raises(ValueError, match="give a training corpus"):
        train_char_rnn(str(tmp_path / "run"), steps=1, log=lambda *_: None, **TINY)
    assert not os.path.exists(tmp_path / "run" / "config.json")
