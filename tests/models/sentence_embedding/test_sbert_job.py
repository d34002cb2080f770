"""finetune_bert_sbert on toy sentiment sentences from the tiny BERT run, one short run per objective: each learns
what its dev figure measures; the same seed gives the same run through the CLI; the embedder export of a run is
the model's own embeddings with its pooling; bad TSV rows fail in one line naming file and line."""
import json
import random

import numpy as np
import pytest
import tensorflow as tf

from kerasplm.cli import main
from kerasplm.export.base import read_metadata
from kerasplm.models.sentence_embedding.embedder_export import bert_run_parts
from kerasplm.models.sentence_embedding.sbert_job import finetune_bert_sbert, read_sbert_tsv, sbert_dev_scores
from kerasplm.models.sentence_embedding.sbert import BertSentenceBert
from kerasplm.runs import load_run
from kerasplm.text.bert_tokenizer import BertPreprocessor
from tests.job_harness import check_job
from tests.models.bert.classifier_toy import toy_examples

# objective -> (pooling, learning rate) of its run: every pooling is trained once
RUNS = {"classification": ("mean", 2e-2), "regression": ("max", 5e-3), "triplet": ("cls", 2e-2)}
STEPS = 10


def sentiment_rows(n, seed):
    """``n`` (anchor, same-sentiment, other-sentiment, same?) rows of toy sentences; pairs take the second or the
    third sentence as their partner by ``same?``."""
    rng = random.Random(seed)
    examples = toy_examples(4 * n, seed)
    by_label = {y: [text for text, label in examples if label == y] for y in (0, 1)}
    rows = []
    for i in range(n):
        label = i % 2
        rows.append((rng.choice(by_label[label]), rng.choice(by_label[label]), rng.choice(by_label[1 - label]),
                     rng.random() < 0.5))
    return rows


