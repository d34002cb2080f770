"""`Trainer`: TensorFlow's standard custom training loop, one code path for every tf.distribute strategy.

A step is a `tf.function` that runs `strategy.run(replica_step)` on a batch of a distributed dataset.

**The objective.** `compute_loss` returns SUMS over its replica's shard of the global batch, never
means. The objective is a weighted sum of loss terms, each the mean of its own quantity over the
GLOBAL batch::

    L = sum_i  lambda_i * S_i / C_i        S_i: term i summed over the global batch
                                           C_i: its global count (tokens, masked positions, examples)

Each replica runs the forward pass under a `tf.GradientTape` (the forward XLA-compiled when
`jit_compile`; its backward is compiled too), all-reduces the counts C_i, and then takes ONE
backward pass seeded with dL/dS_i = lambda_i / C_i (`tape.gradient(..., output_gradients=...)`).
The optimizer sums those gradients across replicas, so the update equals the single-device gradient
of L exactly, however unevenly the tokens fall on the replicas (a mean of per-replica means would not).

**Contract with a model family.** `compute_loss(model, batch, training) -> dict`, in one of two forms:

One term (the translator)::

    {"loss": S, "weight": C,                 # scalar float sums: L = S / C
     "accuracy": correct,                    # other metrics: a sum, reported as sum / C ...
     "K": s, "K_weight": c,                  # ... or as s / c when "K_weight" is given
     "M": (s, c)}                            # ... or as a (sum, count) pair

Several terms, each `name: (S_i, C_i)` or `name: (S_i, C_i, lambda_i)` (lambda_i a Python number,
default 1)::

    # BERT pre-training: masked-LM mean over masked positions + NSP mean over sentence pairs.
    {"losses": {"mlm": (mlm_sum, num_masked), "nsp": (nsp_sum, num_pairs)},
     "mlm_accuracy": (mlm_correct, num_masked), "nsp_accuracy": (nsp_correct, num_pairs)}

    # GPT-1 fine-tuning (Radford et al. 2018, eq. 5): L3 = L2 + lambda * L1 with lambda = 0.5.
    {"losses": {"task": (task_sum, num_examples), "lm": (lm_sum, num_tokens, 0.5)},
     "accuracy": (task_correct, num_examples)}

In the several-term form every metric must carry its count (a pair, or "K_weight"). Reported
metrics (history, logs, `evaluate`) are exact global means: "loss" is L (the weighted total);
each term is also reported as "<name>_loss" = S_i / C_i (several-term form only); each metric as
sum / count. Train metrics are pooled over the steps since the last log (sums and counts added up
over the window, then divided), so they are exact over the window too. A count of 0 (e.g. no masked
position in a batch) contributes nothing. Malformed results raise ValueError when the step is traced.

Usage::

    with trainer_strategy.scope():                    # or pass zero-argument callables instead
        model = build_model(); optimizer = keras.optimizers.Adam(...)
    trainer = Trainer(model, optimizer, compute_loss, strategy=trainer_strategy, checkpoint_dir=...)
    history = trainer.fit(train_dataset, steps=10_000, eval_dataset=dev, eval_every=1000)

Data contract for exact resume: `dataset` yields GLOBAL batches, and yields the same sequence every
time it is iterated (seeded shuffles, no unseeded randomness); it may be finite or `.repeat()`ed.
Under MultiWorkerMirroredStrategy every worker builds the same global batches and takes its share of
each (tf.data's DATA auto-sharding, which the Trainer asks for: the default AUTO would shard a pipeline
that reads files by file, and the workers' global batches would then not be those of one process).
The tf.data iterator is not checkpointed; on resume, `fit` skips the `step` batches already consumed.
Caveat: `shuffle(seed=s, reshuffle_each_iteration=True)` replays its sequence only in a fresh
process -- re-iterating the SAME Dataset object continues its seed generator. So for resuming (or
several `fit` calls) within one process, pass a zero-argument callable that builds the dataset;
`fit`/`evaluate` accept either.
"""
import shutil
import signal
import tempfile
import threading
import time

