"""The regularizers of the AWD-LSTM (Merity, Keskar & Socher 2018, "Regularizing and Optimizing LSTM Language Models"):
dropout whose mask does not change along the sequence, and an LSTM whose recurrent weights are dropped.

* :class:`LockedDropout` (variational dropout, Gal & Ghahramani 2016): one Bernoulli mask per sequence and feature,
  the same at every time step: ``y[b, t, d] = x[b, t, d] · m[b, d] / (1 - p)``.
* :class:`EmbeddingDropout` (Gal & Ghahramani's word dropout on the embedding matrix): whole rows of the table
  (words) are dropped for a whole batch: ``E' = diag(m) E / (1 - p)``, ``m[v] ~ Bernoulli(1 - p)``, so a word dropped
  is dropped at every position it occurs.
* :class:`WeightDropLSTM` (DropConnect, Wan et al. 2013, on the hidden-to-hidden weights): one mask over the
  recurrent kernel ``U`` per call, used at every time step: ``U' = U ⊙ M / (1 - p)``.

Every mask is drawn from a stateless Philox stream (:func:`kerasplm.layers.dropout.inverted_dropout`) seeded by the
layer's ``keras.random.SeedGenerator`` (``seed``: same seed, same masks), in training only: at inference each layer
is the identity (the LSTM runs on ``U`` itself).
"""
import math

import keras
import tensorflow as tf

from kerasplm.layers.dropout import inverted_dropout

__all__ = ["LockedDropout", "EmbeddingDropout", "WeightDropLSTM", "lstm_scan"]


def _next_seed(generator):
    seed = generator.next()
    if seed.dtype != tf.int32:   # stateless ops want int32 seeds (as keras.layers.Dropout casts them)
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    return seed


class _MaskedDropout(keras.layers.Layer):
    """A dropout layer that draws its masks with its own seed generator."""

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"{type(self).__name__}: rate must be in [0, 1), got {rate}")
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}


@keras.saving.register_keras_serializable(package="kerasplm")
class LockedDropout(_MaskedDropout):
    """Variational ("locked") dropout: ``(batch, time, features)`` -> same shape, one mask ``(batch, 1, features)``
    shared by every time step (see the module docstring). :meth:`mask` draws the mask alone, for a caller that
    applies it to several pieces of one sequence (the chunks of BPT3C)."""

    @tf.autograph.experimental.do_not_convert
    def mask(self, batch, features, dtype=tf.float32):
        """A ``(batch, 1, features)`` mask of 0 and 1/(1 - p)."""
        return inverted_dropout(tf.ones(tf.stack([batch, 1, features]), dtype), self.rate,
                                _next_seed(self.seed_generator))

    @tf.autograph.experimental.do_not_convert
    def call(self, inputs, training=None):
        if not training or self.rate == 0:
            return inputs
        shape = tf.shape(inputs)
        return inputs * self.mask(shape[0], shape[2], inputs.dtype)


@keras.saving.register_keras_serializable(package="kerasplm")
class EmbeddingDropout(_MaskedDropout):
    """Drop whole rows (words) of an embedding table: ``table (vocab, width)`` -> the same shape with each row kept
    with probability 1 - p and scaled by 1/(1 - p), or zero (see the module docstring). Call it on the table, then
    look the ids up in what it returns."""

    @tf.autograph.experimental.do_not_convert
    def call(self, table, training=None):
        if not training or self.rate == 0:
            return table
        rows = inverted_dropout(tf.ones(tf.stack([tf.shape(table)[0], 1]), table.dtype), self.rate,
                                _next_seed(self.seed_generator))
        return table * rows


