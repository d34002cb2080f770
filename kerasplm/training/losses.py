"""Masked token losses and accuracy: padding positions (labels == pad_id) count nowhere.

Functions return SUMS and COUNTS so that callers (the Trainer, across replicas) can form exact means.
Shapes: labels [..., T] int, logits [..., T, V] (any float dtype; computed in float32).
"""
import keras
import tensorflow as tf

__all__ = [
    "masked_sparse_cross_entropy",
    "fused_masked_cross_entropy",
    "loss_function",
    "masked_accuracy_counts",
    "masked_accuracy",
    "MaskedSparseCategoricalCrossentropy",
    "MaskedAccuracy",
    "classification_loss_sums",
    "soft_target_loss_sums",
    "masked_mse_sums",
]


def _token_mask(labels, pad_id):
    """float32 mask, 1.0 for real tokens, 0.0 where labels == pad_id. Shape of labels."""
    return tf.cast(tf.not_equal(labels, tf.cast(pad_id, labels.dtype)), tf.float32)


def masked_sparse_cross_entropy(labels, logits, pad_id=0, label_smoothing=0.0):
    """Summed token cross entropy over non-pad tokens.

    Per token, with p = softmax(logits) in float32 and smoothed target
    q = (1 - eps) * onehot(label) + eps / V:
        ce = -sum_v q_v log p_v = -(1 - eps) log p_label - (eps / V) sum_v log p_v

    Args:
      labels: int tensor [..., T].
      logits: float tensor [..., T, V] (float16/bfloat16 is upcast).
    Returns:
      (loss_sum, num_tokens): float32 scalars; pad positions excluded from both.
    """
    labels = tf.convert_to_tensor(labels)
    if labels.dtype.is_floating:
        labels = tf.cast(labels, tf.int32)
    logits = tf.cast(logits, tf.float32)
    mask = _token_mask(labels, pad_id)
    # Pad labels may be out of range for the vocab (e.g. -100): point them at class 0, masked anyway.
    safe_labels = tf.where(mask > 0, labels, tf.zeros_like(labels))
    if label_smoothing:
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        num_classes = tf.cast(tf.shape(logits)[-1], tf.float32)
        nll = -tf.gather(log_probs, safe_labels, axis=-1, batch_dims=labels.shape.rank)
        uniform = -tf.reduce_sum(log_probs, axis=-1) / num_classes
        per_token = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    else:
        per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe_labels, logits=logits)
    return tf.reduce_sum(per_token * mask), tf.reduce_sum(mask)


@tf.function(jit_compile=True)
def _fused_cross_entropy_forward(labels, logits, pad_id, label_smoothing):
    """One XLA pass over the logits: loss sum, token count, correct count and d(loss sum)/d(logits)."""
    mask = tf.cast(tf.not_equal(labels, tf.cast(pad_id, labels.dtype)), tf.float32)
    safe_labels = tf.where(mask > 0, labels, tf.zeros_like(labels))
    x = tf.cast(logits, tf.float32)
    num_classes = x.shape[-1]
    max_logit = tf.reduce_max(x, axis=-1, keepdims=True)
    shifted = x - max_logit
    exp = tf.exp(shifted)
    sum_exp = tf.reduce_sum(exp, axis=-1, keepdims=True)
    log_probs = shifted - tf.math.log(sum_exp)                           # [..., V]
    onehot = tf.one_hot(safe_labels, num_classes, dtype=tf.float32)
    target = (1.0 - label_smoothing) * onehot + label_smoothing / num_classes   # q
    per_token = -tf.reduce_sum(target * log_probs, axis=-1)               # -sum_v q_v log p_v
    d_logits = (exp / sum_exp - target) * mask[..., None]                 # d ce / d logits = p - q
    # Correct when the label's logit is the largest: argmax == label except on exact ties, and it
    # reuses the max already taken (a separate argmax sweep cost as much as the softmax).
    label_logit = tf.reduce_sum(onehot * x, axis=-1)
    correct = tf.cast(label_logit >= tf.squeeze(max_logit, -1), tf.float32) * mask
    return (tf.reduce_sum(per_token * mask), tf.reduce_sum(mask), tf.reduce_sum(correct),
            tf.cast(d_logits, logits.dtype))