import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from kerasplm.training.checkpoints import restore_checkpoint

__all__ = ["Trainer", "LossSpec"]

# On CPU XLA does not pay for itself: benchmarks/bench_train.py on an idle 2-core machine
# (transformer_seed, batch 64, length 40) gave 4,970 target tokens/s with XLA and 6,029 without, and
# every new bucket shape costs an XLA compile. "auto" therefore compiles on GPU/TPU only
# (benchmarks/RESULTS.md). Decoding is another matter: kerasplm.generation compiles on CPU too.
_CPU_JIT_DEFAULT = False


def _resolve_jit(jit_compile):
    if jit_compile == "auto":
        if tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"):
            return True
        return _CPU_JIT_DEFAULT
    if not isinstance(jit_compile, bool):
        raise ValueError(f"jit_compile must be True, False or 'auto', got {jit_compile!r}")
    return jit_compile


def _trace_for(step_fn, distributed_dataset):
    """Trace ``step_fn`` (a ``tf.function``) once for every batch ``distributed_dataset`` can yield.

    Tracing a Transformer's train step costs 10-20 s of Python on a small CPU (Keras layers, the
    gradient graph, one optimizer update per variable), and a bucketed dataset has one batch shape per
    bucket: traced per shape, a short time-budgeted run spent a third of its budget tracing
    (benchmarks/RESULTS.md, issue 10). The dataset's ``element_spec`` leaves the bucketed dimensions
    unknown, so one trace serves every bucket; a dataset with static shapes gets the same single trace
    as before. Without XLA the shape-generic graph runs as fast as per-shape ones (measured there);
    with ``jit_compile`` XLA still compiles once per concrete shape inside it.
    """
    step_fn.get_concrete_function(distributed_dataset.element_spec)


def _shard_by_data(dataset):
    """``dataset`` with tf.data's DATA auto-shard policy, unless it names another policy itself.

    The Trainer's datasets yield GLOBAL batches: each worker of a multi-worker strategy must iterate the same
    sequence and take its part of every batch, which is DATA sharding (the strategy splits each batch between the
    replicas, and a worker keeps its replicas' parts). The default policy, AUTO, shards by FILE whenever the
    pipeline reads files (TFRecord, text lines): each worker would then read other files and make other batches than
    a single process, breaking the equality with one device and exact resume. One worker ignores the policy.
    """
    if dataset.options().experimental_distribute.auto_shard_policy != tf.data.experimental.AutoShardPolicy.AUTO:
        return dataset
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def _write_scalar(name, value, step):
    """`tf.summary.scalar` without needing the tensorboard package (scalars-plugin metadata)."""
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    )
    tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=metadata)


def _as_dataset(dataset):
    """A tf.data.Dataset, or a zero-argument callable returning one (called for a fresh copy)."""
    if isinstance(dataset, tf.data.Dataset):
        return dataset
    if callable(dataset):
        dataset = dataset()
        if isinstance(dataset, tf.data.Dataset):
            return dataset
    raise TypeError(f"expected a tf.data.Dataset or a callable returning one, got {dataset!r}")


class LossSpec:
    """How to turn the reduced sums of `compute_loss` into reported means (fixed when a step is traced).

    `terms`: tuple of (name, lambda, report_key or None); `metrics`: tuple of metric names.
    """

    def __init__(self, terms, metrics):
        self.terms, self.metrics = tuple(terms), tuple(metrics)

    def means(self, sums):
        """Nested numpy sums {"terms": {name: (S, C)}, "metrics": {name: (s, c)}} -> flat dict of means."""
        out = {"loss": 0.0}
        for name, lam, key in self.terms:
            total, count = (float(v) for v in sums["terms"][name])
            mean = total / max(count, 1.0)
            out["loss"] += lam * mean
            if key is not None:
                out[key] = mean
        for name in self.metrics:
            total, count = (float(v) for v in sums["metrics"][name])
            out[name] = total / max(count, 1.0)
        return out


