"""Dropout whose random draw is cheap: Philox named explicitly, two mask entries per 32-bit draw.

Two costs of ``keras.layers.Dropout`` on the TensorFlow backend, both in the random draw:

- It calls ``tf.nn.experimental.stateless_dropout`` with ``rng_alg="auto_select"``. Outside XLA the CPU
  and GPU kernels resolve that to Philox, but inside an XLA cluster on CPU it lowers to a generator that
  is about 100x slower (measured: 73 ms against 0.65 ms for one 64x40x128 mask), which made an
  XLA-compiled training step spend ~40% of its time drawing dropout masks. We name Philox.
- It draws one 32-bit float per entry. A keep/drop decision needs far fewer bits: we split each 32-bit
  Philox output into two 16-bit draws, which halves the generator's work (a 32x4x128x128 attention-probability
  mask: 8 ms against 13 ms on the 2-core test machine, benchmarks/RESULTS.md). An entry is dropped when its
  16-bit draw u satisfies u < t = round(rate * 2^16), so the dropout probability is t / 2^16, within
  2^-17 of ``rate`` (0.1 -> 0.100006); kept entries are scaled by 2^16 / (2^16 - t), which keeps E[y] = x
  exactly.
"""
import keras
import tensorflow as tf

__all__ = ["Dropout", "inverted_dropout"]

_LEVELS = 1 << 16   # values of one 16-bit draw


def inverted_dropout(x, rate, seed):
    """y = x * m * 2^16 / (2^16 - t), m ~ Bernoulli(1 - t / 2^16), t = round(rate * 2^16); any shape.

    ``seed``: int32 tensor of shape [2] (stateless: the same seed gives the same mask).
    """
    threshold = int(round(rate * _LEVELS))
    if threshold == 0:
        return x
    if threshold >= _LEVELS:
        return tf.zeros_like(x)
    size = tf.size(x)
    words = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None, maxval=None, dtype=tf.uint32,
                                        alg="philox")
    draws = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]     # two 16-bit draws per 32-bit word
    keep = tf.reshape(draws >= threshold, tf.shape(x))
    scale = tf.constant(_LEVELS / (_LEVELS - threshold), x.dtype)
    return tf.where(keep, x * scale, tf.zeros_like(x))


@keras.saving.register_keras_serializable(package="kerasplm")
class Dropout(keras.layers.Dropout):
    """Inverted dropout (Srivastava et al., 2014): y = x * m / (1 - rate), m ~ Bernoulli(1 - rate), with the
    rate resolved to 2^-16 (:func:`inverted_dropout`).

    Same arguments, seed handling and config as ``keras.layers.Dropout``; on the TensorFlow backend the mask
    comes from :func:`inverted_dropout`. Shape: any, unchanged.

    >>> layer = Dropout(0.5, seed=1)
    >>> y = layer(tf.ones([2, 4]), training=True)   # entries are 0.0 or 2.0
    """

    def call(self, inputs, training=False):
        if not (training and self.rate > 0) or self.noise_shape is not None or (
            keras.backend.backend() != "tensorflow"
        ):
            return super().call(inputs, training=training)
        seed = self.seed_generator.next()
        if seed.dtype != tf.int32:  # stateless ops want int32 seeds (as keras' own _cast_seed does)
            seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        return inverted_dropout(inputs, self.rate, seed)
