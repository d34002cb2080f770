"""The main job's "budget" learning-rate schedule: fitted to --steps or timed from --time-budget, recorded in
config.json, kept on resume."""
import dataclasses
import json
import os

import numpy as np
import pytest

from kerasplm import cli
from kerasplm.jobs import job
from kerasplm.models.transformer import model as transformer_model
from kerasplm.models.translator.job import train_translator
from kerasplm.training import BudgetSchedule
from tests.job_harness import check_job


def test_budget_run_records_its_schedule_and_resumes_exactly(tiny_tsv, tmp_path):
    """Exact resume of the main job with the real Transformer (dropout on): 16 steps straight == 8 steps, stop,
    resume to 16, with the schedule fitted to 16 steps both times (weights and held-out loss equal)."""

    def run(out, steps, **kwargs):
        return train_translator(str(out), data=tiny_tsv, preset="transformer_tiny", schedule="budget", steps=steps,
                                batch_size=8, vocab_size=200, dev_size=2, bleu_max_sentences=0, verbose=0,
                                log=lambda *_: None, **kwargs)

    def recorded_schedule(resumed_dir):
        config = json.load(open(os.path.join(resumed_dir, "config.json")))["options"]
        assert (config["schedule"], config["schedule_steps"], config["warmup_fraction"]) == ("budget", 16, 0.1)

    # The shared job road (tests/job_harness.py): 16 steps straight (the schedule fitted to --steps and recorded);
    # 8 steps of a schedule planned over 16, then resumed to 16 with no schedule_steps: the recorded one is used.
    check = check_job(lambda out, steps: run(out, steps, **({} if steps == 16 else {"schedule_steps": 16})),
                      tmp_path, steps=16, split_at=8, family="transformer_translator", between=recorded_schedule)
    straight, resumed = check.summary, check.resumed_summary
    for a, b in zip(straight["translator"].model.weights, resumed["translator"].model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=a.path)
    assert resumed["steps_this_run"] == 8 and resumed["step"] == 16
    assert resumed["schedule"] == {"name": "budget", "peak_learning_rate": 1e-3, "warmup_steps": 2,
                                   "total_steps": 16}
    assert resumed["final_learning_rate"] == 0.0              # decayed to zero at the last step
    assert "bleu" not in resumed and "samples" not in resumed  # bleu_max_sentences=0: no BLEU evaluation
    # Same weights, so the same held-out loss (the train-loss windows differ: 1-16 vs 9-16).
    assert straight["eval_loss"] == pytest.approx(resumed["eval_loss"], rel=1e-5)
    # Asking a finished run for more steps stops at the schedule's end (the learning rate is 0 there).
    assert run(check.resumed_run, 20)["step"] == 16


def test_default_schedule_follows_the_blocks(tiny_tsv, tmp_path, monkeypatch):
    """Without --schedule, the seed's post-LN blocks train under the seed's CustomSchedule and pre-LN presets
    (transformer_quick) under the budget schedule; the choice is recorded for resumes."""
    monkeypatch.setitem(transformer_model.PRESETS, "tiny_prenorm",
                        dataclasses.replace(transformer_model.PRESETS["transformer_tiny"], normalize_first=True))
    for preset, expected in (("transformer_tiny", "seed"), ("tiny_prenorm", "budget")):
        out = tmp_path / preset
        summary = train_translator(str(out), data=tiny_tsv, preset=preset, steps=2, batch_size=8, vocab_size=200,
                                   dev_size=2, bleu_max_sentences=0, verbose=0, log=lambda *_: None)
        assert summary["schedule"]["name"] == expected
        assert json.load(open(out / "config.json"))["options"]["schedule"] == expected