def _scalar(value, what):
    value = tf.cast(value, tf.float32)
    if value.shape.rank != 0:
        raise ValueError(f"compute_loss: {what} must be a scalar sum, got shape {value.shape}")
    return value


def _pair(value, what):
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"compute_loss: {what} must be a (sum, count) pair, got {value!r}")
    return _scalar(value[0], f"{what}'s sum"), _scalar(value[1], f"{what}'s count")


def _parse_results(results):
    """Validate `compute_loss`'s dict (see module docstring) -> (LossSpec, nested float32 sums)."""
    if not isinstance(results, dict):
        raise ValueError(f"compute_loss must return a dict, got {type(results).__name__}")
    terms, spec_terms, metrics = {}, [], {}
    if "losses" in results:
        if "loss" in results or "weight" in results:
            raise ValueError("compute_loss returned both 'losses' (several terms) and 'loss'/'weight' "
                             "(one term); use one form")
        losses = results["losses"]
        if not isinstance(losses, dict) or not losses:
            raise ValueError(f"compute_loss: 'losses' must be a non-empty dict name -> (sum, count[, "
                             f"weight]), got {losses!r}")
        for name, term in losses.items():
            if not isinstance(term, (tuple, list)) or len(term) not in (2, 3):
                raise ValueError(f"compute_loss: loss term {name!r} must be (sum, count) or "
                                 f"(sum, count, weight), got {term!r}")
            lam = term[2] if len(term) == 3 else 1.0
            if isinstance(lam, bool) or not isinstance(lam, (int, float, np.number)) or not np.isfinite(lam):
                raise ValueError(f"compute_loss: the weight of loss term {name!r} must be a finite Python "
                                 f"number (fixed for the run), got {lam!r}")
            terms[name] = _pair(term[:2], f"loss term {name!r}")
            spec_terms.append((name, float(lam), f"{name}_loss"))
        default_count = None
        rest = {k: v for k, v in results.items() if k != "losses"}
    else:
        if "loss" not in results or "weight" not in results:
            raise ValueError(f"compute_loss must return a dict with 'loss' (a sum) and 'weight' (its count), "
                             f"or 'losses' (several terms), got {sorted(results)}")
        terms["loss"] = (_scalar(results["loss"], "'loss'"), _scalar(results["weight"], "'weight'"))
        spec_terms.append(("loss", 1.0, None))
        default_count = terms["loss"][1]
        rest = {k: v for k, v in results.items() if k not in ("loss", "weight")}
    reserved = {"loss"} | {key for _, _, key in spec_terms if key}
    for name, value in rest.items():
        if name.endswith("_weight") and name[:-len("_weight")] in rest:
            continue
        if name in reserved:
            raise ValueError(f"compute_loss: metric {name!r} clashes with a reported loss name")
        if isinstance(value, (tuple, list)):
            metrics[name] = _pair(value, f"metric {name!r}")
        elif f"{name}_weight" in rest:
            metrics[name] = (_scalar(value, f"metric {name!r}"), _scalar(rest[f"{name}_weight"], f"'{name}_weight'"))
        elif default_count is not None:
            metrics[name] = (_scalar(value, f"metric {name!r}"), default_count)
        else:
            raise ValueError(f"compute_loss: metric {name!r} needs its count: return (sum, count) or "
                             f"'{name}_weight' (with several loss terms there is no default count)")
    return LossSpec(spec_terms, metrics), {"terms": terms, "metrics": metrics}


