"""Masked token losses and accuracy: padding positions (labels == pad_id) count nowhere.

Functions return SUMS and COUNTS so that callers (the Trainer, across replicas) can form exact means.
Shapes: labels [..., T] int, logits [..., T, V] (any float dtype; computed in float32).
"""
import keras
import tensorflow as tf

__all__ = [
    "masked_sparse_cross_entropy",
    "loss_function",
    "masked_accuracy_counts",
    "masked_accuracy",
    "MaskedSparseCategoricalCrossentropy",
    "MaskedAccuracy",
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