class _TimedTrainer:
    """A stand-in for Trainer.fit on a fake clock: step i costs ``cost(i)`` seconds (1-based), recorded in
    ``step_seconds`` as the Trainer does; ``fit_overhead`` seconds pass after the loop (the checkpoint save)."""

    def __init__(self, clock, cost, fit_overhead=0.0):
        self.clock, self.cost, self.fit_overhead = clock, cost, fit_overhead
        self.step, self.stop_reason, self.step_seconds = 0, None, []

    def fit(self, dataset, steps, time_budget, log_every):
        start, self.step_seconds = self.clock[0], []
        while self.step < steps:
            self.step += 1
            self.clock[0] += self.cost(self.step)
            self.step_seconds.append(self.cost(self.step))
            if self.clock[0] - start >= time_budget:
                self.stop_reason = "time_budget"
                return
        self.clock[0] += self.fit_overhead
        self.stop_reason = "steps"


def test_schedule_is_fitted_to_the_steps_the_budget_allows(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(job.time, "monotonic", lambda: clock[0])
    timed = job.TRACE_STEPS + job.TIMED_STEPS
    # The first step traces (20 s); one timed step compiles a new shape (30 s: left out of the rate, being over
    # OUTLIER_FACTOR x the median); the others cost 0.5 s or 0.7 s; the checkpoint after the loop costs 5 s.
    def cost(step):
        return 20.0 if step == 1 else 30.0 if step == timed - 3 else 0.5 if step % 2 else 0.7

    trainer = _TimedTrainer(clock, cost, fit_overhead=5.0)
    schedule = BudgetSchedule(1e-3, total_steps=1000)
    total, seconds_per_step = job.fit_schedule_to_budget(trainer, None, schedule, time_budget=300.0)
    rates = [cost(i) for i in range(job.TRACE_STEPS + 1, timed + 1) if i != timed - 3]
    assert trainer.step == timed and seconds_per_step == pytest.approx(sum(rates) / len(rates))
    spent = sum(cost(i) for i in range(1, timed + 1)) + 5.0
    assert total == timed + int((300.0 - spent) / seconds_per_step) and schedule.total_steps == total


def test_budget_runs_out_while_timing(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(job.time, "monotonic", lambda: clock[0])
    trainer = _TimedTrainer(clock, lambda step: 10.0 if step == 1 else 0.5)
    schedule = BudgetSchedule(1e-3, 1000)
    total, seconds_per_step = job.fit_schedule_to_budget(trainer, None, schedule, 20.0)
    assert seconds_per_step is None and total == trainer.step == 21 and trainer.stop_reason == "time_budget"
    assert schedule.total_steps == 21


def test_fitted_schedule_is_capped_by_most(monkeypatch):
    """A fine-tuning job caps the fitted schedule at its epochs' steps: a generous budget does not stretch it,
    and a cap inside the timing window ends the timing there."""
    clock = [0.0]
    monkeypatch.setattr(job.time, "monotonic", lambda: clock[0])
    schedule = BudgetSchedule(1e-3, 1000)
    total, seconds_per_step = job.fit_schedule_to_budget(_TimedTrainer(clock, lambda step: 0.5), None, schedule,
                                                         time_budget=1000.0, most=500)
    assert (total, seconds_per_step, schedule.total_steps) == (500, 0.5, 500)
    trainer = _TimedTrainer(clock, lambda step: 0.5)
    total, seconds_per_step = job.fit_schedule_to_budget(trainer, None, schedule, time_budget=1000.0, most=50)
    assert (total, trainer.step, schedule.total_steps) == (50, 50, 50)


@pytest.mark.parametrize("argv, message", [
    (["train", "translator", "--warmup-fraction", "1.5"], "expected a number >= 0 and <= 1, got '1.5'"),
    (["train", "translator", "--schedule", "cosine"], "invalid choice: 'cosine'"),
    (["train", "translator", "--peak-learning-rate", "0"], "expected a number > 0, got '0'"),
])
def test_cli_schedule_flags_are_checked(argv, message, capsys):
    with pytest.raises(SystemExit):
        cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
