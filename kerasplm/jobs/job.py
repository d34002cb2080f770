"""What every training job shares: its session options, opening/resuming a run directory, and fitting.

A family's job (``train_translator``, ``train_bert``, ``train_gpt``, ``train_elmo``) is:

1. an options dataclass that inherits :class:`TrainingOptions` (steps, time budget, evaluation,
   precision, XLA, progress) and adds its own RUN options (data, preset, vocabulary, seed …);
2. ``run, options, config, history = open_run(out, FAMILY, OptionsClass, options, overrides,
   check_config=...)`` — a fresh directory or a resume with the stored RUN options;
3. its data, tokenizer assets and model config; then ``run.write_config(...)`` once the run is valid;
4. ``fit_recorded(run, trainer, history, train_ds, options, ...)`` — the Trainer's fit with the history
   of every session appended to ``history.json`` even when the session fails; a job whose learning rate
   decays to zero at the end of the run calls ``fit_scheduled`` instead, which first fits that schedule to
   the steps a time budget allows when the run was given a budget only;
5. its own evaluation, ``run.write_json(run.METRICS, summary)``, and a loader registered with
   :func:`kerasplm.runs.register_family`.

Decorate the job with :func:`restores_global_policy` when it sets a mixed-precision policy.
"""
import dataclasses
import functools
import time

import keras

from kerasplm.options import TrainingOptions, resolve_options
from kerasplm.runs import RunDir

__all__ = ["TrainingOptions", "open_run", "fit_recorded", "fit_scheduled", "fit_schedule_to_budget",
           "provisional_total_steps", "restores_global_policy", "training_summary"]

# A run given a time budget only first makes TRACE_STEPS steps (the first traces the train step), then times
# TIMED_STEPS steps to estimate how many steps the rest of the budget allows (fit_schedule_to_budget).
TRACE_STEPS, TIMED_STEPS, OUTLIER_FACTOR = 20, 100, 5.0


