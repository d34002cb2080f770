"""The ELMo job: a tiny corpus, resume equals an uninterrupted run, held-out perplexity per direction,
the run loader, option conflicts and the CLI's one-line errors."""
import json
import math
import os
import shutil

import numpy as np
import pytest

from kerasplm.cli import main
from kerasplm.models.elmo.job import VOCABULARY, WindowedCorpus, read_sentences, train_elmo
from kerasplm.text.word_vocab import build_word_vocab
from kerasplm.models.elmo.model import ElmoLanguageModel
from kerasplm.models.elmo.runs import Elmo, load_elmo
from kerasplm.options import OptionsConflict
from kerasplm.runs import RunDirError, load_run
from kerasplm.text.characters import ElmoPreprocessor
from tests.harness import write_word_corpus
from tests.job_harness import check_job
from tests.models.elmo.toys import ELMO_TINY, WORDS


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_word_corpus(tmp_path_factory.mktemp("elmo_corpus"), WORDS, 60, end=" .")


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory):
    """The shared job road (tests/job_harness.py): 4 steps straight, and 2 steps stopped and resumed to 4."""
    check = check_job(lambda out, steps: train_elmo(out, corpus=corpus, steps=steps, log=lambda *_: None,
                                                    **ELMO_TINY),
                      tmp_path_factory.mktemp("elmo_runs"), steps=4, split_at=2, family="elmo")
    return {"resumed": check.resumed_run, "straight": check.run, "second": check.resumed_summary,
            "whole": check.summary}


def test_windows_and_vocabulary(tmp_path):
    (tmp_path / "c.txt").write_text("b a . a zz\n\n = Head =\n")
    assert read_sentences(str(tmp_path / "c.txt")) == [["b", "a", "."], ["a", "zz"], ["=", "Head", "="]]
    sentences = [["b", "a", "."], ["a", "zz"]]
    vocab = build_word_vocab(sentences, max_words=2, **VOCABULARY)
    assert vocab == ["<S>", "</S>", "<UNK>", "a", "."]
    windows = WindowedCorpus(sentences, vocab, window=4, max_characters=50)
    assert windows.num_tokens == 9 and windows.types.shape == (3, 4)
    batch = next(iter(windows.dataset(3)))
    ids = batch["token_ids"].numpy().reshape(-1)
    np.testing.assert_array_equal(ids, [0, 2, 3, 4, 1, 0, 3, 2, 1, -1, -1, -1])   # b and zz are <UNK>
    chars = batch["char_ids"].numpy().reshape(12, 50)
    assert list(chars[0, :3]) == [259, 257, 260] and list(chars[1, :3]) == [259, ord("b") + 1, 260]
    assert (chars[9:] == 0).all()


def test_resume_equals_uninterrupted(runs):
    assert runs["second"]["steps_this_run"] == 2 and runs["second"]["step"] == 4 and runs["whole"]["step"] == 4
    a, b = runs["second"]["elmo"].model, runs["whole"]["elmo"].model
    for x, y in zip(a.weights, b.weights):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6, err_msg=x.path)
    assert runs["second"]["forward_perplexity"] == pytest.approx(runs["whole"]["forward_perplexity"], rel=1e-5)


def test_metrics_report_each_direction(runs):
    with open(os.path.join(runs["straight"], "metrics.json")) as f:
        metrics = json.load(f)
    for direction in ("forward", "backward"):
        assert metrics[f"{direction}_perplexity"] == pytest.approx(math.exp(metrics[f"heldout_{direction}_loss"]))
        assert 1.0 < metrics[f"{direction}_perplexity"] < 2 * 15          # about uniform over 15 words after 4 steps
    assert metrics["sampled_softmax"] is True and metrics["vocab_size"] == 15


def test_loader_embeds_sentences(runs):
    model = load_run(runs["straight"])
    assert isinstance(model, ElmoLanguageModel) and isinstance(model.preprocessor, ElmoPreprocessor)
    assert model.vocab_size == 15 and model.num_sampled == 6 and model.run_info.step == 4
    elmo = load_elmo(runs["straight"])
    assert isinstance(elmo, Elmo) and elmo.step == 4 and len(elmo.vocab) == 15 and elmo.config["preset"] == "elmo_tiny"
    out = elmo.embed(["the cat sat", "a dog"])
    assert out["elmo_layers"].shape == (2, 3, 3, 32) and out["tokens"][1] == ["a", "dog"]
    np.testing.assert_array_equal(out["mask"], [[True] * 3, [True, True, False]])
    live = runs["whole"]["elmo"].embed(["the cat sat", "a dog"])
    np.testing.assert_allclose(out["elmo_layers"], live["elmo_layers"], atol=1e-6)


def test_run_config_stores_the_model_and_the_vocabulary_file(runs):
    with open(os.path.join(runs["straight"], "config.json")) as f:
        config = json.load(f)
    assert config["model"]["class_name"] == "ElmoLanguageModel"
    assert config["model"]["config"]["vocab_size"] == 15 and config["model"]["config"]["num_sampled"] == 6
    assert config["model"]["config"]["backbone"]["config"]["lstm_dim"] == 32
    assert config["preprocessor"]["config"]["vocabulary"] == "vocab.txt" and config["assets"] == {"vocab": "vocab.txt"}


def test_a_damaged_vocabulary_is_one_line_naming_the_file(runs, tmp_path):
    run = str(tmp_path / "run")
    shutil.copytree(runs["straight"], run)
    with open(os.path.join(run, "vocab.txt"), "a") as f:
        f.write("extra\n")
    with pytest.raises(RunDirError, match=r"vocab\.txt: 16 tokens, but the model's softmax has 15") as info:
        load_elmo(run)
    assert "\n" not in str(info.value)


def test_resume_with_other_run_options_is_refused(runs):
    with pytest.raises(OptionsConflict, match="vocab_size"):
        train_elmo(runs["straight"], steps=5, vocab_size=99, verbose=0)


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["train", "elmo", "--corpus", str(tmp_path / "nope.txt"), "--steps", "1",
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "no such file or directory" in err and err.count("\n") == 1
    assert main(["train", "elmo", "--steps", "1", "--out", str(tmp_path / "r")]) == 2
    assert "give a corpus" in capsys.readouterr().err


def test_elmo_subcommands_have_help():
    for argv in (["train", "elmo", "--help"], ["export", "elmo", "--help"], ["convert", "elmo", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
