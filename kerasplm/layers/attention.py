"""Scaled dot-product and multi-head attention ("Attention is all you need", section 3.2).

Masks follow :mod:`kerasplm.layers.masks`: 1.0 marks a key that must get zero weight.
Under a mixed precision policy the logits, mask and softmax are computed in float32.
"""
import keras
import tensorflow as tf

NEG_INF = -1e9


def scaled_dot_product_attention(q, k, v, mask=None):
    """Attention(Q, K, V) = softmax(Q Kᵀ / sqrt(d_k) + mask · -1e9) V   (paper eq. 1).

    Args:
      q: ``(..., seq_len_q, depth)``.
      k: ``(..., seq_len_k, depth)``.
      v: ``(..., seq_len_k, depth_v)``.
      mask: float, broadcastable to ``(..., seq_len_q, seq_len_k)``; 1.0 = masked. Optional.
    Returns:
      ``(output, attention_weights)``: ``(..., seq_len_q, depth_v)`` in v's dtype and float32
      ``(..., seq_len_q, seq_len_k)`` weights that sum to 1 over the keys.
    """
    matmul_qk = tf.matmul(q, k, transpose_b=True)
    dk = tf.cast(tf.shape(k)[-1], tf.float32)
    scaled_attention_logits = tf.cast(matmul_qk, tf.float32) / tf.math.sqrt(dk)
    if mask is not None:
        scaled_attention_logits += tf.cast(mask, tf.float32) * NEG_INF
    attention_weights = tf.nn.softmax(scaled_attention_logits, axis=-1)
    output = tf.matmul(tf.cast(attention_weights, v.dtype), v)
    return output, attention_weights


@keras.saving.register_keras_serializable(package="kerasplm")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention with the seed's interface: ``call(v, k, q, mask) -> (output, weights)``.

    The fourth argument is named ``attention_mask`` (Keras 3 reserves ``mask`` for its implicit masking).

    MultiHead(Q, K, V) = Concat(head_1..head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The projections are exposed separately (``project_q``, ``project_kv``, ``attend``) so that decoding
    can project keys/values once (cross-attention) or one step at a time into a cache.

    Args:
      d_model: model width; must be divisible by ``num_heads``.
      num_heads: number of heads h; each has depth d_model / h.
    Call shapes:
      v, k: ``(batch, seq_len_k, d_model)``; q: ``(batch, seq_len_q, d_model)``.
      Returns ``(batch, seq_len_q, d_model)`` and weights ``(batch, num_heads, seq_len_q, seq_len_k)``.
    """

    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(**kwargs)
        if num_heads <= 0 or d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.d_model = d_model
        self.depth = d_model // num_heads
        self.wq = keras.layers.Dense(d_model, name="wq")
        self.wk = keras.layers.Dense(d_model, name="wk")
        self.wv = keras.layers.Dense(d_model, name="wv")
        self.dense = keras.layers.Dense(d_model, name="dense")

    def build(self, input_shape=None):
        shape = (None, None, self.d_model)
        for layer in (self.wq, self.wk, self.wv):
            layer.build(shape)
        self.dense.build(shape)
        self.built = True

    def split_heads(self, x, batch_size):
        """``(batch, seq, d_model)`` -> ``(batch, num_heads, seq, depth)``."""
        x = tf.reshape(x, (batch_size, -1, self.num_heads, self.depth))
        return tf.transpose(x, perm=[0, 2, 1, 3])

    def project_q(self, q):
        return self.split_heads(self.wq(q), tf.shape(q)[0])

    def project_kv(self, k, v):
        """Keys and values split into heads: two ``(batch, num_heads, seq_len_k, depth)`` tensors."""
        batch_size = tf.shape(k)[0]
        return self.split_heads(self.wk(k), batch_size), self.split_heads(self.wv(v), batch_size)

    def attend(self, q_heads, k_heads, v_heads, mask=None):
        """Attention over already projected heads, then concat and output projection W^O."""
        batch_size = tf.shape(q_heads)[0]
        scaled_attention, attention_weights = scaled_dot_product_attention(q_heads, k_heads, v_heads, mask)
        scaled_attention = tf.transpose(scaled_attention, perm=[0, 2, 1, 3])
        concat_attention = tf.reshape(scaled_attention, (batch_size, -1, self.d_model))
        return self.dense(concat_attention), attention_weights

    def call(self, v, k, q, attention_mask=None):
        k_heads, v_heads = self.project_kv(k, v)
        return self.attend(self.project_q(q), k_heads, v_heads, attention_mask)

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads}
