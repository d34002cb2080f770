"""A linear-chain conditional random field (Lafferty, McCallum & Pereira 2001) over per-position tag scores.

For emission scores ``e_t[k]`` (e.g. a tagger's logits), a tag sequence ``y_1 … y_n`` scores

    s(y) = start[y_1] + Σ_t e_t[y_t] + Σ_{t=2..n} A[y_{t-1}, y_t] + end[y_n]

and ``log p(y | x) = s(y) − log Z`` with ``log Z = log Σ_y' exp s(y')``, computed by the forward algorithm in
log space (``α_t[k] = e_t[k] + logsumexp_j(α_{t-1}[j] + A[j, k])``). Viterbi decoding is the same recursion with
max in place of logsumexp, plus back-pointers. Tag marginals ``p(y_t = k | x)`` are ``∂ log Z / ∂ e_t[k]``.

Masking: ``mask`` ``(batch, T)`` is 1 for real positions, which come first in each row (padding after them);
padded positions change no score (the recursions carry the last real state through them), decode to tag 0
and have marginal 0. A row without real positions has ``log Z = s(y) = 0``.

Everything is TensorFlow ops (``tf.scan`` over time, static shapes): it runs in a SavedModel and under XLA.
"""
import keras
import tensorflow as tf

__all__ = ["CRF"]


@keras.saving.register_keras_serializable(package="kerasplm")
class CRF(keras.layers.Layer):
    """Transition scores ``A`` ``(num_tags, num_tags)`` (from row tag to column tag), ``start`` and ``end``
    ``(num_tags,)``, all initialized to 0. ``call(emissions, padding_mask)`` is Viterbi decoding."""

    def __init__(self, num_tags, **kwargs):
        super().__init__(**kwargs)
        if isinstance(num_tags, bool) or not isinstance(num_tags, int) or num_tags < 1:
            raise ValueError(f"num_tags must be a positive integer, got {num_tags!r}")
        self.num_tags = num_tags

    def build(self, input_shape=None):
        k = self.num_tags
        self.transitions = self.add_weight(shape=(k, k), initializer="zeros", name="transitions")
        self.start_transitions = self.add_weight(shape=(k,), initializer="zeros", name="start_transitions")
        self.end_transitions = self.add_weight(shape=(k,), initializer="zeros", name="end_transitions")
        self.built = True

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _prepare(emissions, mask):
        emissions = tf.cast(emissions, tf.float32)
        if mask is None:
            mask = tf.ones(tf.shape(emissions)[:2], tf.bool)
        mask = tf.cast(mask, tf.bool)
        return emissions, mask, tf.reduce_any(mask, axis=1)

    def _weights(self):
        return (tf.cast(self.transitions, tf.float32), tf.cast(self.start_transitions, tf.float32),
                tf.cast(self.end_transitions, tf.float32))

    @staticmethod
    def _time_major(emissions, mask):
        """Positions 1 … T-1, time first: ``(T-1, batch, K)`` and ``(T-1, batch, 1)``."""
        return tf.transpose(emissions[:, 1:], [1, 0, 2]), tf.transpose(mask[:, 1:])[:, :, tf.newaxis]

    # ------------------------------------------------------------------ scores
    def log_partition(self, emissions, mask=None):
        """``log Z`` ``(batch,)`` of ``emissions`` ``(batch, T, K)`` by the forward algorithm."""
        emissions, mask, nonempty = self._prepare(emissions, mask)
        transitions, start, end = self._weights()

        def forward(alpha, step):
            emission, real = step
            scores = alpha[:, :, tf.newaxis] + transitions[tf.newaxis] + emission[:, tf.newaxis, :]
            return tf.where(real, tf.reduce_logsumexp(scores, axis=1), alpha)

        alpha = tf.foldl(forward, self._time_major(emissions, mask), initializer=start + emissions[:, 0])
        return tf.where(nonempty, tf.reduce_logsumexp(alpha + end, axis=1), 0.0)

    def sequence_score(self, emissions, tags, mask=None):
        """``s(y)`` ``(batch,)`` of the int ``tags`` ``(batch, T)`` (padded positions ignored)."""
        emissions, mask, nonempty = self._prepare(emissions, mask)
        transitions, start, end = self._weights()
        tags = tf.cast(tags, tf.int32)
        real = tf.cast(mask, tf.float32)
        emitted = tf.reduce_sum(tf.gather(emissions, tags, batch_dims=2) * real, axis=1)
        pairs = tf.stack([tags[:, :-1], tags[:, 1:]], axis=-1)                     # (batch, T-1, 2)
        moved = tf.reduce_sum(tf.gather_nd(transitions, pairs) * real[:, 1:], axis=1)
        last = tf.maximum(tf.reduce_sum(tf.cast(mask, tf.int32), axis=1) - 1, 0)
        boundary = tf.gather(start, tags[:, 0]) + tf.gather(end, tf.gather(tags, last, batch_dims=1))
        return emitted + moved + tf.where(nonempty, boundary, 0.0)

    def log_likelihood(self, emissions, tags, mask=None):
        """``log p(tags | emissions)`` ``(batch,)``."""
        return self.sequence_score(emissions, tags, mask) - self.log_partition(emissions, mask)

    def marginals(self, emissions, mask=None):
        """``p(y_t = k | x)`` ``(batch, T, K)`` as the gradient of ``log Z`` (0 at padded positions)."""
        emissions = tf.cast(emissions, tf.float32)
        with tf.GradientTape() as tape:
            tape.watch(emissions)
            log_z = self.log_partition(emissions, mask)
        return tape.gradient(log_z, emissions)

    # ------------------------------------------------------------------ decoding
    def viterbi_decode(self, emissions, mask=None):
        """The highest-scoring tags ``(batch, T)`` int32 (0 at padded positions) and their score ``(batch,)``."""
        emissions, mask, nonempty = self._prepare(emissions, mask)
        transitions, start, end = self._weights()
        num_tags = tf.shape(emissions)[2]
        stay = tf.range(num_tags)[tf.newaxis]                 # back-pointer of a padded position: itself

        def forward(carry, step):
            delta, _ = carry
            emission, real = step
            scores = delta[:, :, tf.newaxis] + transitions[tf.newaxis]             # (batch, from, to)
            best = tf.reduce_max(scores, axis=1) + emission
            pointer = tf.argmax(scores, axis=1, output_type=tf.int32)
            return tf.where(real, best, delta), tf.where(real, pointer, stay)

        delta0 = start + emissions[:, 0]
        deltas, pointers = tf.scan(forward, self._time_major(emissions, mask),
                                   initializer=(delta0, tf.zeros_like(delta0, tf.int32)))
        final = tf.concat([delta0[tf.newaxis], deltas], axis=0)[-1] + end
        last_tag = tf.argmax(final, axis=1, output_type=tf.int32)

        def backward(tag, pointer):
            return tf.gather(pointer, tag, batch_dims=1)

        earlier = tf.scan(backward, pointers, initializer=last_tag, reverse=True)    # tags at 0 … T-2
        tags = tf.transpose(tf.concat([earlier, last_tag[tf.newaxis]], axis=0))
        tags = tf.where(mask, tags, 0)
        return tags, tf.where(nonempty, tf.reduce_max(final, axis=1), 0.0)

    def call(self, emissions, padding_mask=None):
        return self.viterbi_decode(emissions, padding_mask)[0]

    def get_config(self):
        return {**super().get_config(), "num_tags": self.num_tags}
