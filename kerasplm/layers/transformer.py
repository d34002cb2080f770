"""Transformer blocks ("Attention is all you need", section 3.1), post-LN as in the paper and the seed.

Each sub-layer is wrapped as LayerNorm(x + Dropout(Sublayer(x))).
"""
import keras

from kerasplm.layers.attention import MultiHeadAttention


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
        self.dropout1 = keras.layers.Dropout(rate)
        self.dropout2 = keras.layers.Dropout(rate)

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
        self.dropout1 = keras.layers.Dropout(rate)
        self.dropout2 = keras.layers.Dropout(rate)
        self.dropout3 = keras.layers.Dropout(rate)

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

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads,
                "dff": self.dff, "rate": self.rate}