def fused_masked_cross_entropy(labels, logits, pad_id=0, label_smoothing=0.0):
    """``masked_sparse_cross_entropy`` and ``masked_accuracy_counts`` in one XLA-compiled pass.

    Same math (including label smoothing) and same results, except that a token whose label ties
    for the largest logit counts as correct (argmax would pick the first of the tied classes).
    Only the loss sum has a gradient, which the forward pass already computes as
    mask * (softmax(logits) - q). Why: on CPU, TensorFlow's unfused softmax cross entropy plus argmax
    over a [B, T, V] logits tensor took ~60 ms of a ~450 ms Transformer train step (vocab 8000); XLA
    fuses them into one sweep.

    Args:
      labels: int tensor [..., T]; pad_id marks positions that count nowhere.
      logits: float tensor [..., T, V], static V (float16/bfloat16 computed in float32).
    Returns:
      (loss_sum, num_tokens, num_correct): float32 scalars.
    """
    labels = tf.convert_to_tensor(labels)
    if labels.dtype.is_floating:
        labels = tf.cast(labels, tf.int32)
    logits = tf.convert_to_tensor(logits)
    if logits.shape.rank is None or logits.shape[-1] is None:
        raise ValueError(f"fused_masked_cross_entropy needs a static vocabulary size; logits have shape "
                         f"{logits.shape}")

    @tf.custom_gradient
    def loss_and_counts(logits):
        loss_sum, num_tokens, correct, d_logits = _fused_cross_entropy_forward(
            labels, logits, tf.constant(pad_id, labels.dtype), tf.constant(label_smoothing, tf.float32))

        def grad(d_loss_sum, d_num_tokens, d_correct):
            del d_num_tokens, d_correct  # counts are not differentiable
            # The upstream gradient is usually exactly 1 (unscaled loss sum): skip a logits-sized pass.
            return tf.cond(tf.equal(d_loss_sum, 1.0), lambda: d_logits,
                           lambda: d_logits * tf.cast(d_loss_sum, d_logits.dtype))

        return (loss_sum, num_tokens, correct), grad

    return loss_and_counts(logits)


def loss_function(real, pred):
    """The seed's loss: mean cross entropy over non-pad (non-zero) tokens.

    real: [B, T] int, pred: [B, T, V] logits -> float32 scalar loss_sum / max(num_tokens, 1).
    """
    loss_sum, num_tokens = masked_sparse_cross_entropy(real, pred)
    return loss_sum / tf.maximum(num_tokens, 1.0)


def masked_accuracy_counts(labels, logits, pad_id=0):
    """(num_correct, num_tokens) over non-pad tokens; correct means argmax(logits) == label."""
    labels = tf.convert_to_tensor(labels)
    if labels.dtype.is_floating:
        labels = tf.cast(labels, tf.int32)
    mask = _token_mask(labels, pad_id)
    predictions = tf.cast(tf.argmax(logits, axis=-1), labels.dtype)
    correct = tf.cast(tf.equal(predictions, labels), tf.float32) * mask
    return tf.reduce_sum(correct), tf.reduce_sum(mask)


def masked_accuracy(labels, logits, pad_id=0):
    """Token accuracy over non-pad tokens: num_correct / max(num_tokens, 1)."""
    correct, total = masked_accuracy_counts(labels, logits, pad_id)
    return correct / tf.maximum(total, 1.0)