def write_rows(path, rows):
    path.write_text("".join("\t".join(str(x) for x in row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def write_files(root, name, rows):
    """The three objectives' files of ``rows``: NLI-like labels, scores on a 0-5 scale, triplets."""
    return {"classification": write_rows(root / f"{name}_nli.tsv", [
                (a, p if same else n, "entailment" if same else "contradiction") for a, p, n, same in rows]),
            "regression": write_rows(root / f"{name}_sts.tsv", [(a, p if same else n, 5 if same else 0)
                                                                for a, p, n, same in rows]),
            "triplet": write_rows(root / f"{name}_triplets.tsv", [(a, p, n) for a, p, n, _ in rows])}


def run_arguments(objective, files):
    pooling, learning_rate = RUNS[objective]
    return dict(objective=objective, pooling=pooling, train=files["train"][objective], dev=files["dev"][objective],
                steps=STEPS, batch_size=16, learning_rate=learning_rate, max_length=12, score_scale=5, seed=3)


@pytest.fixture(scope="module")
def sbert(toy, tmp_path_factory):
    """A tiny run per objective on the session's tiny BERT run, and its log lines."""
    root = tmp_path_factory.mktemp("sbert")
    files = {"train": write_files(root, "train", sentiment_rows(96, 5)),
             "dev": write_files(root, "dev", sentiment_rows(32, 6))}
    runs = {}
    for objective in RUNS:
        lines = []
        summary = finetune_bert_sbert(str(root / objective), log=lines.append, init=toy["init"], verbose=0,
                                      jit_compile=False, **run_arguments(objective, files))
        runs[objective] = {"out": str(root / objective), "summary": summary, "lines": lines}
    return {"root": root, "files": files, "runs": runs}


def untrained_scores(toy, objectives, files):
    """The dev figures of the starting point, per objective: the tiny BERT's embeddings (and a fresh W_t)."""
    backbone, tokenizer, _ = bert_run_parts(toy["init"])
    preprocessor, scores = BertPreprocessor(tokenizer, 12), {}
    for objective in objectives:
        sentences, targets = read_sbert_tsv(files["dev"][objective], objective, score_scale=5)
        model = BertSentenceBert(backbone, objective, RUNS[objective][0], preprocessor=preprocessor)
        scores[objective] = sbert_dev_scores(model, sentences, targets)
    return scores


def test_each_objective_learns_its_dev_figure(sbert, toy):
    runs = sbert["runs"]
    for objective, run in runs.items():
        summary = run["summary"]
        assert summary["step"] == STEPS and summary["dev"]["examples"] == 32, objective
        assert isinstance(summary["model"], BertSentenceBert) and summary["model"].objective == objective
        assert any(line.startswith("dev ") for line in run["lines"]), run["lines"]
        metrics = json.loads(open(f"{run['out']}/metrics.json").read())
        assert metrics["dev"] == pytest.approx(summary["dev"])
    classification = runs["classification"]["summary"]
    assert classification["labels"] == ["contradiction", "entailment"]
    # half the dev pairs share their sentiment: 10 steps on |u - v| tell them apart
    assert classification["dev"]["accuracy"] >= 0.75, classification["dev"]
    untrained = untrained_scores(toy, ("regression", "triplet"), sbert["files"])
    before, after = untrained["regression"], runs["regression"]["summary"]["dev"]
    # (the gold scores are 0 or 1: many ties, Spearman's ρ is at most about 0.87)
    assert after["pearson"] > max(0.9, before["pearson"] + 0.3) and after["spearman"] > before["spearman"], \
        (before, after)
    # the tiny BERT already ranks most toy triplets right (their sentiment words differ); training opens the margin
    before, after = untrained["triplet"], runs["triplet"]["summary"]["dev"]
    assert after["accuracy"] >= before["accuracy"] and after["loss"] < 0.5 * before["loss"], (before, after)


def test_the_job_road_tiny_run_resume(sbert, toy, tmp_path):
    """The shared job road (tests/job_harness.py) on the classification objective: stopped at step 5 and resumed,
    the same weights and dev figures as the fixture's 10 steps straight (the schedule planned over all 10)."""
    arguments = {**run_arguments("classification", sbert["files"])}
    del arguments["steps"]
    check = check_job(lambda out, steps: finetune_bert_sbert(out, log=lambda *_: None, init=toy["init"], verbose=0,
                                                             jit_compile=False, steps=steps, schedule_steps=STEPS,
                                                             **arguments),
                      tmp_path, steps=STEPS, split_at=STEPS // 2, run=sbert["runs"]["classification"]["out"],
                      family="bert_sbert")
    assert check.resumed_summary["steps_this_run"] == STEPS - STEPS // 2
    assert check.resumed_summary["dev"]["accuracy"] == pytest.approx(
        sbert["runs"]["classification"]["summary"]["dev"]["accuracy"])


def test_same_seed_same_run_through_the_cli(sbert, toy):
    """The CLI's run of the triplet options equals the fixture's: same dev figures, same weights."""
    out = str(sbert["root"] / "again")
    arguments = run_arguments("triplet", sbert["files"])
    argv = ["finetune", "bert-sbert", "--out", out, "--init", toy["init"], "--quiet", "--no-jit"]
    for key, value in arguments.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    assert main(argv) == 0
    first, again = load_run(sbert["runs"]["triplet"]["out"]), load_run(out)
    assert json.loads(open(f"{out}/metrics.json").read())["dev"] == sbert["runs"]["triplet"]["summary"]["dev"]
    for a, b in zip(first.weights, again.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def test_the_embedder_export_is_the_models_embeddings(sbert, tmp_path, capsys):
    out = sbert["runs"]["regression"]["out"]           # max pooling: the run records it, the export uses it
    assert main(["export", "embedder", "--run", out, "--to", str(tmp_path / "embedder")]) == 0
    path = capsys.readouterr().out.strip().splitlines()[-1]
    meta = read_metadata(path)
    assert (meta["pooling"], meta["normalize"], meta["embedding_size"]) == ("max", True, 32)
    model = load_run(out)
    assert isinstance(model, BertSentenceBert) and model.pooling == "max"
    texts = ["good great fine film", "the plot was awful !", "sad"]
    served = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(texts))["embedding"].numpy()
    # the export pads each request to its longest text, the model's preprocessor to 12: padding changes nothing
    expected = model.embed_texts(texts)
    np.testing.assert_allclose(served, expected / np.linalg.norm(expected, axis=-1, keepdims=True), atol=1e-5)


def test_bad_files_fail_in_one_line_naming_file_and_line(tmp_path, toy, capsys):
    def error(content, objective="regression", **kwargs):
        path = tmp_path / "bad.tsv"
        path.write_bytes(content)
        with pytest.raises(ValueError) as info:
            read_sbert_tsv(str(path), objective, **kwargs)
        message = str(info.value)
        assert "\n" not in message and message.startswith(str(path))
        return message[len(str(path)):]

    assert error(b"a\tb\t0.5\na\tb\n") == ":2: 2 column(s), 3 expected (sentence1, sentence2, score, tab-separated)"
    assert error(b"a\tb\tc\td\n", "triplet") == \
        ":1: 4 column(s), 3 expected (anchor, positive, negative, tab-separated)"
    assert error(b"a\tb\t0.5\n\na\tb\thigh\n") == ":3: the score 'high' is not a number"
    assert error(b"a\tb\t4\na\tb\t5.5\n", score_scale=5) == ":2: the score 5.5 is outside [0, 5] (score_scale / " \
                                                            "--score-scale)"
    assert error(b"a\tb\tnan\n") == ":1: the score nan is outside [0, 1] (score_scale / --score-scale)"
    assert error(b"a\t \tentailment\n", "classification") == ":1: empty sentence2"
    assert error(b"a\tb\t1\n\xff\tb\t1\n") == ":2: not valid UTF-8 (byte 0 of the line)"
    assert error(b"") == ": no examples (one per line: sentence1, sentence2, score, tab-separated)"
    assert error(b"s1\ts2\tscore\n\n", header=True).startswith(": no examples")
    sentences, scores = read_sbert_tsv(str(write_rows(tmp_path / "ok.tsv", [("a", "b", 5), ("c", "d", 2)])),
                                       "regression", score_scale=5)
    assert sentences == [["a", "c"], ["b", "d"]] and scores.tolist() == pytest.approx([1.0, 0.4])
    # through the CLI: exit status 2, the one line on stderr, before any run is written
    bad = write_rows(tmp_path / "cli.tsv", [("a", "b", 0.5), ("c", "d")])
    assert main(["finetune", "bert-sbert", "--train", bad, "--init", toy["init"], "--objective", "regression",
                 "--out", str(tmp_path / "run")]) == 2
    assert f"{bad}:2: 2 column(s), 3 expected" in capsys.readouterr().err
    one_label = write_rows(tmp_path / "one.tsv", [("a", "b", "entailment"), ("c", "d", "entailment")])
    assert main(["finetune", "bert-sbert", "--train", one_label, "--init", toy["init"], "--out",
                 str(tmp_path / "run")]) == 2
    assert f"{one_label}: one label only ('entailment')" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
