"""Adam and AdamW whose dense update is TensorFlow's fused Adam kernel.

Keras 3's Adam writes the update (Kingma & Ba 2015, algorithm 1, with the bias corrections folded into the
step size) as about ten separate TensorFlow ops, each a full pass over the weights::

    m ← m + (g - m)(1 - β1)          v ← v + (g² - v)(1 - β2)
    α = lr · sqrt(1 - β2^t) / (1 - β1^t)
    θ ← θ - α · m / (sqrt(v) + ε)

``tf.raw_ops.ResourceApplyAdam`` computes exactly this in one multithreaded pass (and AdamW's decoupled decay
θ ← θ - lr·λ·θ, which Keras applies first, becomes one ``ResourceApplyGradientDescent``). For BERT pretraining on
CPU, where 7.8M of bert_mini's 11M weights are the word embeddings that every step updates densely (the MLM
decoder is tied to them), Keras' ops were ~10% of the step. ``FusedAdam`` / ``FusedAdamW`` are the Keras
optimizers with only that dense update swapped: same arguments, slots (``m``, ``v``), checkpoints,
AdamW's decay (its exclusions included, applied before the update as Keras does), schedules, loss scaling and
tf.distribute behaviour. Sparse (``IndexedSlices``) gradients, ``amsgrad``, non-float32 weights and
backends other than TensorFlow fall back to Keras' update unchanged.
"""
import keras
import tensorflow as tf

__all__ = ["FusedAdam", "FusedAdamW", "LayerwiseAdamW", "layer_group_multiplier", "discriminative_decay",
           "gradual_unfreezing"]


