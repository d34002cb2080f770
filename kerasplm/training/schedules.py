"""Learning-rate schedules of the classic papers, serializable so optimizers survive `.keras` save/load.

All schedules take the optimizer step (int or float tensor) and return a float32 learning rate.
"""
import math

import keras
import tensorflow as tf

__all__ = ["CustomSchedule", "WarmupLinearDecay", "WarmupCosineDecay", "BudgetSchedule", "SlantedTriangular",
           "ScaledSchedule", "plot_schedule"]


@keras.saving.register_keras_serializable(package="kerasplm")
class CustomSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Transformer ("Attention is all you need") schedule, the seed's name.

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

    Step 0 gives min(inf, 0) = 0 (never NaN).
    """

    def __init__(self, d_model, warmup_steps=4000):
        super().__init__()
        self.d_model = d_model
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        d_model = tf.cast(self.d_model, tf.float32)
        warmup = tf.cast(self.warmup_steps, tf.float32)
        arg1 = tf.math.rsqrt(step)  # inf at step 0
        arg2 = step * warmup**-1.5  # 0 at step 0
        return tf.math.rsqrt(d_model) * tf.math.minimum(arg1, arg2)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps}


class _WarmupThenDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup 0 -> peak over `warmup_steps`, then `_decay(peak, progress)` with progress going
    0 -> 1 from `warmup_steps` to `total_steps` (constant afterwards). Subclasses add one parameter."""

    extra_parameter = None  # name of the subclass's own constructor argument

    def __init__(self, peak_learning_rate, warmup_steps, total_steps, extra):
        super().__init__()
        if total_steps < warmup_steps:
            raise ValueError(
                f"total_steps must be >= warmup_steps, got total_steps={total_steps}, "
                f"warmup_steps={warmup_steps}"
            )
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        setattr(self, self.extra_parameter, extra)

    def _decay(self, peak, progress):
        raise NotImplementedError

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        peak = tf.cast(self.peak_learning_rate, tf.float32)
        warmup = tf.cast(self.warmup_steps, tf.float32)
        decay_steps = tf.maximum(tf.cast(self.total_steps - self.warmup_steps, tf.float32), 1.0)
        warm = peak * step / tf.maximum(warmup, 1.0)
        progress = tf.clip_by_value((step - warmup) / decay_steps, 0.0, 1.0)
        return tf.where(step < warmup, warm, self._decay(peak, progress))

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            self.extra_parameter: getattr(self, self.extra_parameter),
        }


@keras.saving.register_keras_serializable(package="kerasplm")
class WarmupLinearDecay(_WarmupThenDecay):
    """BERT schedule: linear warmup 0 -> peak over `warmup_steps`, then linear decay to
    `end_learning_rate` at `total_steps` (constant afterwards).

    step < W:  lr = peak * step / W
    step >= W: lr = end + (peak - end) * max(0, 1 - (step - W) / (T - W))
    """

    extra_parameter = "end_learning_rate"

    def __init__(self, peak_learning_rate, warmup_steps, total_steps, end_learning_rate=0.0):
        super().__init__(peak_learning_rate, warmup_steps, total_steps, end_learning_rate)

    def _decay(self, peak, progress):
        end = tf.cast(self.end_learning_rate, tf.float32)
        return end + (peak - end) * (1.0 - progress)


@keras.saving.register_keras_serializable(package="kerasplm")
class WarmupCosineDecay(_WarmupThenDecay):
    """GPT schedule: linear warmup 0 -> peak over `warmup_steps`, then cosine decay to
    `alpha * peak` at `total_steps` (constant afterwards).

    step >= W: lr = peak * (alpha + (1 - alpha) * 0.5 * (1 + cos(pi * p))),  p = min(1, (step-W)/(T-W))
    """

    extra_parameter = "alpha"

    def __init__(self, peak_learning_rate, warmup_steps, total_steps, alpha=0.0):
        super().__init__(peak_learning_rate, warmup_steps, total_steps, alpha)

    def _decay(self, peak, progress):
        alpha = tf.cast(self.alpha, tf.float32)
        cosine = 0.5 * (1.0 + tf.cos(tf.constant(math.pi, tf.float32) * progress))
        return peak * (alpha + (1.0 - alpha) * cosine)



