"""The seed's Transformer translator (Vaswani et al., 2017), as a Keras 3 model.

Names and semantics follow the seed (and the TensorFlow Transformer tutorial): ``Encoder``,
``Decoder`` and ``Transformer`` returning ``(logits, attention_weights)`` with attention weights keyed
``decoder_layer{i}_block1`` (masked self-attention) and ``decoder_layer{i}_block2`` (cross-attention).

Example:
>>> model = Transformer.from_preset("transformer_tiny", input_vocab_size=100, target_vocab_size=120)
>>> inp = tf.constant([[2, 5, 6, 3, 0]]); tar = tf.constant([[2, 7, 8]])
>>> logits, attention = model((inp, tar), training=False)
>>> logits.shape, attention["decoder_layer1_block2"].shape
(TensorShape([1, 3, 120]), TensorShape([1, 4, 3, 5]))
"""
import dataclasses

import keras
import tensorflow as tf

from kerasplm.layers.embedding import EmbeddingMixin
from kerasplm.layers.masks import create_masks, create_padding_mask
from kerasplm.layers.tracking import TracksLayerLists
from kerasplm.layers.transformer import DecoderLayer, EncoderLayer
from kerasplm.models.base import ConfigMixin
from kerasplm.models.presets import register_presets
from kerasplm.training.losses import fused_masked_cross_entropy


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of the translator; vocab sizes are filled in from the tokenizers.

    The field order is the seed's positional signature ``Transformer(num_layers, d_model, num_heads, dff,
    input_vocab_size, target_vocab_size, pe_input, pe_target, rate)``: ``Transformer`` maps positional
    arguments onto these fields in this order, so new fields go at the end.
    """

    num_layers: int
    d_model: int
    num_heads: int
    dff: int
    input_vocab_size: int = 0
    target_vocab_size: int = 0
    pe_input: int = 1000
    pe_target: int = 1000
    rate: float = 0.1
    # False: the seed's post-LN blocks. True: pre-LN blocks (Xiong et al., 2020) and a final LayerNorm
    # after each stack; they train stably at a higher learning rate (benchmarks/RESULTS.md, issue 10).
    normalize_first: bool = False

    def validate(self):
        for name in ("num_layers", "d_model", "num_heads", "dff", "input_vocab_size",
                     "target_vocab_size", "pe_input", "pe_target"):
            if getattr(self, name) <= 0:
                raise ValueError(f"TransformerConfig.{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}")
        if not 0.0 <= self.rate < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {self.rate}")
        return self


# Paper sizes (Table 3): base N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1; big d_model=1024,
# d_ff=4096, h=16, P_drop=0.3. "transformer_seed" is the seed's reduced model.
PRESETS = {
    "transformer_tiny": TransformerConfig(num_layers=2, d_model=32, num_heads=4, dff=64, rate=0.1),
    "transformer_seed": TransformerConfig(num_layers=4, d_model=128, num_heads=8, dff=512, rate=0.1),
    # The seed's sizes with pre-LN blocks (stable at a higher learning rate) and no dropout.
    "transformer_seed_prenorm": TransformerConfig(num_layers=4, d_model=128, num_heads=8, dff=512, rate=0.0,
                                                  normalize_first=True),
    # The main job's default, for runs of minutes on a CPU (issue 10, benchmarks/RESULTS.md): the seed's
    # width with 2 pre-LN layers per stack and no dropout. Half the layers make twice the updates in the
    # same time, and at 165 s on 2 cores it reaches held-out BLEU 28 where transformer_seed reaches 2.
    "transformer_quick": TransformerConfig(num_layers=2, d_model=128, num_heads=8, dff=512, rate=0.0,
                                           normalize_first=True),
    "transformer_base": TransformerConfig(num_layers=6, d_model=512, num_heads=8, dff=2048, rate=0.1),
    "transformer_big": TransformerConfig(num_layers=6, d_model=1024, num_heads=16, dff=4096, rate=0.3),
}


def get_preset(name, **overrides):
    """The ``TransformerConfig`` of a named translator preset with fields replaced by ``overrides``
    (the translator's own lookup; :func:`kerasplm.models.get_preset` searches every family)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; expected one of {sorted(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides)


def num_parameters(config):
    """Exact weight count of a ``Transformer`` of ``config`` (separate embeddings, untied output layer)."""
    d, f, n = config.d_model, config.dff, config.num_layers
    attention = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    final_norm = 2 * d if config.normalize_first else 0
    encoder = config.input_vocab_size * d + n * (attention + ffn + 2 * 2 * d) + final_norm
    decoder = config.target_vocab_size * d + n * (2 * attention + ffn + 3 * 2 * d) + final_norm
    return encoder + decoder + d * config.target_vocab_size + config.target_vocab_size


class _Embedder(TracksLayerLists, EmbeddingMixin, keras.layers.Layer):
    """The seed's embedding: token embedding · sqrt(d_model) + sinusoidal position encoding, then dropout
    (:class:`kerasplm.layers.EmbeddingMixin` in its seed configuration; the token table stays the
    attribute ``embedding``, so checkpoints keep their variable paths). With ``normalize_first`` (pre-LN
    blocks) the stack's output also goes through a final LayerNorm, ``final_layernorm``."""

    def __init__(self, vocab_size, d_model, maximum_position_encoding, rate, normalize_first=False, **kwargs):
        super().__init__(**kwargs)
        self._init_embedding(vocab_size, d_model, maximum_position_encoding, rate)
        self.normalize_first = bool(normalize_first)
        if self.normalize_first:
            self.final_layernorm = keras.layers.LayerNormalization(epsilon=1e-6, name="final_layernorm")

    def build(self, input_shape=None):
        self._build_embedding()
        if self.normalize_first:
            self.final_layernorm.build((None, None, self.d_model))
        self.built = True

    def _final_norm(self, x):
        """Pre-LN blocks leave their residual stream unnormalized: normalize it once at the end."""
        return self.final_layernorm(x) if self.normalize_first else x

    def _block_options(self):
        return {"normalize_first": self.normalize_first}


@keras.saving.register_keras_serializable(package="kerasplm")
class Encoder(_Embedder):
    """Embedding + positional encoding + ``num_layers`` EncoderLayers.

    Call: ``x (batch, inp_len) ids, training, padding_mask (batch, 1, 1, inp_len)``
    -> ``(batch, inp_len, d_model)``.
    """

    def __init__(self, num_layers, d_model, num_heads, dff, input_vocab_size, maximum_position_encoding,
                 rate=0.1, normalize_first=False, **kwargs):
        super().__init__(vocab_size=input_vocab_size, d_model=d_model,
                         maximum_position_encoding=maximum_position_encoding, rate=rate,
                         normalize_first=normalize_first, **kwargs)
        self.num_layers, self.num_heads, self.dff, self.rate = num_layers, num_heads, dff, rate
        self.input_vocab_size = input_vocab_size
        self.enc_layers = [EncoderLayer(d_model=d_model, num_heads=num_heads, dff=dff, rate=rate,
                                        name=f"encoder_layer{i + 1}",
                                        **self._block_options())
                           for i in range(num_layers)]

    def build(self, input_shape=None):
        super().build(input_shape)
        for layer in self.enc_layers:
            layer.build((None, None, self.d_model))

    def call(self, x, training=None, padding_mask=None):
        x = self.embed(x, training=training)
        for layer in self.enc_layers:
            x = layer(x, training=training, padding_mask=padding_mask)
        return self._final_norm(x)

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers, "d_model": self.d_model,
                "num_heads": self.num_heads, "dff": self.dff, "input_vocab_size": self.input_vocab_size,
                "maximum_position_encoding": self.maximum_position_encoding, "rate": self.rate,
                **self._block_options()}