def restores_global_policy(fn):
    """Run ``fn`` and put the caller's global dtype policy back afterwards (models keep their own)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        previous = keras.mixed_precision.global_policy()
        try:
            return fn(*args, **kwargs)
        finally:
            keras.mixed_precision.set_global_policy(previous)
    return wrapper


def open_run(out, family, options_cls, options=None, overrides=None, what=None, check_config=None,
             legacy_options=None):
    """Open run directory ``out`` for a (possibly resumed) job of ``family``.

    Returns ``(run, options, config, history)``: ``config`` and ``history`` are the stored ones (``None``
    and ``{}`` for a fresh directory). On resume the stored RUN options win; asking for a different one
    raises :class:`kerasplm.options.OptionsConflict`. ``check_config(run, config)`` validates the
    stored model config (raise ``run.error(...)``) before anything is trained. ``legacy_options`` are the
    values RUN options had before they existed (a run stored without them resumes as it was trained, not with
    today's default). Also sets the mixed-precision
    policy the options ask for, and refuses a job with neither ``steps`` nor ``time_budget``.
    """
    run = RunDir(out)
    config, history = None, {}
    if run.exists():
        config = run.read_config(family=family, what=what or family)
        if check_config is not None:
            check_config(run, config)
        history = run.read_history()
    stored = {**(legacy_options or {}), **config["options"]} if config else None
    options, _ = resolve_options(options_cls, options, overrides, stored=stored, where=out)
    if options.steps is None and options.time_budget is None:
        raise ValueError("give steps or time_budget (or both)")
    if options.mixed_precision:
        keras.mixed_precision.set_global_policy(options.mixed_precision)
    return run, options, config, history


def fit_recorded(run, trainer, previous_history, train_ds, options, eval_dataset=None, log_every=50,
                 session_start_step=None):
    """``trainer.fit`` for ``options.steps`` / ``options.time_budget``, appending this session's history
    to the run's ``history.json`` (also when the session fails). Returns ``(history, train_seconds)``.

    ``session_start_step``: the step this session resumed from, when the job already called
    ``trainer.fit`` before (default: where this fit starts).
    """
    t0 = time.time()
    try:
        history = trainer.fit(train_ds, steps=options.steps, time_budget=options.time_budget,
                              eval_dataset=eval_dataset, eval_every=options.eval_every, log_every=log_every)
    finally:  # keep what this session logged, even if it failed: history.json spans every session
        start = trainer.start_step if session_start_step is None else session_start_step
        if start is not None and (trainer.history.get("step") or trainer.history.get("eval_step")):
            run.append_history(previous_history, trainer.history, start)
    return history, time.time() - t0


def training_summary(trainer, history, train_seconds):
    """The part of a job's summary (and ``metrics.json``) every job reports."""
    return {"step": trainer.step, "stop_reason": trainer.stop_reason, "train_seconds": round(train_seconds, 1),
            "final_loss": history["loss"][-1] if history.get("loss") else None,
            "eval_loss": history["eval_loss"][-1] if history.get("eval_loss") else None}


def provisional_total_steps(warmup_fraction):
    """A schedule's length while a budget-only run times its first steps: long enough that its warmup spans the
    timing steps twice, so the learning rate is still rising when :func:`fit_schedule_to_budget` refits it."""
    return 2 * (TRACE_STEPS + TIMED_STEPS) / max(warmup_fraction, 1e-3)


def fit_schedule_to_budget(trainer, train_ds, schedule, time_budget, most=None):
    """Make TRACE_STEPS untimed steps and TIMED_STEPS timed ones (one ``fit``), then fit ``schedule`` (anything
    with ``set_total_steps``, e.g. :class:`kerasplm.training.BudgetSchedule`) to the steps the rest of
    ``time_budget`` allows at the timed steps' rate, ``most`` at most.

    The rate comes from the Trainer's per-step wall times (``step_seconds``), not from the time around
    ``fit``, which also holds the iterator's start and a checkpoint save (a third of the timed time for
    small steps: a run fitted that way stopped at two thirds of its budget). A step over
    ``OUTLIER_FACTOR`` times the median (an XLA compile of a new bucket shape) is left out of the rate.
    Returns ``(total_steps, seconds_per_step)``; when the budget runs out while timing, the schedule ends
    where the run stopped (``seconds_per_step`` is None).
    """
    started = time.monotonic()
    timing_end = trainer.step + TRACE_STEPS + TIMED_STEPS
    if most is not None:
        timing_end = min(timing_end, most)
    trainer.fit(train_ds, steps=timing_end, time_budget=time_budget, log_every=0)
    timed = sorted(trainer.step_seconds[TRACE_STEPS:])
    if trainer.stop_reason != "steps" or not timed:  # the budget ran out (or the run ended) while timing
        total = max(trainer.step, 1)
        schedule.set_total_steps(total)
        return total, None
    typical = [s for s in timed if s <= OUTLIER_FACTOR * timed[len(timed) // 2]]
    seconds_per_step = sum(typical) / len(typical)
    total = trainer.step + max(int((time_budget - (time.monotonic() - started)) / seconds_per_step), 1)
    if most is not None:
        total = min(total, most)
    schedule.set_total_steps(total)
    return total, seconds_per_step


def fit_scheduled(run, trainer, previous_history, train_ds, options, schedule, log=print, most=None,
                  eval_dataset=None, log_every=50):
    """:func:`fit_recorded` for a job whose learning rate follows ``schedule`` to zero at its ``total_steps``.

    ``options.schedule_steps`` None means a new run given a time budget only: its first steps are timed and the
    schedule fitted to the steps the budget allows (at most ``most``, e.g. the steps of the job's epochs), and that
    length is stored in the run's options as ``schedule_steps`` so that a resume keeps it. Training stops where
    the schedule ends (the learning rate is zero past it). Returns ``(history, train_seconds)``; the seconds count
    the timing steps too.
    """
    trainer.fit(train_ds, steps=0)   # builds the model and optimizer and restores the latest checkpoint
    first_step, started = trainer.step, time.time()
    if options.schedule_steps is None:
        total, seconds_per_step = fit_schedule_to_budget(trainer, train_ds, schedule, options.time_budget, most)
        run.update_options(schedule_steps=total)
        log(f"timed {1 / seconds_per_step:.2f} steps/s: learning-rate schedule fitted to {total} steps"
            if seconds_per_step else f"the time budget ran out while timing the first steps (step {total})")
    elif options.steps is not None and options.steps > schedule.total_steps:
        log(f"note: the learning rate reaches 0 at step {schedule.total_steps} (the run's recorded schedule); "
            f"training stops there. Start a new run to train longer.")
    remaining = None if options.time_budget is None else max(options.time_budget - (time.time() - started), 1e-3)
    session = dataclasses.replace(options, steps=min(options.steps or schedule.total_steps, schedule.total_steps),
                                  time_budget=remaining)
    if trainer.stop_reason == "sigterm":  # preempted while the schedule was being timed: train no further
        history = run.append_history(previous_history, trainer.history, first_step)
    else:
        history, _ = fit_recorded(run, trainer, previous_history, train_ds, session, eval_dataset=eval_dataset,
                                  log_every=log_every, session_start_step=first_step)
    return history, time.time() - started
