"""Transformer blocks ("Attention is all you need", section 3.1), configurable for the model families.

``EncoderLayer`` (self-attention + feed-forward) and ``DecoderLayer`` (masked self-attention, optional
cross-attention, feed-forward) keep the seed's names, call signatures and weight layout; their
defaults are the seed's configuration: post-LN, ReLU, layer-norm epsilon 1e-6, no attention dropout,
Glorot-uniform kernels. The options cover the other families:

==================  ==========================  ===================================================
option              seed (Transformer)          others
==================  ==========================  ===================================================
normalize_first     False: post-LN              True: pre-LN (GPT-2), then a final LayerNorm
                    LN(x + Drop(F(x)))          in the backbone: x + Drop(F(LN(x)))
activation          "relu"                      "gelu" (exact erf: BERT), "gelu_tanh" (GPT-2)
layer_norm_epsilon  1e-6                        1e-12 (BERT), 1e-5 (GPT-2)
attention_dropout   0.0                         0.1 (BERT, GPT): dropout on attention probabilities
kernel_initializer  "glorot_uniform"            TruncatedNormal(stddev=0.02) (BERT, GPT)
cross_attention     True (DecoderLayer)         False: decoder-only blocks (GPT)
==================  ==========================  ===================================================

Incremental decoding uses ``DecoderLayer.call_with_cache`` (several new positions at once against a
fixed-size key/value cache, :meth:`MultiHeadAttention.call_with_cache`); ``decode_step`` is the seed
translator's one-position form of it.
"""
import keras
import tensorflow as tf

from kerasplm.layers.attention import MultiHeadAttention, clone_initializer, write_cache
from kerasplm.layers.dropout import Dropout


def write_cache_step(cache, new, step):
    """Writes one position of a fixed-size key/value cache (``write_cache`` with n = 1; see there for
    why it is a one-hot blend). ``cache (batch, heads, max_len, depth)``, ``new (batch, heads, 1, depth)``."""
    return write_cache(cache, new, step)


@keras.saving.register_keras_serializable(package="kerasplm")
def gelu_tanh(x):
    """GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))."""
    return keras.activations.gelu(x, approximate=True)


@keras.saving.register_keras_serializable(package="kerasplm")
@tf.custom_gradient
def gelu(x):
    """GELU, exact (BERT): x Φ(x) = 0.5 x (1 + erf(x / sqrt(2))), Φ the standard normal CDF.

    The gradient is written out, d/dx x Φ(x) = Φ(x) + x φ(x) (φ the normal density), reusing the forward
    Φ(x): autodiff through erf takes ~40% longer on CPU (no fusion outside XLA), a few % of a BERT step.
    """
    cdf = 0.5 * tf.math.erfc(x * -0.7071067811865476)          # Φ(x) = erfc(-x / sqrt(2)) / 2

    def grad(dy):
        return dy * (cdf + x * (tf.exp(-0.5 * tf.square(x)) * 0.3989422804014327))   # φ(x) = e^(-x²/2) / sqrt(2π)

    return x * cdf, grad


ACTIVATIONS = {"relu": "relu", "gelu": gelu, "gelu_tanh": gelu_tanh}