@keras.saving.register_keras_serializable(package="kerasplm")
class Decoder(_Embedder):
    """Embedding + positional encoding + ``num_layers`` DecoderLayers.

    Call: ``x (batch, tar_len) ids, enc_output (batch, inp_len, d_model), training, look_ahead_mask,
    padding_mask`` -> ``((batch, tar_len, d_model), {"decoder_layer{i}_block1": ..., "..._block2": ...})``.
    """

    def __init__(self, num_layers, d_model, num_heads, dff, target_vocab_size, maximum_position_encoding,
                 rate=0.1, normalize_first=False, **kwargs):
        super().__init__(vocab_size=target_vocab_size, d_model=d_model,
                         maximum_position_encoding=maximum_position_encoding, rate=rate,
                         normalize_first=normalize_first, **kwargs)
        self.num_layers, self.num_heads, self.dff, self.rate = num_layers, num_heads, dff, rate
        self.target_vocab_size = target_vocab_size
        self.dec_layers = [DecoderLayer(d_model=d_model, num_heads=num_heads, dff=dff, rate=rate,
                                        name=f"decoder_layer{i + 1}",
                                        **self._block_options())
                           for i in range(num_layers)]

    def build(self, input_shape=None):
        super().build(input_shape)
        for layer in self.dec_layers:
            layer.build((None, None, self.d_model))

    def call(self, x, enc_output, training=None, look_ahead_mask=None, padding_mask=None):
        attention_weights = {}
        x = self.embed(x, training=training)
        for i, layer in enumerate(self.dec_layers):
            x, block1, block2 = layer(x, enc_output, training=training, look_ahead_mask=look_ahead_mask,
                                      padding_mask=padding_mask)
            attention_weights[f"decoder_layer{i + 1}_block1"] = block1
            attention_weights[f"decoder_layer{i + 1}_block2"] = block2
        return self._final_norm(x), attention_weights

    # ---- incremental decoding (kerasplm.generation) ----
    def init_cache(self, batch_size, max_length):
        """Empty self-attention cache: per layer ``(k, v)``, each ``(batch, num_heads, max_length, depth)``."""
        return [layer.mha1.init_cache(batch_size, max_length) for layer in self.dec_layers]

    def cross_attention_kv(self, enc_output):
        """Cross-attention keys/values of every layer, computed once per source:
        per layer ``(k, v)``, each ``(batch, num_heads, inp_len, depth)``."""
        return [layer.mha2.project_kv(enc_output, enc_output) for layer in self.dec_layers]

    def call_with_cache(self, ids, cache, cache_index, cross_kv, padding_mask=None):
        """The decoder at ``n`` new positions ``cache_index .. cache_index + n - 1`` (int32 scalar, or
        ``(batch,)`` per row): ``ids (batch, n)`` -> ``(out (batch, n, d_model), new cache,
        [cross-attention weights (batch, heads, n, inp_len) per layer])``. Equal to ``call`` on the whole
        prefix, restricted to the new positions."""
        cache_index = tf.convert_to_tensor(cache_index, tf.int32)
        offsets = tf.range(tf.shape(ids)[1])
        positions = cache_index[:, tf.newaxis] + offsets if cache_index.shape.rank == 1 else cache_index + offsets
        x = self.embed(ids, positions=positions, training=False)
        new_cache, cross_weights = [], []
        for layer, layer_cache, layer_cross_kv in zip(self.dec_layers, cache, cross_kv):
            x, layer_cache, w = layer.call_with_cache(x, layer_cache, cache_index, layer_cross_kv, padding_mask)
            new_cache.append(layer_cache)
            cross_weights.append(w)
        return self._final_norm(x), new_cache, cross_weights

    def decode_step(self, ids_t, step, cache, cross_kv, padding_mask=None):
        """The decoder at one position: ``ids_t (batch, 1)`` token at position ``step`` (int32 scalar)
        -> ``(out (batch, 1, d_model), new cache, [cross-attention weights (batch, heads, 1, inp_len)
        per layer])`` (``call_with_cache`` with n = 1)."""
        return self.call_with_cache(ids_t, cache, step, cross_kv, padding_mask)

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers, "d_model": self.d_model,
                "num_heads": self.num_heads, "dff": self.dff, "target_vocab_size": self.target_vocab_size,
                "maximum_position_encoding": self.maximum_position_encoding, "rate": self.rate,
                **self._block_options()}