class _RefittableLength:
    """A schedule whose length lives in a variable (``schedule_total_steps``), so that a run given only a time budget
    can refit it once its first steps are timed, and a resume restores it with the checkpoint."""

    @property
    def total_steps(self):
        return int(round(float(self._total_steps.numpy())))

    def set_total_steps(self, total_steps):
        """Refit the schedule to ``total_steps`` (>= 1) updates."""
        if total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {total_steps}")
        self._total_steps.assign(float(total_steps))


@keras.saving.register_keras_serializable(package="kerasplm")
class BudgetSchedule(_RefittableLength, keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup over the first `warmup_fraction` of the run, then linear decay to zero at its end.

    A schedule fitted to the number of updates a run will actually make (the main job's default for
    short budgets): CustomSchedule's 4,000 warmup steps never end in a 5-minute run on 2 cores, so the
    learning rate would still be rising when the budget runs out.

    T = total_steps, W = max(1, warmup_fraction * T) (W = 0 for warmup_fraction 0: the peak from step 0):
      step < W:       lr = peak * step / W
      W <= step <= T: lr = peak * (T - step) / max(T - W, 1)
      step > T:       lr = 0

    T is held in a tf.Variable: a time-budgeted run first times some steps, then calls
    `set_total_steps(estimate)`; the traced train step reads the variable, so it needs no retrace.
    """

    def __init__(self, peak_learning_rate, total_steps, warmup_fraction=0.1):
        super().__init__()
        if not 0.0 <= warmup_fraction <= 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1], got {warmup_fraction}")
        if peak_learning_rate <= 0:
            raise ValueError(f"peak_learning_rate must be > 0, got {peak_learning_rate}")
        self.peak_learning_rate = peak_learning_rate
        self.warmup_fraction = warmup_fraction
        self._total_steps = tf.Variable(1.0, dtype=tf.float32, trainable=False, name="schedule_total_steps")
        self.set_total_steps(total_steps)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        peak = tf.cast(self.peak_learning_rate, tf.float32)
        total = tf.convert_to_tensor(self._total_steps)
        warmup = tf.maximum(self.warmup_fraction * total, 1.0) if self.warmup_fraction > 0 else tf.constant(0.0)
        rising = peak * step / tf.maximum(warmup, 1.0)
        falling = peak * tf.maximum(total - step, 0.0) / tf.maximum(total - warmup, 1.0)
        return tf.where(step < warmup, rising, falling)

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate, "total_steps": self.total_steps,
                "warmup_fraction": self.warmup_fraction}


@keras.saving.register_keras_serializable(package="kerasplm")
class SlantedTriangular(_RefittableLength, keras.optimizers.schedules.LearningRateSchedule):
    """ULMFiT's slanted triangular learning rate (Howard & Ruder 2018, eq. 3): a short linear rise to
    ``max_learning_rate`` over the first ``cut_frac`` of the ``total_steps`` updates, then a long linear decay to
    ``max_learning_rate / ratio``.

    With T = total_steps and t the optimizer step (0-based, as Keras passes it)::

        cut = floor(T · cut_frac)
        p   = t / cut                                   if t < cut
              1 - (t - cut) / (cut · (1/cut_frac - 1))  otherwise
        η_t = η_max · (1 + p · (ratio - 1)) / ratio

    so η_0 = η_max / ratio, η_cut = η_max, and η falls back to η_max / ratio at t = T (where cut·(1/cut_frac - 1)
    = T - cut exactly when T·cut_frac is an integer). p is held at 0 (η = η_max / ratio) once the decay reaches
    the bottom: past T, or a little before it when T·cut_frac is not an integer, where the paper's p would turn
    negative (and with it, for long runs, the learning rate). When
    T·cut_frac < 1 there is no rise (cut = 0) and the decay spans T. The paper's values: cut_frac 0.1, ratio 32,
    η_max 0.01.

    T is held in a tf.Variable, as :class:`BudgetSchedule`'s: a time-budgeted run refits it with
    ``set_total_steps`` once its first steps are timed, without retracing the train step.
    """

    def __init__(self, max_learning_rate, total_steps, cut_frac=0.1, ratio=32):
        super().__init__()
        if max_learning_rate <= 0:
            raise ValueError(f"max_learning_rate must be > 0, got {max_learning_rate}")
        if not 0.0 < cut_frac < 1.0:
            raise ValueError(f"cut_frac must be in (0, 1), got {cut_frac}")
        if ratio < 1:
            raise ValueError(f"ratio must be >= 1, got {ratio}")
        self.max_learning_rate = max_learning_rate
        self.cut_frac = cut_frac
        self.ratio = ratio
        self._total_steps = tf.Variable(1.0, dtype=tf.float32, trainable=False, name="schedule_total_steps")
        self.set_total_steps(total_steps)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        total = tf.convert_to_tensor(self._total_steps)
        cut = tf.floor(total * self.cut_frac)
        # cut · (1/cut_frac - 1), the decay's length; T itself when there is no rise (cut = 0).
        decay_steps = tf.where(cut > 0, cut * (1.0 / self.cut_frac - 1.0), total)
        rising = step / tf.maximum(cut, 1.0)
        falling = 1.0 - (step - cut) / tf.maximum(decay_steps, 1e-6)
        p = tf.maximum(tf.where(step < cut, rising, falling), 0.0)
        ratio = tf.constant(float(self.ratio), tf.float32)
        return tf.cast(self.max_learning_rate, tf.float32) * (1.0 + p * (ratio - 1.0)) / ratio

    def get_config(self):
        return {"max_learning_rate": self.max_learning_rate, "total_steps": self.total_steps,
                "cut_frac": self.cut_frac, "ratio": self.ratio}


@keras.saving.register_keras_serializable(package="kerasplm")
class ScaledSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """``schedule(step) · scale``, with ``scale`` a tf.Variable the training step sets (:meth:`set_scale` eagerly, or
    ``scale.assign`` inside the traced step, before the optimizer reads the rate). The AWD-LSTM's variable-length
    BPTT windows: a window of length ℓ is trained at η · ℓ / bptt, so that short windows do not weigh as much as
    full ones. ``total_steps`` / ``set_total_steps`` are the wrapped schedule's (a time budget refits it)."""

    def __init__(self, schedule, scale=1.0):
        super().__init__()
        if isinstance(schedule, dict):
            schedule = keras.optimizers.schedules.deserialize(schedule)
        self.schedule = schedule
        self.scale = tf.Variable(float(scale), dtype=tf.float32, trainable=False, name="schedule_scale")

    def set_scale(self, scale):
        self.scale.assign(float(scale))

    @property
    def total_steps(self):
        return self.schedule.total_steps

    def set_total_steps(self, total_steps):
        self.schedule.set_total_steps(total_steps)

    def __call__(self, step):
        return tf.cast(self.schedule(step), tf.float32) * tf.convert_to_tensor(self.scale)

    def get_config(self):
        return {"schedule": keras.optimizers.schedules.serialize(self.schedule)}


def plot_schedule(schedule, steps=40000, ax=None):
    """Plot `schedule(step)` for step in [0, steps); returns the matplotlib Axes."""
    import matplotlib.pyplot as plt  # lazy: importing kerasplm must not pick a backend

    if ax is None:
        _, ax = plt.subplots()
    step_values = tf.range(steps, dtype=tf.float32)
    ax.plot(step_values.numpy(), schedule(step_values).numpy())
    ax.set_xlabel("Train step")
    ax.set_ylabel("Learning rate")
    ax.set_title(type(schedule).__name__)
    return ax
