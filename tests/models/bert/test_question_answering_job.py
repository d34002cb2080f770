"""finetune_bert_qa on a toy SQuAD file from a tiny BERT run: overfits three questions, scores them with EM/F1,
writes metrics.json and predictions.json, resumes through the CLI, loads with load_run."""
import json
import os
import shutil

import pytest

from kerasplm.cli import main
from kerasplm.models.bert.question_answering_job import BertQA, BertQAOptions, _examples, finetune_bert_qa, load_bert_qa
from kerasplm.runs import RunDirError, load_run
from tests.job_harness import check_job
from tests.models.bert.qa_toy import SMALL, make_init_run, qa_run_options, write_squad


def test_the_job_road_tiny_run_resume(qa_run, tmp_path):
    """The shared job road (tests/job_harness.py): stopped at step 10 and resumed, the same weights and dev scores
    as the fixture's 20 steps straight."""
    out, train, summary, _ = qa_run
    init = os.path.join(os.path.dirname(out), "init")      # the fixture's tiny BERT run, beside its run
    check = check_job(lambda to, steps: finetune_bert_qa(to, log=lambda *_: None, steps=steps,
                                                         **qa_run_options(train, init)),
                      tmp_path, steps=20, split_at=10, run=out, family="bert_qa")
    assert check.resumed_summary["steps_this_run"] == 10 and check.resumed_summary["dev"] == summary["dev"]


def test_overfits_scores_and_resumes(qa_run, capsys, tmp_path):
    run, train, summary, lines = qa_run
    out = str(tmp_path / "run")      # resumed below: a copy, the fixture's run stays at step 20 for the other tests
    shutil.copytree(run, out)
    assert summary["step"] == 20 and summary["train_windows"] == 3
    assert lines[-1] == "dev exact match 100.00 F1 100.00 (3 questions, step 20)"
    assert summary["dev"] == {"exact_match": 100.0, "f1": 100.0, "questions": 3, "unanswered": 0}
    with open(f"{out}/metrics.json") as f:
        assert json.load(f)["dev"]["f1"] == 100.0
    with open(f"{out}/predictions.json") as f:
        assert json.load(f) == {"q0": "Paris", "q1": "New York", "q2": "Mary"}
    qa = summary["qa"]
    answers = qa.answer(["Where does Anna sleep?"], ["Anna sleeps in the city of New York, and John works in Rome."])
    assert answers["answer"] == ["New York"] and (answers["start"][0], answers["end"][0]) == (27, 35)
    # resume through the CLI (the init run is no longer needed; train and dev are stored RUN options): 2 more steps,
    # the recorded schedule's last (asking for more stops there: the learning rate is 0 past it)
    assert main(["finetune", "bert-qa", "--out", out, "--steps", "30", "--quiet", "--no-jit"]) == 0
    printed = capsys.readouterr().out
    assert "resuming run" in printed and "dev exact match" in printed and "reaches 0 at step 22" in printed
    with open(f"{out}/metrics.json") as f:
        assert json.load(f)["step"] == 22
    loaded = load_bert_qa(out)
    assert isinstance(loaded, BertQA) and loaded.preprocessor.doc_stride == 4 and loaded.max_answer_length == 30
    assert not loaded.preprocessor.pad_to_length and load_run(out).n_best == 20


def test_new_runs_cut_their_windows_padding_and_the_span_loss_does_not_change(qa_run):
    """A new run records the length bucket (16); a cut batch (its longest window rounded up to 8 pieces) gives the
    span losses of the same batch padded to the full window: the logits mask the padding."""
    import numpy as np

    from kerasplm.models.bert.question_answering_job import _dataset

    out = qa_run[0]
    with open(f"{out}/config.json") as f:
        assert json.load(f)["options"]["length_bucket"] == 16
    lengths = np.array([5, 9, 12, 7])
    width = SMALL["sequence_length"]   # 24: the run's windows; ids within its 32-piece vocabulary
    mask = (np.arange(width)[None] < lengths[:, None]).astype(np.int32)
    features = {"token_ids": np.random.default_rng(0).integers(5, 30, (4, width)).astype(np.int32) * mask,
                "segment_ids": (np.arange(width)[None] >= 3).astype(np.int32) * mask, "padding_mask": mask,
                "start_positions": np.array([3, 4, 0, 6], np.int32), "end_positions": np.array([4, 7, 0, 6], np.int32)}
    full = next(iter(_dataset(features, 4, seed=0)))
    cut = next(iter(_dataset(features, 4, seed=0, length_bucket=8)))
    assert full["token_ids"].shape == (4, width) and cut["token_ids"].shape == (4, 16)   # longest 12 -> 16
    np.testing.assert_array_equal(cut["start_positions"], full["start_positions"])
    np.testing.assert_array_equal(cut["token_ids"], full["token_ids"][:, :16])
    model = load_run(out)
    for side in ("start", "end"):
        loss_full = model.compute_loss_sums(full, training=False)["losses"][side][0]
        loss_cut = model.compute_loss_sums(cut, training=False)["losses"][side][0]
        assert float(loss_cut) == pytest.approx(float(loss_full), rel=1e-5)


def test_holdout_splits_the_training_file_by_article(tmp_path):
    train = write_squad(tmp_path / "toy.json")
    kept, held = _examples(BertQAOptions(train=train, holdout_fraction=0.3, seed=1))
    assert len(kept) + len(held) == 5 and not {e.title for e in kept} & {e.title for e in held}
    with pytest.raises(ValueError, match="either dev .* or holdout_fraction"):
        BertQAOptions(train=train, dev=train, holdout_fraction=0.2)
    with pytest.raises(ValueError, match="--init"):
        finetune_bert_qa(str(tmp_path / "run"), train=train, steps=1)


def test_a_vocabulary_of_another_size_is_refused_naming_the_file(qa_run, tmp_path, capsys):
    """RunDir.build checks the stored preprocessor against the model (the task's backbone, or a `bert` run's
    backbone itself): a vocabulary file with a token more is a one-line error naming it, for load_run and the CLI."""
    for name, source in (("task", qa_run[0]), ("backbone", make_init_run(tmp_path / "init"))):
        damaged = tmp_path / name
        shutil.copytree(source, damaged)
        with open(damaged / "vocab.txt", "a", encoding="utf-8") as f:
            f.write("extra\n")
        with pytest.raises(RunDirError, match=r"vocab.txt: 33 tokens, but the model was trained with 32; the file "
                                              r"is damaged or from another run") as refused:
            load_run(str(damaged))
        assert str(damaged / "vocab.txt") in str(refused.value) and "\n" not in str(refused.value)
    assert main(["export", "qa", "--run", str(tmp_path / "task"), "--to", str(tmp_path / "export")]) == 2
    assert "vocab.txt: 33 tokens" in capsys.readouterr().err
