"""`Trainer`: TensorFlow's standard custom training loop, one code path for every tf.distribute strategy.

A step is a `tf.function` that runs `strategy.run(replica_step)` on a batch of a distributed dataset.
Each replica runs the forward/backward pass in an inner function (XLA-compiled when `jit_compile`),
then scales its gradient of the loss SUM by 1 / (global token count), so that after the optimizer's
cross-replica gradient sum the update equals the single-device masked mean exactly.

Contract with a model family::

    def compute_loss(model, batch, training) -> dict:
        # "loss": float sum over examples/tokens of the batch (the replica's shard of it)
        # "weight": the count the loss is averaged over (e.g. number of non-pad tokens)
        # any other key K: a sum reported as K / weight, or as K / K_weight when "K_weight" is given
        ...

    with trainer_strategy.scope():                    # or pass zero-argument callables instead
        model = build_model(); optimizer = keras.optimizers.Adam(...)
    trainer = Trainer(model, optimizer, compute_loss, strategy=trainer_strategy, checkpoint_dir=...)
    history = trainer.fit(train_dataset, steps=10_000, eval_dataset=dev, eval_every=1000)

Data contract for exact resume: `dataset` yields GLOBAL batches, and yields the same sequence every
time it is iterated (seeded shuffles, no unseeded randomness); it may be finite or `.repeat()`ed.
The tf.data iterator is not checkpointed; on resume, `fit` skips the `step` batches already consumed.
Caveat: `shuffle(seed=s, reshuffle_each_iteration=True)` replays its sequence only in a fresh
process -- re-iterating the SAME Dataset object continues its seed generator. So for resuming (or
several `fit` calls) within one process, pass a zero-argument callable that builds the dataset;
`fit`/`evaluate` accept either.
"""
import os
import shutil
import signal
import tempfile
import threading
import time

import keras
import tensorflow as tf

__all__ = ["Trainer"]

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


def _write_scalar(name, value, step):
    """`tf.summary.scalar` without needing the tensorboard package (scalars-plugin metadata)."""
    from tensorflow.core.framework import summary_pb2

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


def _check_results(results):
    if not isinstance(results, dict) or "loss" not in results or "weight" not in results:
        got = sorted(results) if isinstance(results, dict) else type(results).__name__
        raise ValueError(
            f"compute_loss must return a dict with 'loss' (a sum) and 'weight' (its count), got {got}"
        )


