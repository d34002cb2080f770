"""The Job base and the pieces every training job shares: opening/resuming a run directory, fitting, the summary.

A job is a :class:`Job` subclass in the shape of Model Garden's ``base_task.Task``: it declares its run family
and options class (the options are declared once, in its family's manifest) and fills hooks; the base owns the
rest::

    class TranslatorJob(Job):
        family, task, options_class, what, result_key = "transformer_translator", "translation", ...

        def build_data(self):         # data, tokenizers, model config; self.write_config(...) for a new run;
            ...                       # sets self.train_dataset (and self.eval_dataset, self.schedule)
        def build_model(self):        # a new run's model (built under the strategy's scope; a resumed run's is rebuilt
                                      # from its config.json by the base)
        def build_optimizer(self):    # its optimizer, with self.schedule
        def evaluate(self, trainer, summary):   # the family's figures, added to the summary (not after SIGTERM)
        def result(self, trainer):    # the trained object the summary hands back (summary[result_key])

    def train_translator(out, options=None, log=print, **overrides):
        return TranslatorJob(out, options, log, **overrides).run()

:meth:`Job.run` opens (or resumes) the run with the stored RUN options winning (:func:`open_run`), picks the
``--distribute`` strategy (the multi-worker chief alone writes the run), builds the
:class:`kerasplm.training.Trainer`, fits (with the learning-rate schedule fitted to a time budget when the job
has one: :func:`fit_scheduled`), stops cleanly on SIGTERM (the checkpoint saved, no evaluation), evaluates,
writes ``metrics.json``, logs the closing report, and puts the caller's dtype policy back.

The functions below (:func:`open_run`, :func:`fit_recorded`, :func:`fit_scheduled`, :func:`training_summary`)
are the base's steps, usable on their own.
"""
import contextlib
import dataclasses
import functools
import time

import keras

from kerasplm.models.base import Task
from kerasplm.options import RUN, TrainingOptions, resolve_options
from kerasplm.runs import RunDir
from kerasplm.training import Trainer
from kerasplm.training.distribute import get_strategy, is_chief_process