def get_activation(name):
    """The feed-forward activation called ``name``: one of ``ACTIVATIONS`` ("relu", "gelu", "gelu_tanh")."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def point_wise_feed_forward_network(d_model, dff, name=None, activation="relu", kernel_initializer="glorot_uniform"):
    """FFN(x) = act(x W1 + b1) W2 + b2  (paper eq. 2, act = ReLU): ``(..., d_model) -> (..., d_model)``."""
    return keras.Sequential(
        [keras.layers.Dense(dff, activation=get_activation(activation), name="dense_1",
                            kernel_initializer=clone_initializer(kernel_initializer)),
         keras.layers.Dense(d_model, kernel_initializer=clone_initializer(kernel_initializer), name="dense_2")],
        name=name,
    )


def residual(x, sublayer, norm, dropout, normalize_first, training):
    """One residual sub-layer: post-LN ``LN(x + Drop(F(x)))`` or pre-LN ``x + Drop(F(LN(x)))``.

    ``sublayer(h) -> (F(h), extra)`` (extra: e.g. attention weights, passed through).
    Returns ``(output, extra)``.
    """
    y, extra = sublayer(norm(x) if normalize_first else x)
    y = dropout(y, training=training)
    return (x + y if normalize_first else norm(x + y)), extra


class _BlockOptions:
    """Constructor options shared by both blocks (stored, validated, serialized in one place)."""

    def _set_options(self, d_model, num_heads, dff, rate, normalize_first, activation, layer_norm_epsilon,
                     attention_dropout, kernel_initializer):
        get_activation(activation)  # validates the name
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        self.d_model, self.num_heads, self.dff, self.rate = d_model, num_heads, dff, rate
        self.normalize_first, self.activation = bool(normalize_first), activation
        self.layer_norm_epsilon, self.attention_dropout = layer_norm_epsilon, attention_dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def _attention(self, name):
        return MultiHeadAttention(self.d_model, self.num_heads, dropout=self.attention_dropout,
                                  kernel_initializer=self.kernel_initializer, name=name)

    def _ffn(self):
        return point_wise_feed_forward_network(self.d_model, self.dff, name="ffn", activation=self.activation,
                                               kernel_initializer=self.kernel_initializer)

    def _norm(self, name):
        return keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name=name)

    def _residual(self, x, sublayer, norm, dropout, training):
        return residual(x, sublayer, norm, dropout, self.normalize_first, training)

    def _options_config(self):
        return {"d_model": self.d_model, "num_heads": self.num_heads, "dff": self.dff, "rate": self.rate,
                "normalize_first": self.normalize_first, "activation": self.activation,
                "layer_norm_epsilon": self.layer_norm_epsilon, "attention_dropout": self.attention_dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer)}


@keras.saving.register_keras_serializable(package="kerasplm")
class EncoderLayer(_BlockOptions, keras.layers.Layer):
    """Self-attention + feed-forward, each a residual sub-layer with dropout and LayerNorm.

    Call: ``x (batch, seq_len, d_model), training, padding_mask`` (any mask broadcastable to
    ``(batch, heads, seq_len, seq_len)``, e.g. ``(batch, 1, 1, seq_len)``) -> ``(batch, seq_len, d_model)``.
    (The seed calls the mask ``mask``; Keras reserves that name for its implicit masking, hence
    ``padding_mask``; Keras 3 also wants ``training`` and masks as keywords.)

    Args: ``d_model, num_heads, dff, rate`` as in the seed, then the options of the module docstring.
    """

    def __init__(self, d_model, num_heads, dff, rate=0.1, *, normalize_first=False, activation="relu",
                 layer_norm_epsilon=1e-6, attention_dropout=0.0, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self._set_options(d_model, num_heads, dff, rate, normalize_first, activation, layer_norm_epsilon,
                          attention_dropout, kernel_initializer)
        self.mha = self._attention("mha")
        self.ffn = self._ffn()
        self.layernorm1 = self._norm("layernorm1")
        self.layernorm2 = self._norm("layernorm2")
        self.dropout1 = Dropout(rate)
        self.dropout2 = Dropout(rate)

    def build(self, input_shape=None):
        shape = (None, None, self.d_model)
        self.mha.build(shape)
        self.ffn.build(shape)
        self.layernorm1.build(shape)
        self.layernorm2.build(shape)
        self.built = True

    def call(self, x, training=None, padding_mask=None, return_attention=False, queries=None):
        """``return_attention=True`` -> ``(output, weights (batch, heads, seq_len, seq_len))`` (BERT's
        ``output_attentions``); otherwise the output alone (the seed's call).

        ``queries (batch, n, d_model)``: compute the block's output only for these rows (e.g. some rows of
        ``x`` gathered at chosen positions), attending over all of ``x``; the output is then
        ``(batch, n, d_model)`` and the weights ``(batch, heads, n, seq_len)``. Every sub-layer but the
        keys/values is row-wise, so row i of the result equals row i of the full call at the same position.
        """
        def attend(h):
            if queries is None:
                return self.mha(h, h, h, padding_mask, training=training)
            # Keys/values still come from every row of x (through the first LayerNorm when pre-LN).
            keys = self.layernorm1(x) if self.normalize_first else x
            return self.mha(keys, keys, h, padding_mask, training=training)

        x, weights = self._residual(x if queries is None else queries, attend, self.layernorm1, self.dropout1,
                                    training)
        x, _ = self._residual(x, lambda h: (self.ffn(h), None), self.layernorm2, self.dropout2, training)
        return (x, weights) if return_attention else x

    def get_config(self):
        return {**super().get_config(), **self._options_config()}


@keras.saving.register_keras_serializable(package="kerasplm")
class DecoderLayer(_BlockOptions, keras.layers.Layer):
    """Masked self-attention, cross-attention over the encoder output (optional), feed-forward.

    Call: ``x (batch, tar_len, d_model), enc_output (batch, inp_len, d_model), training,
    look_ahead_mask (batch, 1, tar_len, tar_len), padding_mask (batch, 1, 1, inp_len)``
    -> ``(out (batch, tar_len, d_model), self-attention weights (batch, heads, tar_len, tar_len),
    cross-attention weights (batch, heads, tar_len, inp_len))``.

    With ``cross_attention=False`` (decoder-only models) there is no ``mha2``/``layernorm2``;
    ``enc_output`` must be None and the cross-attention weights returned are None.
    Args: ``d_model, num_heads, dff, rate`` as in the seed, then the options of the module docstring.
    """

    def __init__(self, d_model, num_heads, dff, rate=0.1, *, cross_attention=True, normalize_first=False,
                 activation="relu", layer_norm_epsilon=1e-6, attention_dropout=0.0,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self._set_options(d_model, num_heads, dff, rate, normalize_first, activation, layer_norm_epsilon,
                          attention_dropout, kernel_initializer)
        self.cross_attention = bool(cross_attention)
        self.mha1 = self._attention("mha1")
        if self.cross_attention:
            self.mha2 = self._attention("mha2")
        self.ffn = self._ffn()
        self.layernorm1 = self._norm("layernorm1")
        if self.cross_attention:
            self.layernorm2 = self._norm("layernorm2")
        self.layernorm3 = self._norm("layernorm3")
        self.dropout1 = Dropout(rate)
        self.dropout2 = Dropout(rate)
        self.dropout3 = Dropout(rate)

    def build(self, input_shape=None):
        shape = (None, None, self.d_model)
        self.mha1.build(shape)
        norms = [self.layernorm1, self.layernorm3]
        if self.cross_attention:
            self.mha2.build(shape)
            norms.insert(1, self.layernorm2)
        self.ffn.build(shape)
        for norm in norms:
            norm.build(shape)
        self.built = True

    def _sublayers(self, x, self_attend, cross_attend, training):
        """The block given its self- and cross-attention functions (full-sequence or cached)."""
        x, self_weights = self._residual(x, self_attend, self.layernorm1, self.dropout1, training)
        cross_weights = None
        if self.cross_attention:
            x, cross_weights = self._residual(x, cross_attend, self.layernorm2, self.dropout2, training)
        x, _ = self._residual(x, lambda h: (self.ffn(h), None), self.layernorm3, self.dropout3, training)
        return x, self_weights, cross_weights

    def _check_encoder_output(self, enc_output):
        if self.cross_attention and enc_output is None:
            raise ValueError("this DecoderLayer has cross-attention: pass the encoder output")
        if not self.cross_attention and enc_output is not None:
            raise ValueError("this DecoderLayer was built with cross_attention=False: enc_output must be None")

    def call(self, x, enc_output=None, training=None, look_ahead_mask=None, padding_mask=None):
        self._check_encoder_output(enc_output)

        def self_attend(h):
            return self.mha1(h, h, h, look_ahead_mask, training=training)

        def cross_attend(h):
            return self.mha2(enc_output, enc_output, h, padding_mask, training=training)

        return self._sublayers(x, self_attend, cross_attend, training)

    def call_with_cache(self, x, cache, cache_index, cross_kv=None, padding_mask=None, self_attention_mask=None):
        """``call`` for the new positions ``cache_index .. cache_index + n - 1``, keys/values cached
        (inference: no dropout).

        Args:
          x: ``(batch, n, d_model)``.
          cache: self-attention ``(k, v)``, each ``(batch, num_heads, max_len, depth)``.
          cache_index: int32 scalar or ``(batch,)`` (see :func:`kerasplm.layers.attention.write_cache`).
          cross_kv: ``mha2.project_kv(enc_output, enc_output)``, computed once per source; None without
            cross-attention.
          padding_mask: cross-attention mask ``(batch, 1, 1, inp_len)``, 1.0 at padded source tokens.
          self_attention_mask: optional extra mask over cache slots (the causal mask is always applied).
        Returns:
          ``(out (batch, n, d_model), new cache, cross-attention weights (batch, heads, n, inp_len) or None)``.
        """
        self._check_encoder_output(None if cross_kv is None else cross_kv[0])
        new_cache = []

        def self_attend(h):
            out, weights, updated = self.mha1.call_with_cache(h, cache, cache_index, self_attention_mask)
            new_cache.append(updated)
            return out, weights

        def cross_attend(h):
            return self.mha2.attend(self.mha2.project_q(h), cross_kv[0], cross_kv[1], padding_mask)

        out, _, cross_weights = self._sublayers(x, self_attend, cross_attend, False)
        return out, new_cache[0], cross_weights

    def decode_step(self, x_t, cache_k, cache_v, step, cross_k, cross_v, padding_mask=None):
        """The seed translator's single-position form of ``call_with_cache``.

        ``x_t (batch, 1, d_model)`` at position ``step`` -> ``(out_t (batch, 1, d_model), new_cache_k,
        new_cache_v, cross-attention weights (batch, num_heads, 1, inp_len))``.
        """
        out, (cache_k, cache_v), weights = self.call_with_cache(x_t, (cache_k, cache_v), step, (cross_k, cross_v),
                                                                padding_mask)
        return out, cache_k, cache_v, weights

    def get_config(self):
        return {**super().get_config(), **self._options_config(), "cross_attention": self.cross_attention}