@tf.autograph.experimental.do_not_convert
def lstm_scan(projected_inputs, mask, state, recurrent_kernel):
    """Run an LSTM over time from ``state``, its input projection already made.

    Args:
      projected_inputs: ``(batch, time, 4H)`` = x_t W + b for every t (one matmul outside the loop), gates in the
        order i, f, g, o.
      mask: ``(batch, time)`` 1.0 for real positions, 0.0 for padding; at a padded position the state is carried
        unchanged, so a right-padded row's final state is its state after its last real token.
      state: ``(h, c)``, each ``(batch, H)``.
      recurrent_kernel: U ``(H, 4H)`` (DropConnect already applied in training).

    Per step: ``z = x_t W + b + h_{t-1} U``; ``i, f, o = σ(z_i), σ(z_f), σ(z_o)``, ``g = tanh(z_g)``;
    ``c_t = f ⊙ c_{t-1} + i ⊙ g``; ``h_t = o ⊙ tanh(c_t)``.

    Returns ``(outputs (batch, time, H), (h_T, c_T))``; ``outputs[:, t]`` is h_t (the carried h at padding).
    """
    def step(carry, inputs):
        h, c = carry
        z_x, m = inputs
        z = z_x + tf.matmul(h, recurrent_kernel)
        i, f, g, o = tf.split(z, 4, axis=-1)
        new_c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        new_h = tf.sigmoid(o) * tf.tanh(new_c)
        m = m[:, tf.newaxis]
        return m * new_h + (1.0 - m) * h, m * new_c + (1.0 - m) * c

    time_major = (tf.transpose(projected_inputs, [1, 0, 2]), tf.transpose(tf.cast(mask, projected_inputs.dtype)))
    hs, cs = tf.scan(step, time_major, initializer=tuple(state))
    return tf.transpose(hs, [1, 0, 2]), (hs[-1], cs[-1])


@keras.saving.register_keras_serializable(package="kerasplm")
class WeightDropLSTM(keras.layers.Layer):
    """An LSTM layer with DropConnect on its hidden-to-hidden weights (the AWD-LSTM's weight-dropped LSTM).

    Weights: ``kernel`` W ``(input_dim, 4H)``, ``recurrent_kernel`` U ``(H, 4H)``, ``bias`` b ``(4H,)``, gates i, f,
    g, o (PyTorch's order), drawn as PyTorch's ``nn.LSTM`` draws them: U(-1/√H, 1/√H).

    Call: ``inputs (batch, time, input_dim)``, ``padding_mask (batch, time)`` (1.0 real, 0.0 padding; default all real),
    ``initial_state`` ``(h, c)`` (default zeros) -> ``(outputs (batch, time, H), (h_T, c_T))``; equations in
    :func:`lstm_scan`. In training U is replaced by ``U ⊙ M / (1 - p)`` with one mask M per call.
    :meth:`recurrent_weights` and :meth:`run` split the two, so that a caller reading a long text in pieces
    (BPT3C) draws the mask once and uses it for every piece. The AWD-LSTM needs its own layer because Keras' LSTM
    gives no way to replace its recurrent kernel per call (the DropConnect mask), nor to keep one mask across pieces.
    """

    def __init__(self, units, weight_dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= weight_dropout < 1.0:
            raise ValueError(f"WeightDropLSTM: weight_dropout must be in [0, 1), got {weight_dropout}")
        self.units = int(units)
        self.weight_dropout = float(weight_dropout)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def build(self, input_shape):
        bound = 1.0 / math.sqrt(self.units)
        init = keras.initializers.RandomUniform(-bound, bound)
        self.kernel = self.add_weight(shape=(input_shape[-1], 4 * self.units), initializer=init, name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(self.units, 4 * self.units), initializer=init,
                                                name="recurrent_kernel")
        self.bias = self.add_weight(shape=(4 * self.units,), initializer=init, name="bias")
        self.built = True

    @tf.autograph.experimental.do_not_convert
    def recurrent_weights(self, training=None):
        """U, or in training U ⊙ M / (1 - p) with a fresh mask M."""
        kernel = tf.convert_to_tensor(self.recurrent_kernel)
        if not training or self.weight_dropout == 0:
            return kernel
        return inverted_dropout(kernel, self.weight_dropout, _next_seed(self.seed_generator))

    def zero_state(self, batch):
        zeros = tf.zeros(tf.stack([batch, self.units]), self.compute_dtype)
        return zeros, zeros

    @tf.autograph.experimental.do_not_convert
    def run(self, inputs, mask, state, recurrent_kernel):
        """The layer with a given (possibly dropped) U: see :func:`lstm_scan`."""
        projected = tf.matmul(inputs, self.kernel) + self.bias
        return lstm_scan(projected, mask, state, recurrent_kernel)

    @tf.autograph.experimental.do_not_convert
    def call(self, inputs, padding_mask=None, initial_state=None, training=None):
        if padding_mask is None:
            padding_mask = tf.ones(tf.shape(inputs)[:2], inputs.dtype)
        state = self.zero_state(tf.shape(inputs)[0]) if initial_state is None else initial_state
        return self.run(inputs, padding_mask, state, self.recurrent_weights(training))

    def get_config(self):
        return {**super().get_config(), "units": self.units, "weight_dropout": self.weight_dropout,
                "seed": self.seed}