__all__ = ["Job", "TrainingOptions", "open_run", "fit_recorded", "fit_scheduled", "fit_schedule_to_budget",
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
             legacy_options=None, writer=None):
    """Open run directory ``out`` for a (possibly resumed) job of ``family``.

    Returns ``(run, options, config, history)``: ``config`` and ``history`` are the stored ones (``None``
    and ``{}`` for a fresh directory). On resume the stored RUN options win; asking for a different one
    raises :class:`kerasplm.options.OptionsConflict`. ``check_config(run, config)`` validates the
    stored model config (raise ``run.error(...)``) before anything is trained. ``legacy_options`` are the
    values RUN options had before they existed (a run stored without them resumes as it was trained, not with
    today's default). Also sets the mixed-precision
    policy the options ask for, and refuses a job with neither ``steps`` nor ``time_budget``.

    The run's writer takes its lock first (:meth:`kerasplm.runs.RunDir.lock`: a one-line error naming the job that
    holds it); the caller releases it with ``run.unlock()`` (it is released here when opening fails). The other
    workers of a multi-worker job (``writer`` False) take no lock.
    """
    if writer is None:
        writer = is_chief_process(getattr(options, "distribute", None) or (overrides or {}).get("distribute", "default"))
    run = RunDir(out, writer=writer)
    run.lock()   # before config.json is read: two jobs must not both find "no run here" and both write one
    try:
        config, history = None, {}
        if run.exists():
            config = run.read_config(family=family, what=what or (family if isinstance(family, str) else family[0]))
            if check_config is not None:
                check_config(run, config)
            history = run.read_history()
        stored = {**(legacy_options or {}), **config["options"]} if config else None
        options, _ = resolve_options(options_cls, options, overrides, stored=stored, where=out)
        if options.steps is None and options.time_budget is None:
            raise ValueError("give steps or time_budget (or both)")
    except BaseException:
        run.unlock()
        raise
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
    """The part of a job's summary (and ``metrics.json``) every job reports. ``median_step_seconds`` is the median
    wall time of the steps of the session's last ``fit`` after its first (which traces the step), None with fewer
    than two: the steady rate, which ``train_seconds`` blurs with tracing, checkpoints and held-out evaluations."""
    steady = sorted(trainer.step_seconds[1:])
    return {"step": trainer.step, "stop_reason": trainer.stop_reason, "train_seconds": round(train_seconds, 1),
            "median_step_seconds": round(steady[len(steady) // 2], 5) if steady else None,
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


class Job:
    """The base of every training and fine-tuning job (see the module docstring for the hooks)."""

    family = None          # the run family written to config.json (load_run's family= names it)
    former_families = ()   # run families this job wrote before (runs of those resume too)
    task = None            # config.json's "task"
    options_class = None   # a TrainingOptions subclass (declared in the family's manifest)
    what = None            # how messages name the run ("translator", "BERT classifier")
    result_key = None      # the summary key of the trained object (never written to metrics.json)
    legacy_options = None  # values RUN options had before they existed (see open_run)
    checkpoint_every = None
    clip_norm = None
    log_every = 50
    builds_model_in_build_data = False   # True: build_data runs under the strategy's scope (see run)

    def __init__(self, out, options=None, log=print, **overrides):
        self.out, self.log = out, log
        self.given_options, self.overrides = options, overrides
        self._new_config = None
        self._stored_preprocessor = None   # a resumed run's preprocessor, once stored_model() has rebuilt it
        self.train_dataset = self.eval_dataset = None
        self.schedule = None       # a schedule with set_total_steps (BudgetSchedule ...): fitted to a time budget
        self.most_steps = None     # the longest schedule a time budget may be fitted to

    # ------------------------------------------------------------------ hooks
    def plan(self, options, overrides):
        """Before the run opens: return the overrides to open it with (e.g. ``steps`` from epochs)."""
        return overrides

    def check_config(self, run, config):
        """Validate a resumed run's stored model config (raise ``run.error(...)``)."""

    def build_data(self):
        """Data, tokenizers and model config; for a new run, :meth:`write_config`. Sets ``self.train_dataset``
        (a dataset or a zero-argument function returning one), and optionally ``self.eval_dataset`` and
        ``self.schedule``."""
        raise NotImplementedError

    def build_model(self):
        raise NotImplementedError

    def build_optimizer(self):
        raise NotImplementedError

    def auxiliary_model(self):
        """A layer trained with the model but no part of it (the Trainer's ``auxiliary``; default: none)."""
        return None

    def compute_loss(self, model, batch, training):
        """The Trainer's loss sums (default: the task model's ``compute_loss_sums``)."""
        return Task.trainer_loss(model, batch, training)

    def evaluate(self, trainer, summary):
        """Add the family's figures to ``summary`` (runs after training, not after SIGTERM)."""

    def describe(self, summary):
        """Log the closing report."""
        self.log(f"trained to step {summary['step']} ({summary['stop_reason']}) in {summary['train_seconds']:.0f}s")

    def result(self, trainer):
        """The trained object the summary hands back as ``summary[result_key]``."""
        return trainer.model

    def after(self, summary):
        """After the run is closed (e.g. export the trained model)."""

    # ------------------------------------------------------------------ the base's part
    @property
    def resumed(self):
        return self.stored_config is not None

    def write_config(self, preset, options=None, assets=None):
        """Record what the new run's config.json will hold besides the model: ``options`` default to the RUN options.

        The base writes config.json once the model is built (:meth:`run`): the task model's Keras config and its
        preprocessor's (:meth:`run_preprocessor`) go in with these; from then on the directory holds a run to resume.
        """
        self._new_config = (preset, self.options.stored(RUN) if options is None else options, assets)
        self.config = {"family": self.family, "task": self.task, "preset": preset, "options": self._new_config[1],
                       "assets": dict(assets or {})}
        return self.config

    def run_preprocessor(self, model):
        """The preprocessor a run stores with ``model`` (default: ``model.preprocessor``, else ``self.preprocessor``)."""
        return getattr(model, "preprocessor", None) or getattr(self, "preprocessor", None)

    def stored_model(self):
        """A resumed run's task model rebuilt from its config.json (no weights: the checkpoint restores them), with its
        preprocessor as ``model.preprocessor``: what ``build_data`` reads a resumed run's labels, configs and
        tokenizers from. (The base builds the model it trains itself: :meth:`trainer_model`.)"""
        model = self.run_dir.build(self.stored_config, preprocessor=self._stored_preprocessor)
        self._stored_preprocessor = getattr(model, "preprocessor", None)
        return model

    def trainer_model(self):
        """The model the Trainer builds under the strategy's scope: :meth:`build_model` for a new run; for a resumed
        run the model its config.json stores, carrying the preprocessor ``build_data`` read (built outside the scope,
        which under MultiWorkerMirroredStrategy cannot hold a tokenizer's string tables)."""
        return self.stored_model() if self.resumed else self.build_model()

    def run(self):
        previous_policy = keras.mixed_precision.global_policy()
        self.run_dir = None
        try:
            return self._run()
        finally:
            if self.run_dir is not None:   # the run's lock, taken by open_run (the hook after() runs inside it)
                self.run_dir.unlock()
            keras.mixed_precision.set_global_policy(previous_policy)

    def _run(self):
        # A MultiWorkerMirroredStrategy can only be made before the process's first TensorFlow op, and plan() may run
        # some (a job that counts its corpus with the in-graph tokenizer): make the strategy first.
        get_strategy(getattr(self.given_options, "distribute", None) or dict(self.overrides).get("distribute")
                     or "default")
        overrides = self.plan(self.given_options, dict(self.overrides))
        self.run_dir, self.options, self.stored_config, previous_history = open_run(
            self.out, (self.family, *self.former_families), self.options_class, self.given_options, overrides, what=self.what,
            check_config=self.check_config, legacy_options=self.legacy_options)
        self.config = self.stored_config
        o = self.options
        strategy = get_strategy(o.distribute)     # before the first TensorFlow op of the job
        if strategy.num_replicas_in_sync > 1:
            self.log(f"{o.distribute}: {strategy.num_replicas_in_sync} replicas; each global batch is split "
                     f"between them")
        if self.resumed:
            self.log(f"resuming run in {self.out}")
        # Seeded before build_data: what it makes draws from the seeds too (a pretrained backbone loaded there gets
        # its dropout seed generators' states, a seeded shuffle its op seeds combined with the global seed). Seeded
        # only by the Trainer, after it, they came from whatever ran before in the process: the same job run twice
        # in one process differed, and so did a run and its resumed twin.
        keras.utils.set_random_seed(o.seed)
        # A job that builds its pretrained model in build_data (fine-tuning) builds it under the strategy's scope, so
        # that its variables are the strategy's; the others build only data there (string tables, which
        # MultiWorkerMirroredStrategy's scope would try to make collective).
        with strategy.scope() if self.builds_model_in_build_data else contextlib.nullcontext():
            self.build_data()
        o = self.options   # build_data may have settled options a new run records (a schedule's length ...)
        if o.eval_every and self.eval_dataset is None:   # refused before a new run's config.json is written
            raise ValueError(f"--eval-every: this {self.what} run has no held-out data to score while it trains "
                             f"(its held-out figures come once, at the end of the run); drop the option")
        trainer = Trainer(model=self.trainer_model, optimizer=self.build_optimizer, compute_loss=self.compute_loss,
                          strategy=strategy, jit_compile=o.jit_compile, clip_norm=self.clip_norm,
                          checkpoint_dir=self.run_dir.checkpoint_dir, checkpoint_every=self.checkpoint_every,
                          log_dir=self.run_dir.log_dir, seed=o.seed, verbose=o.verbose,
                          auxiliary=self.auxiliary_model)
        self.trainer = trainer
        if not self.resumed:
            if getattr(self, "_new_config", None) is None:
                raise TypeError(f"{type(self).__name__}.build_data did not call write_config for the new run")
            preset, options, assets = self._new_config
            self.config = self.run_dir.write_config(self.family, self.task, preset, trainer.model, options,
                                                    assets=assets, preprocessor=self.run_preprocessor(trainer.model))
        t0 = time.time()
        trainer.fit(self.train_dataset, steps=0)  # builds the model and optimizer, restores the latest checkpoint
        self.first_step = trainer.step
        if self.schedule is not None and hasattr(o, "schedule_steps"):
            history, _ = fit_scheduled(self.run_dir, trainer, previous_history, self.train_dataset, o, self.schedule,
                                       self.log, most=self.most_steps, eval_dataset=self.eval_dataset,
                                       log_every=self.log_every)
            if self.run_dir.writer:   # a schedule fitted to the time budget is now part of the run's options
                self.config = self.run_dir.read_config()
        else:
            history, _ = fit_recorded(self.run_dir, trainer, previous_history, self.train_dataset, o,
                                      eval_dataset=self.eval_dataset, log_every=self.log_every,
                                      session_start_step=self.first_step)
        train_seconds = time.time() - t0
        summary = training_summary(trainer, history, train_seconds)
        summary["steps_this_run"] = trainer.step - self.first_step
        if trainer.stop_reason == "sigterm":   # preemption: the grace period is short, so no evaluation
            self.log(f"stopped by SIGTERM; checkpoint saved at step {trainer.step}: run the same command to resume")
            trainer.close()
            summary["wrote_run"] = self.run_dir.writer
            if self.result_key:
                summary[self.result_key] = self.result(trainer)
            return summary
        self.evaluate(trainer, summary)
        self.run_dir.write_json(self.run_dir.METRICS, summary)
        self.describe(summary)
        trainer.close()
        summary["wrote_run"] = self.run_dir.writer   # False on a multi-worker job's other workers
        if self.result_key:
            summary[self.result_key] = self.result(trainer)
        self.after(summary)
        return summary
