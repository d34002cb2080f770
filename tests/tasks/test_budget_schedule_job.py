"""The main job's "budget" learning-rate schedule: fitted to --steps or timed from --time-budget, recorded in
config.json, kept on resume."""
import json

import numpy as np
import pytest

from kerasplm import cli
from kerasplm.tasks import translation
from kerasplm.tasks.translation import train_translator
from kerasplm.training import BudgetSchedule
from tests.tasks.test_translation_job import tiny_tsv  # noqa: F401  (fixture)


def test_budget_run_records_its_schedule_and_resumes_exactly(tiny_tsv, tmp_path):  # noqa: F811
    """Exact resume of the main job with the real Transformer (dropout on): 16 steps straight == 8 steps, stop,
    resume to 16, with the schedule fitted to 16 steps both times (weights and held-out loss equal)."""

    def run(out, steps, **kwargs):
        return train_translator(str(out), data=tiny_tsv, preset="transformer_tiny", steps=steps, batch_size=8,
                                vocab_size=200, dev_size=2, bleu_max_sentences=0, verbose=0,
                                log=lambda *_: None, **kwargs)

    straight = run(tmp_path / "straight", 16)                 # schedule fitted to --steps, recorded
    run(tmp_path / "resumed", 8, schedule_steps=16)
    config = json.load(open(tmp_path / "resumed" / "config.json"))["options"]
    assert (config["schedule"], config["schedule_steps"], config["warmup_fraction"]) == ("budget", 16, 0.1)
    resumed = run(tmp_path / "resumed", 16)                   # no schedule_steps: the recorded one is used
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
    assert run(tmp_path / "resumed", 20)["step"] == 16


class _TimedTrainer:
    """A stand-in for Trainer.fit on a fake clock: each step costs `step_seconds`; the first step of each
    bucket shape (the first `shapes` steps) also costs `trace_seconds`."""

    def __init__(self, clock, step_seconds, trace_seconds, shapes):
        self.clock, self.step_seconds, self.trace_seconds, self.shapes = clock, step_seconds, trace_seconds, shapes
        self.step, self.trace_count, self.stop_reason = 0, 0, None

    def fit(self, dataset, steps, time_budget, log_every):
        start = self.clock[0]
        while self.step < steps:
            self.step += 1
            self.clock[0] += self.step_seconds
            if self.step in self.shapes:
                self.trace_count += 1
                self.clock[0] += self.trace_seconds
            if self.clock[0] - start >= time_budget:
                self.stop_reason = "time_budget"
                return
        self.stop_reason = "steps"


@pytest.mark.parametrize("shapes, expected_timings", [((1, 2, 3), 1), ((1, 2, 30), 2)])
def test_schedule_is_fitted_to_the_steps_the_budget_allows(monkeypatch, shapes, expected_timings):
    clock = [0.0]
    monkeypatch.setattr(translation.time, "monotonic", lambda: clock[0])
    trainer = _TimedTrainer(clock, step_seconds=0.5, trace_seconds=10.0, shapes=shapes)
    schedule = BudgetSchedule(1e-3, total_steps=1000)
    total, seconds_per_step = translation._fit_schedule_to_budget(trainer, None, schedule, time_budget=100.0)
    # A trace inside the timed steps makes the job time them again rather than underestimate the steps.
    timed = translation.TRACE_STEPS + expected_timings * translation.TIMED_STEPS
    assert trainer.step == timed and seconds_per_step == pytest.approx(0.5)
    spent = 0.5 * timed + 10.0 * len(shapes)
    assert total == timed + int((100.0 - spent) / 0.5) and schedule.total_steps == total


def test_budget_runs_out_while_timing(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(translation.time, "monotonic", lambda: clock[0])
    trainer = _TimedTrainer(clock, step_seconds=0.5, trace_seconds=10.0, shapes=(1, 2, 3))
    total, seconds_per_step = translation._fit_schedule_to_budget(trainer, None, BudgetSchedule(1e-3, 1000), 20.0)
    assert seconds_per_step is None and total == trainer.step and trainer.stop_reason == "time_budget"


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
