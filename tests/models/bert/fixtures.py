"""BERT fixtures shared by several test files; tests/conftest.py loads this module for the whole suite
(``pytest_plugins``), so a test asks for them by name and imports nothing from another test file.

Session-scoped (built once per worker; tests/conftest.py runs the files that use them on one worker):
``toy``, ``learned_run`` and ``pair_run`` (the classifier toy's runs: the classifier job's, classifier export's,
sentence-embedding, distillation and legacy-run tests), ``qa_run`` (the question answering job's and export's tests; nothing may write to it).
Module-scoped (each module that asks builds its own): ``corpus`` (pretraining) and ``init_run`` (the tagger's init run).

Every pytest process loads this module at startup, the xdist controller too, which runs no test: so nothing heavy is
imported at the top; each fixture imports what it needs when it is built."""
import pytest


@pytest.fixture(scope="session")
def toy(tmp_path_factory):
    """A tiny BERT run and toy data (sentiment names as labels; the pairs' labels are 0 / 1)."""
    from tests.models.bert.classifier_toy import NAMES, make_tiny_bert_run, toy_examples, write_tsv

    root = tmp_path_factory.mktemp("toy")
    named = [(text, NAMES[label]) for text, label in toy_examples(256, 0)]
    return {"root": root, "init": make_tiny_bert_run(str(root)),
            "train": write_tsv(root / "train.tsv", named, ["sentence", "label"]),
            "dev": write_tsv(root / "dev.tsv", [(t, NAMES[y]) for t, y in toy_examples(64, 1)], ["sentence", "label"]),
            "pair_train": write_tsv(root / "pair.tsv", toy_examples(64, 2, pair=True), ["a", "b", "label"])}


@pytest.fixture(scope="session")
def learned_run(toy):
    """``(run directory, summary, log lines)`` of 30 steps on the toy task, under a schedule planned over 48
    (shared with the export tests)."""
    from kerasplm.models.bert.classifier_job import finetune_bert_classifier
    from tests.models.bert.classifier_toy import learned_options

    out, lines = str(toy["root"] / "learned"), []
    summary = finetune_bert_classifier(out, log=lines.append, steps=30, **learned_options(toy))
    return out, summary, lines


@pytest.fixture(scope="session")
def pair_run(toy):
    """A sentence-pair classifier with mean pooling, made through the CLI (2 steps; shared with the export tests)."""
    from kerasplm.cli import main

    out = str(toy["root"] / "pairs")
    argv = ["finetune", "bert-classifier", "--train", toy["pair_train"], "--init", toy["init"], "--text-col", "a",
            "--pair-col", "b", "--dev", toy["pair_train"], "--steps", "2", "--batch-size", "8", "--quiet",
            "--max-length", "16", "--pooling", "mean", "--out", out]
    assert main(argv) == 0
    return out


@pytest.fixture(scope="session")
def qa_run(tmp_path_factory):
    """``(run directory, train file, summary)`` after 20 steps on DISTINCT (shared with the export tests)."""
    from kerasplm.models.bert.question_answering_job import finetune_bert_qa
    from tests.models.bert.qa_toy import DISTINCT, make_init_run, qa_run_options, write_squad

    root = tmp_path_factory.mktemp("qa")
    train = write_squad(root / "train.json", DISTINCT)
    out, lines = str(root / "run"), []
    summary = finetune_bert_qa(out, log=lines.append, steps=20,
                               **qa_run_options(train, make_init_run(root / "init")))
    return out, train, summary, lines


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A corpus the test writes: 8 documents of simple sentences, and its vocabulary (words + ## pieces)."""
    import numpy as np

    from tests.models.bert.pretraining_toy import write_pretraining_corpus

    return write_pretraining_corpus(tmp_path_factory.mktemp("bert_corpus"), np.random.default_rng(0))


@pytest.fixture(scope="module")
def init_run(tmp_path_factory):
    """``(run directory, backbone)``: the tagger toy's random tiny BERT written as a run (what `kerasplm convert bert`
    writes)."""
    from tests.models.bert.random_run import write_random_bert_run
    from tests.models.bert.tagger_toy import TINY, VOCAB

    directory = tmp_path_factory.mktemp("bert_init")
    return str(directory), write_random_bert_run(directory, TINY, VOCAB)