def _handle(variable):
    """The resource handle of a Keras variable (or of a plain / per-replica ``tf.Variable``)."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle


class _FusedAdamUpdate:
    """The dense Adam update as one ``ResourceApplyAdam``, and AdamW's decoupled weight decay
    θ ← θ - lr·λ·θ as one ``ResourceApplyGradientDescent`` with the weights as their own "gradient"
    (Keras computes it as two multiplications and a subtraction, three passes over the weights). Mixed
    into a Keras Adam optimizer."""

    def _apply_weight_decay(self, variables):
        if keras.backend.backend() != "tensorflow":
            return super()._apply_weight_decay(variables)
        # On TensorFlow the decay is applied in update_step, variable by variable (the same order:
        # decay with the step's learning rate first, then the Adam update).

    def _decay_gate(self, variable):
        """A 0/1 factor on ``variable``'s weight decay this step (None: always 1; a frozen layer's is 0)."""
        return None

    def _decay(self, variable):
        if self.weight_decay is None or not self._use_weight_decay(variable):
            return
        lr, wd = tf.cast(self.learning_rate, variable.dtype), tf.cast(self.weight_decay, variable.dtype)
        gate = self._decay_gate(variable)
        if gate is not None:
            lr = lr * tf.cast(gate, variable.dtype)
        if variable.dtype != "float32":
            variable.assign_sub(variable * (wd * lr))
            return
        tf.raw_ops.ResourceApplyGradientDescent(var=_handle(variable), alpha=lr * wd,
                                                delta=tf.convert_to_tensor(variable), use_locking=False)

    def update_step(self, gradient, variable, learning_rate):
        if keras.backend.backend() == "tensorflow":
            self._decay(variable)
        if (isinstance(gradient, tf.IndexedSlices) or self.amsgrad or variable.dtype != "float32"
                or keras.backend.backend() != "tensorflow"):
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        step = tf.cast(self.iterations + 1, tf.float32)
        beta_1, beta_2 = tf.cast(self.beta_1, tf.float32), tf.cast(self.beta_2, tf.float32)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable), m=_handle(self._momentums[index]), v=_handle(self._velocities[index]),
            beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, tf.float32), beta1=beta_1, beta2=beta_2,
            epsilon=tf.cast(self.epsilon, tf.float32), grad=tf.cast(gradient, tf.float32), use_locking=False)


@keras.saving.register_keras_serializable(package="kerasplm")
class FusedAdam(_FusedAdamUpdate, keras.optimizers.Adam):
    """``keras.optimizers.Adam`` with the fused dense update (see the module docstring)."""


@keras.saving.register_keras_serializable(package="kerasplm")
class FusedAdamW(_FusedAdamUpdate, keras.optimizers.AdamW):
    """``keras.optimizers.AdamW`` (Loshchilov & Hutter 2019) with the fused dense Adam update."""


class LayerwiseAdamW(FusedAdamW):
    """:class:`FusedAdamW` with a learning-rate multiplier per variable: ``multiplier(variable) -> float``, read
    once when the optimizer is built; variable v's Adam update is made at learning rate ``lr_t · m(v)`` (its
    decoupled weight decay stays at ``lr_t``). What layer-wise decay (ELECTRA) and ULMFiT's discriminative
    fine-tuning are made of: :func:`layer_group_multiplier`.

    ``frozen_until(variable) -> step`` (optional; :func:`gradual_unfreezing`): the variable learns from that
    optimizer step on; before it its learning rate and its weight decay are 0 (its Adam moments still follow its
    gradients, so it starts with moments of the right scale when it thaws)."""

    def __init__(self, multiplier, frozen_until=None, **kwargs):
        super().__init__(**kwargs)
        self._multiplier = multiplier
        self._frozen_until = frozen_until
        self._lr_multipliers = []
        self._thaw_steps = []

    def build(self, variables):
        super().build(variables)
        self._lr_multipliers = [float(self._multiplier(v)) for v in variables]
        self._thaw_steps = [int(self._frozen_until(v)) if self._frozen_until else 0 for v in variables]

    def _gate(self, variable):
        thaw = self._thaw_steps[self._get_variable_index(variable)] if self._thaw_steps else 0
        return None if thaw <= 0 else tf.cast(self.iterations >= thaw, tf.float32)

    def _decay_gate(self, variable):
        return self._gate(variable)

    def update_step(self, gradient, variable, learning_rate):
        factor = self._lr_multipliers[self._get_variable_index(variable)]
        learning_rate = learning_rate * factor
        gate = self._gate(variable)
        if gate is not None:
            learning_rate = learning_rate * tf.cast(gate, learning_rate.dtype)
        return super().update_step(gradient, variable, learning_rate)


def gradual_unfreezing(layer_group, top_group, steps_per_group):
    """ULMFiT's gradual unfreezing (§3.3) as a :class:`LayerwiseAdamW` ``frozen_until``: the top group learns from
    the start, and each group below it ``steps_per_group`` steps (an epoch) after the group above it, so after k
    stages the top k + 1 groups learn."""
    return lambda variable: (top_group - layer_group(variable)) * int(steps_per_group)


def layer_group_multiplier(layer_group, top_group, decay):
    """A :class:`LayerwiseAdamW` multiplier over layer groups: ``layer_group(variable) -> g`` in
    ``[0, top_group]`` (0 the bottom, e.g. the embeddings; ``top_group`` the head), and group g learns at
    ``decay^(top_group - g)`` times the base rate, so η^(g-1) = decay · η^g and the top group learns at the base
    rate.

    ELECTRA's layer-wise decay is ``decay`` < 1 directly; ULMFiT's discriminative fine-tuning (Howard & Ruder 2018,
    §3.2: η^(l-1) = η^l / 2.6) is ``decay = discriminative_decay(2.6)``."""
    def multiplier(variable):
        return decay ** (top_group - layer_group(variable))
    return multiplier


def discriminative_decay(factor):
    """The per-group decay of ULMFiT's discriminative learning rates η^(l-1) = η^l / ``factor``: ``1 / factor``."""
    if factor is None or factor <= 0:
        raise ValueError(f"the discriminative learning-rate factor must be > 0, got {factor}")
    return 1.0 / factor