@keras.saving.register_keras_serializable(package="kerasplm")
class Transformer(ConfigMixin, keras.Model):
    """Encoder-decoder Transformer: ``((inp, tar)) -> (logits, attention_weights)``.

    Args: the fields of :class:`TransformerConfig`, by keyword or by position in the dataclass' field
    order, which is the seed's: ``num_layers, d_model, num_heads, dff, input_vocab_size,
    target_vocab_size, pe_input, pe_target, rate``, then ``normalize_first`` (True builds pre-LN blocks
    with a final LayerNorm per stack instead of the seed's post-LN blocks); plus Keras' ``name`` etc.

    Call:
      inputs: ``(inp, tar)``: source ids ``(batch, inp_len)``, decoder input ids ``(batch, tar_len)``,
        padded with 0.
      training: dropout on/off.
      enc_padding_mask, look_ahead_mask, dec_padding_mask: the seed's masks; built from the ids with
        :func:`kerasplm.layers.create_masks` when omitted.
    Returns:
      float32 logits ``(batch, tar_len, target_vocab_size)`` and the attention-weights dict.

    ``model.compile(loss=MaskedSparseCategoricalCrossentropy())`` + ``model.fit`` works on a dataset of
    ``((inp, tar_inp), tar_real)``: the attention dict is dropped before the loss and metrics.

    In the family scheme (:mod:`kerasplm.models.base`) this is the translator *task* model (its encoder
    and decoder are the seed's, so it keeps the seed's call); like every task it owns its loss,
    ``compute_loss_sums`` (the Trainer's ``compute_loss`` is ``Task.trainer_loss`` or
    :func:`translation_loss`).
    """

    config_class = TransformerConfig
    preset_family = "transformer"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)   # ConfigMixin: self.config, mapped by field name
        c = self.config
        self.encoder = Encoder(num_layers=c.num_layers, d_model=c.d_model, num_heads=c.num_heads, dff=c.dff,
                               input_vocab_size=c.input_vocab_size, maximum_position_encoding=c.pe_input,
                               rate=c.rate, normalize_first=c.normalize_first, name="encoder")
        self.decoder = Decoder(num_layers=c.num_layers, d_model=c.d_model, num_heads=c.num_heads, dff=c.dff,
                               target_vocab_size=c.target_vocab_size, maximum_position_encoding=c.pe_target,
                               rate=c.rate, normalize_first=c.normalize_first, name="decoder")
        self.final_layer = keras.layers.Dense(c.target_vocab_size, name="final_layer")
        self.build()

    @classmethod
    def from_preset(cls, preset, input_vocab_size, target_vocab_size, **overrides):
        """A model of a named preset (see ``PRESETS``) for the given vocabulary sizes."""
        config = get_preset(preset, input_vocab_size=input_vocab_size, target_vocab_size=target_vocab_size,
                            **overrides)
        return cls.from_config_object(config, name=preset)

    @staticmethod
    def num_parameters(config):
        return num_parameters(config)

    def build(self, input_shape=None):
        self.encoder.build()
        self.decoder.build()
        self.final_layer.build((None, None, self.config.d_model))
        self.built = True

    def call(self, inputs, training=None, enc_padding_mask=None, look_ahead_mask=None, dec_padding_mask=None):
        dec_output, attention_weights = self.output_hidden(inputs, training, enc_padding_mask, look_ahead_mask,
                                                           dec_padding_mask)
        return tf.cast(self.final_layer(dec_output), tf.float32), attention_weights

    def output_hidden(self, inputs, training=None, enc_padding_mask=None, look_ahead_mask=None,
                      dec_padding_mask=None):
        """The call up to the output layer: ``(dec_output (batch, tar_len, d_model), attention_weights)``."""
        inp, tar = inputs
        if enc_padding_mask is None or look_ahead_mask is None or dec_padding_mask is None:
            masks = create_masks(inp, tar)
            enc_padding_mask = masks[0] if enc_padding_mask is None else enc_padding_mask
            look_ahead_mask = masks[1] if look_ahead_mask is None else look_ahead_mask
            dec_padding_mask = masks[2] if dec_padding_mask is None else dec_padding_mask
        enc_output = self.encoder(inp, training=training, padding_mask=enc_padding_mask)
        dec_output, attention_weights = self.decoder(tar, enc_output, training=training,
                                                     look_ahead_mask=look_ahead_mask,
                                                     padding_mask=dec_padding_mask)
        return dec_output, attention_weights

    # ---- incremental decoding (kerasplm.generation) ----
    def encode(self, inp, pad_id=0):
        """``inp (batch, inp_len)`` -> ``(enc_output (batch, inp_len, d_model), padding_mask (batch, 1, 1,
        inp_len))`` for decoding (no dropout)."""
        padding_mask = create_padding_mask(inp, pad_id)
        return self.encoder(inp, training=False, padding_mask=padding_mask), padding_mask

    def check_preprocessor(self, preprocessor):
        """ValueError naming the file when a vocabulary of ``preprocessor`` does not have the model's size."""
        for side, tokenizer, size in (("source", preprocessor.src_tokenizer, self.config.input_vocab_size),
                                      ("target", preprocessor.tgt_tokenizer, self.config.target_vocab_size)):
            if tokenizer.vocab_size != size:
                where = getattr(tokenizer, "vocabulary_file", None) or f"the {side} vocabulary"
                raise ValueError(f"{where}: {tokenizer.vocab_size} tokens, but the model was trained with {size}; "
                                 f"the file is damaged or from another run")

    @property
    def max_source_length(self):
        """Longest encodable source (the encoder's position limit, ``pe_input``)."""
        return self.config.pe_input

    @property
    def max_target_length(self):
        """Longest decodable target (the decoder's position limit, ``pe_target``)."""
        return self.config.pe_target

    @property
    def vocab_size(self):
        """Target vocabulary size (the decoder's output width)."""
        return self.config.target_vocab_size

    def init_cache(self, batch_size, max_length):
        """Empty decoder self-attention cache (see ``Decoder.init_cache``)."""
        return self.decoder.init_cache(batch_size, max_length)

    def cross_attention_kv(self, enc_output):
        """Every decoder layer's cross-attention keys/values (see ``Decoder.cross_attention_kv``)."""
        return self.decoder.cross_attention_kv(enc_output)

    def call_with_cache(self, ids, cache, cache_index, cross_kv, padding_mask=None):
        """Cached decoder + final layer at ``n`` new positions (see ``Decoder.call_with_cache``):
        ``ids (batch, n)`` -> ``(float32 logits (batch, n, target_vocab_size), hidden (batch, n, d_model),
        new cache)``."""
        hidden, cache, _ = self.decoder.call_with_cache(ids, cache, cache_index, cross_kv, padding_mask)
        return tf.cast(self.final_layer(hidden), tf.float32), hidden, cache

    def decode_step(self, ids_t, step, cache, cross_kv, padding_mask=None):
        """Cached decoder step + final layer: ``-> (float32 logits (batch, target_vocab_size), new cache)``.
        See ``Decoder.decode_step``."""
        logits, _, cache = self.call_with_cache(ids_t, cache, step, cross_kv, padding_mask)
        return logits[:, 0], cache

    def compute_loss_sums(self, batch, training, label_smoothing=0.0, real_tokens_only=True):
        """The Trainer loss: ``batch = ((src_ids (B, S), tgt_in (B, T)), tgt_out (B, T))`` -> ``{"loss": summed
        masked cross-entropy (label smoothing ε = ``label_smoothing``), "weight": the real-token count,
        "accuracy": the correct-token count}``; padding (0) is excluded."""
        (src, tgt_in), tgt_out = batch
        hidden, _ = self.output_hidden((src, tgt_in), training=training)
        return real_token_loss_sums(hidden, self.final_layer, tgt_out, label_smoothing=label_smoothing,
                                    real_tokens_only=real_tokens_only)

    # Model.fit support: the loss and metrics see only the logits.
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if isinstance(y_pred, (tuple, list)):
            y_pred = y_pred[0]
        return super().compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if isinstance(y_pred, (tuple, list)):
            y_pred = y_pred[0]
        return super().compute_metrics(x, y, y_pred, sample_weight)


