"""A tiny token-to-token task shared by the training tests (and their subprocess scripts)."""
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kerasplm.training import masked_accuracy_counts, masked_sparse_cross_entropy  # noqa: E402

VOCAB = 11


def make_arrays(num, length, seed=0):
    """x, y int32 [num, length]; tokens in [1, VOCAB), label = f(token), zero padding at the end."""
    rng = np.random.default_rng(seed)
    x = rng.integers(1, VOCAB, size=(num, length)).astype(np.int32)
    lengths = rng.integers(max(1, length // 2), length + 1, size=num)
    x[np.arange(length)[None, :] >= lengths[:, None]] = 0
    y = np.where(x > 0, (x * 3 + 1) % (VOCAB - 1) + 1, 0).astype(np.int32)
    return x, y


def make_dataset(num=64, length=8, batch_size=8, seed=0, repeat=True):
    """Deterministic (seeded shuffle), re-iterable dataset of (x, y) global batches."""
    x, y = make_arrays(num, length, seed)
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.shuffle(num, seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=True)
    return ds.repeat() if repeat else ds


def make_model(dropout=0.1, width=32):
    return keras.Sequential([
        keras.Input((None,), dtype="int32"),
        keras.layers.Embedding(VOCAB, 16),
        keras.layers.Dense(width, activation="relu"),
        keras.layers.Dropout(dropout),
        keras.layers.Dense(VOCAB),
    ])


def compute_loss(model, batch, training):
    x, y = batch
    logits = model(x, training=training)
    loss_sum, num_tokens = masked_sparse_cross_entropy(y, logits)
    correct, _ = masked_accuracy_counts(y, logits)
    return {"loss": loss_sum, "weight": num_tokens, "accuracy": correct}


def weights(model):
    return [np.array(v) for v in model.trainable_variables]


def two_term_loss(model, batch, training, lam=0.5):
    """Two terms with different denominators: token cross-entropy over every real token, and
    lam * cross-entropy over the tokens with an even id only (a different count per batch)."""
    x, y = batch
    logits = model(x, training=training)
    token_sum, token_count = masked_sparse_cross_entropy(y, logits)
    even = tf.cast(x % 2 == 0, y.dtype) * y          # labels of even-id tokens; 0 (= padding) elsewhere
    even_sum, even_count = masked_sparse_cross_entropy(even, logits)
    correct, _ = masked_accuracy_counts(y, logits)
    return {"losses": {"token": (token_sum, token_count), "even": (even_sum, even_count, lam)},
            "accuracy": (correct, token_count)}


def two_term_reference(model, x, y, lam=0.5):
    """(objective, gradients, {reported means}) of the exact global objective on one device."""
    with tf.GradientTape() as tape:
        logits = model(x, training=False)
        token_sum, token_count = masked_sparse_cross_entropy(y, logits)
        even = tf.cast(x % 2 == 0, y.dtype) * y
        even_sum, even_count = masked_sparse_cross_entropy(even, logits)
        objective = token_sum / token_count + lam * even_sum / even_count
    grads = tape.gradient(objective, model.trainable_variables)
    correct, _ = masked_accuracy_counts(y, logits)
    means = {"loss": float(objective), "token_loss": float(token_sum / token_count),
             "even_loss": float(even_sum / even_count), "accuracy": float(correct / token_count)}
    return objective, grads, means


class LearnedPositions(keras.layers.Layer):
    """x + a learned row per position, looked up ONCE per batch (``table[:T]``, broadcast over the batch, as BERT's
    and GPT's position embeddings): each replica's gradient for a row is already summed over its examples."""

    def __init__(self, max_length=32, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def build(self, input_shape):
        self.table = self.add_weight(shape=(self.max_length, input_shape[-1]), initializer="random_normal",
                                     name="table")

    def call(self, x):
        return x + tf.gather(self.table, tf.range(tf.shape(x)[1]))[tf.newaxis]


def make_position_model(width=16):
    """The token-to-token toy with learned positions (its embedding gradients reach the optimizer as IndexedSlices)."""
    return keras.Sequential([
        keras.Input((None,), dtype="int32"),
        keras.layers.Embedding(VOCAB, width),
        LearnedPositions(),
        keras.layers.Dense(VOCAB),
    ])
