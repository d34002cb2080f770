"""Transformer blocks ("Attention is all you need", section 3.1), post-LN as in the paper and the seed.

Each sub-layer is wrapped as LayerNorm(x + Dropout(Sublayer(x))).
``DecoderLayer.decode_step`` is the incremental (one target position at a time, key/value cached) form of
``DecoderLayer.call`` used by :mod:`kerasplm.generation`.
"""
import keras
import tensorflow as tf

from kerasplm.layers.dropout import Dropout
from kerasplm.layers.attention import MultiHeadAttention


def write_cache_step(cache, new, step):
    """Writes one position of a fixed-size key/value cache; shapes stay static (XLA-friendly).

    Args:
      cache: ``(batch, num_heads, max_len, depth)``.
      new: ``(batch, num_heads, 1, depth)``: keys or values of the current position.
      step: int32 scalar, 0 <= step < max_len.
    Returns:
      ``cache`` with ``cache[:, :, step] = new[:, :, 0]``, as a one-hot blend
      ``cache · (1 - e_step) + new · e_step`` (e_step: one-hot over max_len). The blend is elementwise
      and fuses under XLA: greedy decoding of transformer_seed on CPU with XLA ran at 4.0k tokens/s
      (batch 1) vs 2.9k with ``tf.tensor_scatter_nd_update`` and 1.6k with XLA's dynamic_update_slice;
      without XLA the scatter was ~20% faster (and both far slower than with XLA).
    """
    onehot = tf.one_hot(step, tf.shape(cache)[2], dtype=cache.dtype)[:, tf.newaxis]  # (max_len, 1)
    return cache * (1 - onehot) + new * onehot


def point_wise_feed_forward_network(d_model, dff, name=None):
    """FFN(x) = max(0, x W1 + b1) W2 + b2  (paper eq. 2): ``(..., d_model) -> (..., d_model)``."""
    return keras.Sequential(
        [keras.layers.Dense(dff, activation="relu", name="dense_1"), keras.layers.Dense(d_model, name="dense_2")],
        name=name,
    )


@keras.saving.register_keras_serializable(package="kerasplm")
class EncoderLayer(keras.layers.Layer):
    """Self-attention + feed-forward, each with residual, dropout and post-LayerNorm.

    Call: ``x (batch, seq_len, d_model), training, padding_mask (batch, 1, 1, seq_len)``
    -> ``(batch, seq_len, d_model)``. (The seed calls the mask ``mask``; Keras reserves that name for its
    implicit masking, hence ``padding_mask``; Keras 3 also wants ``training`` and masks as keywords.)
    """

    def __init__(self, d_model, num_heads, dff, rate=0.1, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.num_heads, self.dff, self.rate = d_model, num_heads, dff, rate
        self.mha = MultiHeadAttention(d_model, num_heads, name="mha")
        self.ffn = point_wise_feed_forward_network(d_model, dff, name="ffn")
        self.layernorm1 = keras.layers.LayerNormalization(epsilon=1e-6, name="layernorm1")
        self.layernorm2 = keras.layers.LayerNormalization(epsilon=1e-6, name="layernorm2")
        self.dropout1 = Dropout(rate)
        self.dropout2 = Dropout(rate)

    def build(self, input_shape=None):
        shape = (None, None, self.d_model)
        self.mha.build(shape)
        self.ffn.build(shape)
        self.layernorm1.build(shape)
        self.layernorm2.build(shape)
        self.built = True

    def call(self, x, training=None, padding_mask=None):
        attn_output, _ = self.mha(x, x, x, padding_mask)
        attn_output = self.dropout1(attn_output, training=training)
        out1 = self.layernorm1(x + attn_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output, training=training)
        return self.layernorm2(out1 + ffn_output)

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads,
                "dff": self.dff, "rate": self.rate}