def real_token_loss_sums(hidden, final_layer, labels, label_smoothing=0.0, pad_id=0, real_tokens_only=True):
    """A translator's loss sums, with the output layer applied to the real target tokens only.

    ``hidden (B, T, d)`` are the decoder's outputs before ``final_layer`` (d -> V), ``labels (B, T)`` the target
    ids, ``pad_id`` the padding. The output layer is the train step's largest matmul (V is thousands), and its
    logits and gradients at padded positions are thrown away by the masked loss; so the N real positions are
    gathered, ``(N, d)``, and only they are projected, ``(N, V)``: the same loss and gradients for about N / (B·T)
    of that cost. N is rounded up to a multiple of 128 (the extra rows repeat position 0 and count as padding)
    so that the loss's XLA kernel sees a few shapes rather than one per batch. ``real_tokens_only=False`` projects
    every position (inside an XLA-compiled function, whose shapes must not depend on the data).
    -> ``{"loss": summed cross-entropy (label smoothing ε), "weight": N, "accuracy": correct-token count}``.
    """
    if real_tokens_only:
        flat_labels = tf.reshape(labels, [-1])
        positions = tf.where(tf.not_equal(flat_labels, pad_id))[:, 0]                      # (N,)
        n = tf.shape(positions)[0]
        rows = (n + 127) // 128 * 128
        positions = tf.pad(positions, [[0, rows - n]])
        labels = tf.where(tf.range(rows) < n, tf.gather(flat_labels, positions), tf.cast(pad_id, labels.dtype))
        hidden = tf.gather(tf.reshape(hidden, [-1, hidden.shape[-1]]), positions)          # (rows, d)
    logits = tf.cast(final_layer(hidden), tf.float32)
    loss_sum, num_tokens, correct = fused_masked_cross_entropy(labels, logits, pad_id=pad_id,
                                                               label_smoothing=label_smoothing)
    return {"loss": loss_sum, "weight": num_tokens, "accuracy": correct}


def translation_loss(model, batch, training, label_smoothing=0.0, real_tokens_only=True):
    """Sums for :class:`kerasplm.training.Trainer` (its ``compute_loss(model, batch, training)``): the
    translator's own loss, :meth:`Transformer.compute_loss_sums` (masked cross-entropy and token accuracy).

    ``batch = ((src_ids (B, S), tgt_in (B, T)), tgt_out (B, T))``; padding (0) is excluded.
    """
    return model.compute_loss_sums(batch, training=training, label_smoothing=label_smoothing,
                                   real_tokens_only=real_tokens_only)


register_presets("transformer", Transformer, PRESETS, num_parameters=num_parameters,
                 listing_overrides={"input_vocab_size": 8000, "target_vocab_size": 8000},
                 description="the seed's Transformer translator (Vaswani et al., 2017)")