@keras.saving.register_keras_serializable(package="kerasplm")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Keras Loss for `model.compile`: exact mean CE over the batch's non-pad tokens (from logits).

    `call` returns the scalar loss_sum / num_tokens, so Keras' reduction leaves it unchanged.
    """

    def __init__(self, pad_id=0, label_smoothing=0.0, name="masked_sparse_categorical_crossentropy",
                 **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        loss_sum, num_tokens = masked_sparse_cross_entropy(
            y_true, y_pred, pad_id=self.pad_id, label_smoothing=self.label_smoothing
        )
        return loss_sum / tf.maximum(num_tokens, 1.0)

    def get_config(self):
        config = super().get_config()
        config.update({"pad_id": self.pad_id, "label_smoothing": self.label_smoothing})
        return config


@keras.saving.register_keras_serializable(package="kerasplm")
class MaskedAccuracy(keras.metrics.Metric):
    """Token accuracy over non-pad tokens, accumulated as correct / total across batches."""

    def __init__(self, pad_id=0, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id
        self.correct = self.add_variable(shape=(), initializer="zeros", name="correct")
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        correct, total = masked_accuracy_counts(y_true, y_pred, pad_id=self.pad_id)
        self.correct.assign_add(tf.cast(correct, self.correct.dtype))
        self.total.assign_add(tf.cast(total, self.total.dtype))

    def result(self):
        return self.correct / tf.maximum(self.total, 1.0)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)

    def get_config(self):
        config = super().get_config()
        config["pad_id"] = self.pad_id
        return config


def classification_loss_sums(labels, logits, weights=None):
    """One label per example: ``labels (B,)`` int, ``logits (B, C)`` ->
    ``{"loss": Σ_b w_b · -log softmax(logits_b)[y_b], "weight": Σ_b w_b, "accuracy": Σ_b w_b [argmax logits_b = y_b]}``,
    the Trainer's ``compute_loss`` contract (sums; the Trainer divides by the global weight). ``weights (B,)``:
    each example's weight (default 1: the weight is B)."""
    labels = tf.cast(labels, tf.int32)
    logits = tf.cast(logits, tf.float32)
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
    if weights is None:
        return {"loss": tf.reduce_sum(loss), "weight": tf.cast(tf.shape(logits)[0], tf.float32),
                "accuracy": tf.reduce_sum(correct)}
    weights = tf.cast(weights, tf.float32)
    return {"loss": tf.reduce_sum(weights * loss), "weight": tf.reduce_sum(weights),
            "accuracy": tf.reduce_sum(weights * correct)}


def soft_target_loss_sums(teacher_logits, student_logits, temperature, mask=None):
    """Knowledge distillation's soft-target loss (Hinton et al. 2015), summed over the positions ``mask`` keeps.

    Per position, with ``p = softmax(z_t / T)`` (the teacher's soft targets) and ``q = softmax(z_s / T)``::

        T² · KL(p ‖ q) = T² · Σ_c p_c (log p_c − log q_c)

    The T² keeps the soft term's gradient on the scale of the hard labels' as T changes (its gradient in z_s is
    ``T (q − p)``, which is ``1/T²`` of the T² factor's).
    Args: logits ``(..., C)`` (any float dtype; float32 inside), ``temperature`` > 0, ``mask`` ``(...)``
    (1 = counts; default: every position).
    Returns ``(sum, count)``: the loss summed over the kept positions and their number (float32 scalars).
    """
    teacher_logits = tf.cast(teacher_logits, tf.float32) / temperature
    student_logits = tf.cast(student_logits, tf.float32) / temperature
    log_p = tf.nn.log_softmax(teacher_logits, axis=-1)
    log_q = tf.nn.log_softmax(student_logits, axis=-1)
    per_position = (temperature ** 2) * tf.reduce_sum(tf.exp(log_p) * (log_p - log_q), axis=-1)
    if mask is None:
        mask = tf.ones_like(per_position)
    mask = tf.cast(mask, tf.float32)
    return tf.reduce_sum(per_position * mask), tf.reduce_sum(mask)


def masked_mse_sums(predictions, targets, mask):
    """Squared errors summed over the elements ``mask`` keeps, and their number: ``(Σ m·(a − b)², Σ m)`` where the
    mask broadcasts against ``predictions``/``targets`` and counts every element it covers (float32)."""
    error = tf.square(tf.cast(predictions, tf.float32) - tf.cast(targets, tf.float32))
    mask = tf.broadcast_to(tf.cast(mask, tf.float32), tf.shape(error))
    return tf.reduce_sum(error * mask), tf.reduce_sum(mask)