@keras.saving.register_keras_serializable(package="kerasplm")
class DecoderLayer(keras.layers.Layer):
    """Masked self-attention, cross-attention over the encoder output, feed-forward; post-LN.

    Call: ``x (batch, tar_len, d_model), enc_output (batch, inp_len, d_model), training,
    look_ahead_mask (batch, 1, tar_len, tar_len), padding_mask (batch, 1, 1, inp_len)``
    -> ``(out (batch, tar_len, d_model), self-attention weights (batch, heads, tar_len, tar_len),
    cross-attention weights (batch, heads, tar_len, inp_len))``.
    """

    def __init__(self, d_model, num_heads, dff, rate=0.1, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.num_heads, self.dff, self.rate = d_model, num_heads, dff, rate
        self.mha1 = MultiHeadAttention(d_model, num_heads, name="mha1")
        self.mha2 = MultiHeadAttention(d_model, num_heads, name="mha2")
        self.ffn = point_wise_feed_forward_network(d_model, dff, name="ffn")
        self.layernorm1 = keras.layers.LayerNormalization(epsilon=1e-6, name="layernorm1")
        self.layernorm2 = keras.layers.LayerNormalization(epsilon=1e-6, name="layernorm2")
        self.layernorm3 = keras.layers.LayerNormalization(epsilon=1e-6, name="layernorm3")
        self.dropout1 = Dropout(rate)
        self.dropout2 = Dropout(rate)
        self.dropout3 = Dropout(rate)

    def build(self, input_shape=None):
        shape = (None, None, self.d_model)
        self.mha1.build(shape)
        self.mha2.build(shape)
        self.ffn.build(shape)
        for norm in (self.layernorm1, self.layernorm2, self.layernorm3):
            norm.build(shape)
        self.built = True

    def call(self, x, enc_output, training=None, look_ahead_mask=None, padding_mask=None):
        attn1, attn_weights_block1 = self.mha1(x, x, x, look_ahead_mask)
        attn1 = self.dropout1(attn1, training=training)
        out1 = self.layernorm1(attn1 + x)
        attn2, attn_weights_block2 = self.mha2(enc_output, enc_output, out1, padding_mask)
        attn2 = self.dropout2(attn2, training=training)
        out2 = self.layernorm2(attn2 + out1)
        ffn_output = self.ffn(out2)
        ffn_output = self.dropout3(ffn_output, training=training)
        out3 = self.layernorm3(ffn_output + out2)
        return out3, attn_weights_block1, attn_weights_block2

    def decode_step(self, x_t, cache_k, cache_v, step, cross_k, cross_v, padding_mask=None):
        """``call`` for the single target position ``step``, with cached keys/values (inference: no dropout).

        Args:
          x_t: ``(batch, 1, d_model)``: the decoder input at position ``step``.
          cache_k, cache_v: ``(batch, num_heads, max_len, depth)`` self-attention keys/values of positions
            0..step-1 (later positions are ignored).
          step: int32 scalar position.
          cross_k, cross_v: ``(batch, num_heads, inp_len, depth)``: ``mha2.project_kv(enc_output, enc_output)``,
            computed once per source.
          padding_mask: ``(batch, 1, 1, inp_len)``, 1.0 at padded source tokens.
        Returns:
          ``(out_t (batch, 1, d_model), new_cache_k, new_cache_v,
          cross-attention weights (batch, num_heads, 1, inp_len))``; the new caches hold position ``step``.
        """
        q = self.mha1.project_q(x_t)
        k_t, v_t = self.mha1.project_kv(x_t, x_t)
        cache_k = write_cache_step(cache_k, k_t, step)
        cache_v = write_cache_step(cache_v, v_t, step)
        # Self-attention may see positions 0..step only: mask (1.0) every cache slot j > step.
        future = tf.cast(tf.range(tf.shape(cache_k)[2]) > step, tf.float32)[tf.newaxis, tf.newaxis, tf.newaxis]
        attn1, _ = self.mha1.attend(q, cache_k, cache_v, future)
        out1 = self.layernorm1(attn1 + x_t)
        attn2, cross_weights = self.mha2.attend(self.mha2.project_q(out1), cross_k, cross_v, padding_mask)
        out2 = self.layernorm2(attn2 + out1)
        out3 = self.layernorm3(self.ffn(out2) + out2)
        return out3, cache_k, cache_v, cross_weights

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads,
                "dff": self.dff, "rate": self.rate}