def _scale(grad, factor):
    """grad * factor for dense tensors and IndexedSlices (embedding gradients); None stays None."""
    if grad is None:
        return None
    if isinstance(grad, tf.IndexedSlices):
        values = grad.values * tf.cast(factor, grad.values.dtype)
        return tf.IndexedSlices(values, grad.indices, grad.dense_shape)
    return grad * tf.cast(factor, grad.dtype)


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

    Attributes: `step` (int, global step), `history` (dict of lists: "step", "loss", other train
    metrics, "learning_rate", and "eval_step", "eval_loss", ... for evaluations), `trace_count`
    (traces of the train step: one per distinct batch shape), `eval_trace_count` (evaluation relaxes
    to shape-generic after its first trace), `stop_reason` after `fit`.
    """

    def __init__(self, model, optimizer, compute_loss, strategy=None, jit_compile="auto",
                 clip_norm=None, checkpoint_dir=None, max_to_keep=3, checkpoint_every=None,
                 log_dir=None, seed=0, verbose=1):
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
        self.stop_reason = None
        self._ready = False
        self._stop_requested = False
        self._checkpoint = None
        self._manager = None
        self._writer = None
        self._train_fn = tf.function(self._train_step_cross_replica)
        # Evaluation walks every bucket shape in a row; relaxing shapes keeps it to ~2 traces (and quiets
        # TensorFlow's "frequent retracing" warning) at no cost that matters outside the train step.
        self._eval_fn = tf.function(self._eval_step_cross_replica, reduce_retracing=True)
        self._forward_backward = tf.function(self._replica_forward_backward,
                                             jit_compile=self.jit_compile)
        self._forward = tf.function(self._replica_forward, jit_compile=self.jit_compile)
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
                self.optimizer.build(self.model.trainable_variables)
        rng = {f"rng_{i}": v for i, v in enumerate(self._rng_state_variables())}
        self._checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, step=self._step, **rng
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
                self._checkpoint.restore(latest).assert_existing_objects_matched()
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
    def _replica_forward_backward(self, batch):
        """Inner (XLA) function: sums dict and gradients of scaled loss SUM w.r.t. trainables."""
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            results = self.compute_loss(self.model, batch, training=True)
            _check_results(results)
            loss_sum = tf.cast(results["loss"], tf.float32)
            scaled = self.optimizer.scale_loss(loss_sum)
        grads = tape.gradient(scaled, variables)
        results = {k: tf.cast(v, tf.float32) for k, v in results.items()}
        return results, grads

    def _replica_train_step(self, batch):
        results, grads = self._forward_backward(batch)
        ctx = tf.distribute.get_replica_context()
        # d(global mean)/dw = sum over replicas of d(local sum)/dw / global weight.
        global_weight = ctx.all_reduce(tf.distribute.ReduceOp.SUM, results["weight"])
        inv = 1.0 / tf.maximum(global_weight, 1.0)
        grads = [_scale(g, inv) for g in grads]
        if self.clip_norm:
            # The norm is that of the SUMMED gradient: reduce here, clip, then hand each replica's
            # 1/N share to the optimizer (which sums across replicas again).
            # Dense first: an IndexedSlices with repeated indices has a larger norm than its sum.
            present = [tf.convert_to_tensor(g) for g in grads if g is not None]
            present = ctx.all_reduce(tf.distribute.ReduceOp.SUM, present)
            if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
                scale = tf.cast(self.optimizer.dynamic_scale, tf.float32)
                present = [g / scale for g in present]
                present, _ = tf.clip_by_global_norm(present, self.clip_norm)
                present = [g * scale for g in present]
            else:
                present, _ = tf.clip_by_global_norm(present, self.clip_norm)
            share = 1.0 / ctx.num_replicas_in_sync
            it = iter(present)
            grads = [None if g is None else _scale(next(it), share) for g in grads]
        pairs = [(g, v) for g, v in zip(grads, self.model.trainable_variables) if g is not None]
        self.optimizer.apply_gradients(pairs)
        return results

    def _train_step_cross_replica(self, batch):
        self.trace_count += 1  # Python side effect: runs once per trace
        per_replica = self.strategy.run(self._replica_train_step, args=(batch,))
        self._step.assign_add(1)
        return {
            k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
            for k, v in per_replica.items()
        }

    def _replica_forward(self, batch):
        results = self.compute_loss(self.model, batch, training=False)
        return {k: tf.cast(v, tf.float32) for k, v in results.items()}

    def _eval_step_cross_replica(self, batch):
        self.eval_trace_count += 1
        per_replica = self.strategy.run(self._forward, args=(batch,))
        return {
            k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
            for k, v in per_replica.items()
        }

    def _any_worker_stops(self, flag):
        """True on every worker when any worker's `flag` (bool scalar) is True."""
        value = self.strategy.run(lambda: tf.cast(flag, tf.float32))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None) > 0

    # ------------------------------------------------------------------ metrics
    @staticmethod
    def _means(sums):
        """{"loss": s, "weight": w, "K": s_k[, "K_weight": w_k]} -> {"loss": s/w, "K": s_k/w_k}."""
        sums = {k: float(v) for k, v in sums.items()}
        weight = max(sums.get("weight", 0.0), 1.0)
        out = {}
        for key, value in sums.items():
            if key == "weight" or key.endswith("_weight"):
                continue
            denominator = sums.get(f"{key}_weight")
            out[key] = value / (max(denominator, 1.0) if denominator is not None else weight)
        return out

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
        """Exact metrics over `dataset` (global batches): {"loss": sum/weight, K: sum_K/weight...}."""
        dataset = _as_dataset(dataset)
        self._ensure_ready(dataset)
        totals = None
        for batch in self.strategy.experimental_distribute_dataset(dataset):
            sums = self._eval_fn(batch)
            totals = sums if totals is None else {k: totals[k] + v for k, v in sums.items()}
        if totals is None:
            raise ValueError("evaluate() got an empty dataset")
        return self._means({k: v.numpy() for k, v in totals.items()})

    def fit(self, dataset, steps=None, time_budget=None, eval_dataset=None, eval_every=None,
            log_every=50):
        """Train until global step `steps` (absolute, so a resumed run reaches the same total),
        the dataset ends, `time_budget` seconds pass, or SIGTERM arrives; then save a checkpoint.

        Train metrics logged every `log_every` steps are exact means over the steps since the last
        log. Returns `self.history` (dict of lists, see class docstring); `self.stop_reason` is
        one of "steps", "end_of_data", "time_budget", "sigterm", "other_worker_stopped".
        """
        if eval_every and eval_dataset is None:
            raise ValueError("eval_every needs an eval_dataset")
        dataset = _as_dataset(dataset)
        self._ensure_ready(dataset)
        start = self.step
        self.stop_reason = None
        if steps is not None and start >= steps:
            self.stop_reason = "steps"
            return self.history
        # Deterministic, re-iterable dataset: skip what the interrupted run already consumed.
        data = dataset.skip(start) if start else dataset
        iterator = iter(self.strategy.experimental_distribute_dataset(data))
        progbar = None
        if self.verbose and self.is_chief:
            progbar = keras.utils.Progbar(target=steps, unit_name="step")
        previous_handler = self._install_sigterm()
        start_time = time.monotonic()
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
                window = sums if window is None else {k: window[k] + v for k, v in sums.items()}
                at_end = steps is not None and step >= steps
                if (log_every and step % log_every == 0) or at_end:
                    window = self._log(step, window, progbar)
                if self.checkpoint_every and step % self.checkpoint_every == 0:
                    self.save()
                if eval_every and step % eval_every == 0:
                    self._record("eval_", step, self.evaluate(eval_dataset))
                timed_out = (time_budget is not None
                             and time.monotonic() - start_time >= time_budget)
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
            if eval_dataset is not None and not (eval_every and step % eval_every == 0):
                self._record("eval_", step, self.evaluate(eval_dataset))
        if progbar is not None:
            print(flush=True)
        self._stop_requested = False
        return self.history

    def _log(self, step, window, progbar):
        values = self._means({k: v.numpy() for k, v in window.items()})
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
