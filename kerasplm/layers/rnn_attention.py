"""Attention of an RNN decoder over the encoder's states: additive (Bahdanau et al., 2015) and Luong et al.'s
(2015) dot and general scores, with the seed's masked softmax (seed 001_*, §3.2 ``masked_softmax`` and
``AdditiveAttention``).

For queries q (the decoder's previous top hidden state) and keys k_s = values v_s (the encoder's top-layer
outputs at source positions s):

    additive:  score(q, k_s) = w_vᵀ tanh(W_q q + W_k k_s)       (no biases: the seed's nn.Linear(bias=False))
    dot:       score(q, k_s) = qᵀ k_s                             (q and k of the same width)
    general:   score(q, k_s) = qᵀ W_a k_s
    α = masked_softmax(scores, mask),  context = Σ_s α_s v_s

The key side (W_k k_s, or W_a k_s) does not depend on the query: :meth:`AdditiveAttention.project_keys` computes
it once per source and :meth:`AdditiveAttention.attend` reuses it at every decoder step (the seed's loop
projects the keys again at each step). Masks follow :mod:`kerasplm.layers.masks`: 1.0 = may not attend.
"""
import keras
import tensorflow as tf

from kerasplm.layers.attention import clone_initializer
from kerasplm.layers.dropout import Dropout

SCORES = ("additive", "dot", "general")
# The seed's fill value for masked scores (``sequence_mask(..., value=-1e6)``): replaced, not added, so a
# masked position's weight is exactly exp(-1e6 - max) = 0 in float32 whatever its score.
MASKED_SCORE = -1e6


def masked_softmax(scores, mask=None):
    """Softmax over the last axis with masked positions excluded (the seed's ``masked_softmax``).

    Args:
      scores: float ``(..., S)``.
      mask: None, or float/bool broadcastable to ``scores``; 1.0 (True) = masked. The seed takes valid
        lengths instead: ``mask[b, s] = s >= valid_len[b]``.
    Returns:
      float32 ``(..., S)``: softmax(where(mask, -1e6, scores)). A row with every position masked gets uniform
      weights, as the seed's does.
    """
    scores = tf.cast(scores, tf.float32)
    if mask is not None:
        masked = tf.broadcast_to(tf.cast(mask, tf.bool), tf.shape(scores))
        scores = tf.where(masked, tf.constant(MASKED_SCORE, tf.float32), scores)
    return tf.nn.softmax(scores, axis=-1)


@keras.saving.register_keras_serializable(package="kerasplm")
class AdditiveAttention(keras.layers.Layer):
    """The seed's ``AdditiveAttention`` (Bahdanau), with Luong's ``dot`` and ``general`` scores as options.

    Args:
      units: width of the additive score's hidden layer (the seed's ``num_hiddens``); unused by dot/general.
      score: "additive" (default), "dot" or "general" (module docstring).
      dropout: dropout on the attention weights before they weight the values (the seed's ``self.dropout``);
        the returned weights are those before dropout.
      kernel_initializer: of W_q, W_k, w_v / W_a.

    Call: ``(queries (B, Tq, Dq), keys (B, S, Dk), values (B, S, Dv), padding_mask=None (B, S) or broadcastable
    to (B, Tq, S), 1.0 = masked)`` -> ``(context (B, Tq, Dv), weights float32 (B, Tq, S))``. Weights are built on
    the first call (Dq, Dk known then).
    """

    def __init__(self, units, score="additive", dropout=0.0, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if score not in SCORES:
            raise ValueError(f"attention score must be one of {', '.join(SCORES)}, got {score!r}")
        self.units, self.score, self.rate = int(units), score, float(dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        if self.score == "additive":
            self.W_q = self._dense(self.units, "W_q")
            self.W_k = self._dense(self.units, "W_k")
            self.w_v = self._dense(1, "w_v")
        elif self.score == "general":
            self.W_a = None   # (Dk, Dq): its output width is the query's, known in build
        self.dropout = Dropout(self.rate) if self.rate > 0 else None

    def _dense(self, units, name):
        return keras.layers.Dense(units, use_bias=False, name=name,
                                  kernel_initializer=clone_initializer(self.kernel_initializer))

    def build(self, queries_shape, keys_shape=None, values_shape=None):
        keys_shape = queries_shape if keys_shape is None else keys_shape
        dq, dk = int(queries_shape[-1]), int(keys_shape[-1])
        if self.score == "additive":
            self.W_q.build((None, dq))
            self.W_k.build((None, dk))
            self.w_v.build((None, self.units))
        elif self.score == "general":
            self.W_a = self._dense(dq, "W_a")
            self.W_a.build((None, dk))
        elif dq != dk:
            raise ValueError(f"dot attention needs queries and keys of one width, got {dq} and {dk}")
        self.built = True

    def project_keys(self, keys):
        """The query-independent part of the score, once per source: ``keys (B, S, Dk)`` -> W_k k (B, S, units)
        for additive, W_a k (B, S, Dq) for general, k itself for dot."""
        if self.score == "additive":
            return self.W_k(keys)
        if self.score == "general":
            return self.W_a(keys)
        return keys

    def scores(self, queries, projected_keys):
        """Unnormalized scores ``(B, Tq, S)`` of ``queries (B, Tq, Dq)`` against :meth:`project_keys`'s output."""
        if self.score == "additive":
            # (B, Tq, 1, units) + (B, 1, S, units): the seed's broadcast sum, then w_v squeezes the last axis.
            features = tf.tanh(self.W_q(queries)[:, :, tf.newaxis, :] + projected_keys[:, tf.newaxis, :, :])
            return tf.squeeze(self.w_v(features), -1)
        return tf.matmul(queries, projected_keys, transpose_b=True)

    def attend(self, queries, projected_keys, values, padding_mask=None, training=None):
        """``-> (context (B, Tq, Dv), weights float32 (B, Tq, S))`` from keys already projected
        (:meth:`project_keys`); ``padding_mask (B, S)`` (or broadcastable to (B, Tq, S)), 1.0 = masked."""
        scores = self.scores(queries, projected_keys)
        if padding_mask is not None and padding_mask.shape.rank == 2:
            padding_mask = padding_mask[:, tf.newaxis, :]
        weights = masked_softmax(scores, padding_mask)
        probs = weights if self.dropout is None else self.dropout(weights, training=training)
        return tf.matmul(tf.cast(probs, values.dtype), values), weights

    def call(self, queries, keys, values, padding_mask=None, training=None):
        return self.attend(queries, self.project_keys(keys), values, padding_mask=padding_mask, training=training)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "score": self.score, "dropout": self.rate,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer)}