def _is_chief(strategy):
    """True on the worker that owns checkpoints and summaries (always True off multi-worker)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief


def _num_workers(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return 1
    return sum(len(tasks) for tasks in resolver.cluster_spec().as_dict().values())


class Trainer:
    """Custom training loop over `strategy.run`, with checkpoints, exact resume, eval and logging.

    Args:
      model: a `keras.Model` created under `strategy.scope()`, or a zero-argument callable that
        builds it (the Trainer calls it under the scope, after seeding).
      optimizer: a Keras optimizer created under the scope, or a zero-argument callable. When the
        model's dtype policy is `mixed_float16` it is wrapped in `keras.optimizers.LossScaleOptimizer`.
        Use `clip_norm` here rather than the optimizer's `global_clipnorm`, which would clip each
        replica's partial gradient.
      compute_loss: `fn(model, batch, training) -> dict` of SUMS (see module docstring).
      strategy: a tf.distribute strategy; default: the strategy of the current scope.
      jit_compile: XLA-compile the per-replica forward/backward: True, False or "auto" (GPU/TPU
        only; on CPU it measured slower, see `_CPU_JIT_DEFAULT`).
      clip_norm: clip the global (all-replica) gradient to this global norm.
      checkpoint_dir: where `tf.train.CheckpointManager` keeps model, optimizer, step and RNG state;
        the latest checkpoint there is restored when `fit`/`evaluate` first runs.
      max_to_keep: checkpoints kept.
      checkpoint_every: also save every this many steps (a checkpoint is always saved at the end of
        `fit`, on SIGTERM and when the time budget runs out).
      log_dir: `tf.summary` scalars (train metrics, learning rate, eval metrics) go here.
      seed: passed to `keras.utils.set_random_seed` at construction.
      verbose: 1 shows a `keras.utils.Progbar`, 0 is silent.
      auxiliary: optional `keras.layers.Layer` (or a zero-argument callable returning one, or None) whose
        trainable variables are trained with the model's but are no part of it, e.g. distillation's
        projections of the student's hidden states: `compute_loss` uses it by closure; the checkpoint keeps
        it as `auxiliary` beside `model` (so a run's `model` stays the task model alone).

    Attributes: `step` (int, global step), `history` (dict of lists: "step", "loss", other train
    metrics, "learning_rate", and "eval_step", "eval_loss", ... for evaluations), `trace_count`
    (traces of the train step: one per dataset ``element_spec``, see `_trace_for`), `eval_trace_count`
    (the same for evaluation), `step_seconds` (wall seconds of each step of the last `fit`: fetching the
    batch and running the step; the first includes tracing), `start_step` (the step the last `fit` started from, after
    restoring) and `stop_reason` after `fit`.
    """

    def __init__(self, model, optimizer, compute_loss, strategy=None, jit_compile="auto",
                 clip_norm=None, checkpoint_dir=None, max_to_keep=3, checkpoint_every=None,
                 log_dir=None, seed=0, verbose=1, auxiliary=None):
        keras.utils.set_random_seed(seed)
        self.strategy = strategy or tf.distribute.get_strategy()
        self.compute_loss = compute_loss
        self.jit_compile = _resolve_jit(jit_compile)
        self.clip_norm = clip_norm
        self.checkpoint_dir = checkpoint_dir
        self.max_to_keep = max_to_keep
        self.checkpoint_every = checkpoint_every
        self.log_dir = log_dir
        self.verbose = verbose
        self.is_chief = _is_chief(self.strategy)
        self._multi_worker = _num_workers(self.strategy) > 1

        with self.strategy.scope():
            self.model = model if isinstance(model, keras.Model) else model()
            self.auxiliary = auxiliary() if callable(auxiliary) and not isinstance(auxiliary, keras.layers.Layer) \
                else auxiliary
            if not isinstance(optimizer, keras.optimizers.Optimizer):
                optimizer = optimizer()
            # The model's own policy decides (it may have been built under a global policy since reset).
            policy = getattr(self.model, "dtype_policy", None) or keras.mixed_precision.global_policy()
            if policy.name == "mixed_float16" and not isinstance(
                optimizer, keras.optimizers.LossScaleOptimizer
            ):
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            self.optimizer = optimizer
            self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")

        self.history = {"step": []}
        self.trace_count = 0
        self.eval_trace_count = 0
        self.step_seconds = []
        self.stop_reason = None
        self.start_step = None
        self._ready = False
        self._stop_requested = False
        self._checkpoint = None
        self._manager = None
        self._writer = None
        # Both steps are traced once per dataset, for the dataset's `element_spec` (see `_trace_for`); a
        # batch whose shape that spec admits reuses the trace. reduce_retracing covers batches fed by hand.
        self._train_fn = tf.function(self._train_step_cross_replica, reduce_retracing=True)
        self._eval_fn = tf.function(self._eval_step_cross_replica, reduce_retracing=True)
        self._loss_specs = {}  # "train"/"eval" -> LossSpec, set when the forward pass is traced
        self._forward_train = tf.function(self._replica_forward_fn(training=True), jit_compile=self.jit_compile)
        self._forward_eval = tf.function(self._replica_forward_fn(training=False), jit_compile=self.jit_compile)
        self._stop_fn = tf.function(self._any_worker_stops)

    # ------------------------------------------------------------------ properties
    @property
    def step(self):
        """The global step (number of optimizer updates done, restored on resume)."""
        return int(self._step.numpy())

    @property
    def learning_rate(self):
        """The optimizer's current learning rate (schedules evaluated at the current iteration)."""
        return float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))

    # ------------------------------------------------------------------ setup
    def _rng_state_variables(self):
        """Keras SeedGenerator states (dropout etc.): not tracked by tf.train.Checkpoint by default."""
        return [v for v in self.model.variables if v.name == "seed_generator_state"]

    def _ensure_ready(self, dataset):
        """Build model and optimizer variables under the scope, then restore the latest checkpoint."""
        if self._ready:
            return
        with self.strategy.scope():
            if not self.model.built or not self.model.variables:
                first_batch = next(iter(dataset.take(1)))
                self.compute_loss(self.model, first_batch, training=False)
            if not self.optimizer.built:
                self.optimizer.build(self._trained_variables())
        rng = {f"rng_{i}": v for i, v in enumerate(self._rng_state_variables())}
        extra = {} if self.auxiliary is None else {"auxiliary": self.auxiliary}
        self._checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, step=self._step, **rng, **extra
        )
        if self.checkpoint_dir:
            directory = self.checkpoint_dir
            if not self.is_chief:  # every worker must save (collectives); only the chief keeps it
                directory = tempfile.mkdtemp(prefix="kerasplm_worker_ckpt_")
            self._manager = tf.train.CheckpointManager(
                self._checkpoint, directory, max_to_keep=self.max_to_keep
            )
            latest = tf.train.latest_checkpoint(self.checkpoint_dir)
            if latest:
                restore_checkpoint(self._checkpoint, latest)
        if self.log_dir and self.is_chief:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        self._ready = True

    def save(self):
        """Save a checkpoint now (all workers must call it); returns the path or None."""
        if self._manager is None:
            return None
        path = self._manager.save(checkpoint_number=self._step)
        return path if self.is_chief else None

    # ------------------------------------------------------------------ per-replica steps
    def _replica_forward_fn(self, training):
        """The per-replica forward pass: validated, nested float32 sums (see `_parse_results`)."""
        def forward(batch):
            spec, sums = _parse_results(self.compute_loss(self.model, batch, training=training))
            # A Python side effect at trace time: every trace of a mode must report the same terms.
            mode = "train" if training else "eval"
            previous = self._loss_specs.get(mode)
            if previous is not None and (previous.terms, previous.metrics) != (spec.terms, spec.metrics):
                raise ValueError("compute_loss returned different loss terms or metrics for different batches")
            self._loss_specs[mode] = spec
            return sums
        return forward

    def _trained_variables(self):
        """The model's trainable variables, then the auxiliary layer's."""
        extra = [] if self.auxiliary is None else list(self.auxiliary.trainable_variables)
        return list(self.model.trainable_variables) + extra

    def _replica_train_step(self, batch):
        variables = self._trained_variables()
        with tf.GradientTape() as tape:
            sums = self._forward_train(batch)
        spec = self._loss_specs["train"]
        ctx = tf.distribute.get_replica_context()
        # dL/dS_i = lambda_i / C_i with C_i the GLOBAL count: all-reduce the counts, then seed ONE
        # backward pass with those factors (times the loss scale under mixed_float16).
        local_sums = [sums["terms"][name][0] for name, _, _ in spec.terms]
        counts = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                [sums["terms"][name][1] for name, _, _ in spec.terms])
        loss_scale = tf.cast(self.optimizer.scale_loss(tf.constant(1.0)), tf.float32)
        seeds = [lam * loss_scale / tf.maximum(count, 1.0)
                 for (_, lam, _), count in zip(spec.terms, counts)]
        grads = tape.gradient(local_sums, variables, output_gradients=seeds)
        # Dense gradients: Keras 3's optimizers apply an IndexedSlices slice by slice (Adam squares each
        # slice into its second moment, Adagrad into its accumulator), so a row given in k slices gets
        # the sum of k squares, not the square of the sum; and the optimizer's all-reduce concatenates the
        # replicas' slices. A row every replica sums over its share of the batch (BERT's position
        # embeddings) then had one slice on one device and N on N replicas: another update (measured:
        # up to ~lr apart after one Adam step). Summed, a gradient means the same on any number of replicas
        # (Keras 2's optimizers summed repeated rows too). Clipping needs them dense as well: an IndexedSlices
        # with repeated indices has a larger norm than its sum.
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        if self.clip_norm:
            # The norm is that of the SUMMED gradient: reduce here, clip, then hand each replica's
            # 1/N share to the optimizer (which sums across replicas again).
            present = [g for g in grads if g is not None]
            present = ctx.all_reduce(tf.distribute.ReduceOp.SUM, present)
            present = [g / loss_scale for g in present]
            present, _ = tf.clip_by_global_norm(present, self.clip_norm)
            share = loss_scale / ctx.num_replicas_in_sync
            it = iter(present)
            grads = [None if g is None else next(it) * share for g in grads]
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        self.optimizer.apply_gradients(pairs)
        return sums

    def _reduce(self, per_replica):
        return tf.nest.map_structure(
            lambda v: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None), per_replica)

    def _train_step_cross_replica(self, batch):
        self.trace_count += 1  # Python side effect: runs once per trace
        per_replica = self.strategy.run(self._replica_train_step, args=(batch,))
        self._step.assign_add(1)
        return self._reduce(per_replica)

    def _eval_step_cross_replica(self, batch):
        self.eval_trace_count += 1
        return self._reduce(self.strategy.run(self._forward_eval, args=(batch,)))

    def _any_worker_stops(self, flag):
        """True on every worker when any worker's `flag` (bool scalar) is True."""
        value = self.strategy.run(lambda: tf.cast(flag, tf.float32))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None) > 0

    # ------------------------------------------------------------------ metrics
    def _means(self, mode, sums):
        return self._loss_specs[mode].means(tf.nest.map_structure(lambda v: v.numpy(), sums))

    def _record(self, prefix, step, values):
        step_key = f"{prefix}step"
        self.history.setdefault(step_key, []).append(step)
        for key, value in values.items():
            self.history.setdefault(f"{prefix}{key}", []).append(value)
        if self._writer is not None:
            with self._writer.as_default(step=step):
                for key, value in values.items():
                    _write_scalar(f"{prefix}{key}", value, step)
            self._writer.flush()

    # ------------------------------------------------------------------ public loops
    def evaluate(self, dataset):
        """Exact metrics over `dataset` (global batches): {"loss": L, "<term>_loss": S_i/C_i, K: s_K/c_K}."""
        dataset = _as_dataset(dataset)
        self._ensure_ready(dataset)
        totals = None
        distributed = self.strategy.experimental_distribute_dataset(_shard_by_data(dataset))
        _trace_for(self._eval_fn, distributed)
        for batch in distributed:
            sums = self._eval_fn(batch)
            totals = sums if totals is None else tf.nest.map_structure(tf.add, totals, sums)
        if totals is None:
            raise ValueError("evaluate() got an empty dataset")
        return self._means("eval", totals)

    def fit(self, dataset, steps=None, time_budget=None, eval_dataset=None, eval_every=None,
            log_every=50):
        """Train until global step `steps` (absolute, so a resumed run reaches the same total),
        the dataset ends, `time_budget` seconds pass, or SIGTERM arrives; then save a checkpoint.

        Train metrics logged every `log_every` steps are exact means over the steps since the last
        log. Returns `self.history` (dict of lists, see class docstring); `self.stop_reason` is
        one of "steps", "end_of_data", "time_budget", "sigterm", "other_worker_stopped".

        The budget counts from this call: building the model, restoring a checkpoint and tracing
        the train step are part of what a run costs, and jobs compared at an equal budget pay them
        within it. At least one step is always taken.
        """
        called = time.monotonic()
        if eval_every and eval_dataset is None:
            raise ValueError("eval_every needs an eval_dataset")
        dataset = _as_dataset(dataset)
        self._ensure_ready(dataset)
        start = self.start_step = self.step
        self.stop_reason = None
        if steps is not None and start >= steps:
            self.stop_reason = "steps"
            return self.history
        # Deterministic, re-iterable dataset: skip what the interrupted run already consumed.
        data = self.strategy.experimental_distribute_dataset(_shard_by_data(dataset.skip(start) if start else dataset))
        _trace_for(self._train_fn, data)
        iterator = iter(data)
        progbar = None
        if self.verbose and self.is_chief:
            progbar = keras.utils.Progbar(target=steps, unit_name="step")
        previous_handler = self._install_sigterm()
        last_step_end = time.monotonic()
        self.step_seconds = []
        window = None
        step = start
        try:
            while True:
                if steps is not None and step >= steps:
                    self.stop_reason = "steps"
                    break
                try:
                    batch = next(iterator)
                except (StopIteration, tf.errors.OutOfRangeError):
                    self.stop_reason = "end_of_data"
                    break
                sums = self._train_fn(batch)
                step += 1
                now = time.monotonic()
                self.step_seconds.append(now - last_step_end)
                last_step_end = now
                window = sums if window is None else tf.nest.map_structure(tf.add, window, sums)
                at_end = steps is not None and step >= steps
                if (log_every and step % log_every == 0) or at_end:
                    window = self._log(step, window, progbar)
                if self.checkpoint_every and step % self.checkpoint_every == 0:
                    self.save()
                if eval_every and step % eval_every == 0:
                    self._record("eval_", step, self.evaluate(eval_dataset))
                timed_out = time_budget is not None and time.monotonic() - called >= time_budget
                stop = self._stop_requested or timed_out
                if self._multi_worker:  # every worker must leave the loop at the same step
                    stop = bool(self._stop_fn(tf.constant(stop)).numpy())
                if stop:
                    self.stop_reason = ("sigterm" if self._stop_requested else
                                        "time_budget" if timed_out else "other_worker_stopped")
                    break
        finally:
            self._restore_sigterm(previous_handler)
        if window is not None:
            self._log(step, window, progbar)
        if step > start:
            self.save()
            # After SIGTERM the grace period is short: stop right after the checkpoint.
            if (eval_dataset is not None and self.stop_reason != "sigterm"
                    and not (eval_every and step % eval_every == 0)):
                self._record("eval_", step, self.evaluate(eval_dataset))
        if progbar is not None:
            print(flush=True)
        self._stop_requested = False
        return self.history

    def _log(self, step, window, progbar):
        values = self._means("train", window)
        values["learning_rate"] = self.learning_rate
        self._record("", step, values)
        if progbar is not None:
            progbar.stateful_metrics.update(values)  # show the window means as they are
            progbar.update(step, values=list(values.items()), finalize=False)
        return None

    # ------------------------------------------------------------------ preemption
    def _install_sigterm(self):
        if threading.current_thread() is not threading.main_thread():
            return None

        def request_stop(signum, frame):
            self._stop_requested = True

        return (signal.signal(signal.SIGTERM, request_stop),)

    @staticmethod
    def _restore_sigterm(previous):
        if previous is not None:
            signal.signal(signal.SIGTERM, previous[0] if previous[0] is not None else signal.SIG_DFL)

    def close(self):
        """Remove a non-chief worker's scratch checkpoint directory."""
        if self._manager is not None and not self.is_chief:
            shutil.rmtree(self._manager.directory, ignore_errors=True)
        if self._writer is not None:
            self._writer.close()
