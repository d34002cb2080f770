"""A decoder-only Transformer language model: the reusable base of GPT-style families.

    h_0 = E_tok[x] + P[pos]                      (learned positions; dropout)
    h_l = Block_l(h_{l-1})                      (causal self-attention + FFN, no cross-attention)
    logits = LN_f(h_L) E_tokᵀ                   (pre-LN: final LayerNorm; tied output embedding)

``DecoderOnlyBackbone`` returns ``{"sequence_output": (batch, seq_len, d_model)}``; ``CausalLM`` adds the
tied LM head, next-token loss and generation. Both implement the decoding protocol of
:mod:`kerasplm.generation`::

    init_cache(batch_size, max_length) -> cache
    call_with_cache(token_ids (batch, n), cache, cache_index) -> (logits/hidden, ..., new cache)

Sequences are **right-padded**: with a causal mask, padding after a row's last real token never
influences that row, so no padding mask is needed, and positions are simply 0, 1, 2, ... for every
row (see :mod:`kerasplm.generation.engine` for prompts of different lengths).

The defaults are GPT-2's choices (pre-LN, tanh GELU, epsilon 1e-5, truncated-normal 0.02 weights); a
GPT family subclasses/configures these classes and registers its own presets. The only preset here is
``causal_lm_tiny``, for tests.
"""
import dataclasses

import keras
import tensorflow as tf

from kerasplm.generation.engine import generate
from kerasplm.layers.embedding import TransformerEmbedding, table_logits
from kerasplm.layers.masks import create_look_ahead_mask
from kerasplm.layers.transformer import ACTIVATIONS, DecoderLayer
from kerasplm.models.base import Backbone, Task
from kerasplm.models.presets import register_presets
from kerasplm.training.losses import fused_masked_cross_entropy


@dataclasses.dataclass(frozen=True)
class CausalLMConfig:
    """Hyper-parameters of a decoder-only LM (field names as in the Transformer's config)."""

    vocab_size: int
    num_layers: int
    d_model: int
    num_heads: int
    dff: int
    max_positions: int = 1024
    rate: float = 0.1
    attention_dropout: float = 0.1
    normalize_first: bool = True
    activation: str = "gelu_tanh"
    layer_norm_epsilon: float = 1e-5
    position_embedding: str = "learned"
    initializer_range: float = 0.02

    def validate(self):
        for name in ("vocab_size", "num_layers", "d_model", "num_heads", "dff", "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"CausalLMConfig.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}")
        for name in ("rate", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"CausalLMConfig.{name} must be in [0, 1), got {getattr(self, name)}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; expected one of {sorted(ACTIVATIONS)}")
        return self


PRESETS = {
    "causal_lm_tiny": CausalLMConfig(vocab_size=64, num_layers=2, d_model=32, num_heads=4, dff=64, max_positions=64),
}


def num_parameters(config):
    """Exact weight count (tied output embedding): embeddings + blocks + final LayerNorm."""
    d, f = config.d_model, config.dff
    block = 4 * (d * d + d) + (d * f + f + f * d + d) + 2 * 2 * d
    positions = config.max_positions * d if config.position_embedding == "learned" else 0
    final_norm = 2 * d if config.normalize_first else 0
    return config.vocab_size * d + positions + config.num_layers * block + final_norm


@keras.saving.register_keras_serializable(package="kerasplm")
class DecoderOnlyBackbone(Backbone):
    """Token + position embedding, ``num_layers`` causal blocks (``DecoderLayer(cross_attention=False)``),
    a final LayerNorm when pre-LN.

    Args: the fields of :class:`CausalLMConfig` (``config_class``; by keyword, or by position in its field
    order), plus Keras' ``name`` etc.
    Call: ``token_ids (batch, seq_len)`` right-padded, ``training``, ``output_attentions`` -> ``{"sequence_output":
    (batch, seq_len, d_model)}`` (float in the compute dtype), plus ``"attentions"`` (one ``(batch, heads,
    seq_len, seq_len)`` tensor per block) when ``output_attentions=True``.
    """

    config_class = CausalLMConfig
    preset_family = "causal_lm"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)   # ConfigMixin: self.config, mapped by field name
        c = self.config
        init = keras.initializers.TruncatedNormal(stddev=c.initializer_range)
        self.embeddings = TransformerEmbedding(vocab_size=c.vocab_size, d_model=c.d_model,
                                               max_positions=c.max_positions, rate=c.rate,
                                               position_embedding=c.position_embedding, scale_embeddings=False,
                                               embeddings_initializer=init, name="embeddings")
        self.blocks = [DecoderLayer(d_model=c.d_model, num_heads=c.num_heads, dff=c.dff, rate=c.rate,
                                    cross_attention=False, normalize_first=c.normalize_first,
                                    activation=c.activation, layer_norm_epsilon=c.layer_norm_epsilon,
                                    attention_dropout=c.attention_dropout, kernel_initializer=init,
                                    name=f"block{i + 1}")
                       for i in range(c.num_layers)]
        if c.normalize_first:
            self.final_layernorm = keras.layers.LayerNormalization(epsilon=c.layer_norm_epsilon,
                                                                   name="final_layernorm")
        self.build()

    @staticmethod
    def num_parameters(config):
        return num_parameters(config)

    def build(self, input_shape=None):
        shape = (None, None, self.config.d_model)
        self.embeddings.build()
        for block in self.blocks:
            block.build(shape)
        if self.config.normalize_first:
            self.final_layernorm.build(shape)
        self.built = True

    def _finish(self, x):
        return self.final_layernorm(x) if self.config.normalize_first else x

    def call(self, token_ids, training=None, output_attentions=False):
        """``output_attentions=True`` adds ``"attentions"``: per block, the causal self-attention weights
        ``(batch, heads, seq_len, seq_len)`` (row i: query position i over keys 0..i), as BERT's backbone."""
        x = self.embeddings(token_ids, training=training)
        mask = create_look_ahead_mask(tf.shape(token_ids)[1])
        attentions = []
        for block in self.blocks:
            x, weights, _ = block(x, training=training, look_ahead_mask=mask)
            attentions.append(weights)
        outputs = {"sequence_output": self._finish(x)}
        if output_attentions:
            outputs["attentions"] = attentions
        return outputs

    # ---- incremental decoding (kerasplm.generation) ----
    def init_cache(self, batch_size, max_length):
        """Empty cache: per block ``(k, v)``, each ``(batch_size, num_heads, max_length, depth)``."""
        if max_length > self.config.max_positions:
            raise ValueError(f"cache length {max_length} exceeds max_positions={self.config.max_positions}")
        return [block.mha1.init_cache(batch_size, max_length) for block in self.blocks]

    def call_with_cache(self, token_ids, cache, cache_index):
        """``token_ids (batch, n)`` at positions ``cache_index .. cache_index + n - 1`` (int32 scalar, or
        ``(batch,)`` per row) -> ``(sequence_output (batch, n, d_model), new cache)``; equal to ``call``
        on the whole prefix restricted to the new positions (inference: no dropout)."""
        cache_index = tf.convert_to_tensor(cache_index, tf.int32)
        offsets = tf.range(tf.shape(token_ids)[1])
        positions = cache_index[:, tf.newaxis] + offsets if cache_index.shape.rank == 1 else cache_index + offsets
        x = self.embeddings(token_ids, positions=positions, training=False)
        new_cache = []
        for block, block_cache in zip(self.blocks, cache):
            x, block_cache, _ = block.call_with_cache(x, block_cache, cache_index)
            new_cache.append(block_cache)
        return self._finish(x), new_cache


@keras.saving.register_keras_serializable(package="kerasplm")
class CausalLM(Task):
    """Next-token language model over a :class:`DecoderOnlyBackbone`, output layer tied to the token
    embedding: logits = h E_tokᵀ.

    Call: ``token_ids (batch, seq_len)`` -> float32 logits ``(batch, seq_len, vocab_size)``.
    Loss (``compute_loss_sums``): ``batch = (token_ids, labels)`` with labels = the next tokens, 0 =
    ignored (padding), or ``batch = token_ids`` (labels are the ids shifted by one).
    """

    backbone_class = DecoderOnlyBackbone

    def __init__(self, backbone, preprocessor=None, **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        self.build()

    def build(self, input_shape=None):
        self.built = True  # the backbone is built; the head reuses its token embedding

    def _logits(self, hidden):
        return tf.cast(table_logits(hidden, self.backbone.embeddings.embedding.embeddings), tf.float32)

    def call(self, token_ids, training=None):
        return self._logits(self.backbone(token_ids, training=training)["sequence_output"])

    def compute_loss_sums(self, batch, training):
        if isinstance(batch, (tuple, list)):
            token_ids, labels = batch
        else:
            token_ids, labels = batch[:, :-1], batch[:, 1:]
        loss, count, correct = fused_masked_cross_entropy(labels, self(token_ids, training=training))
        return {"loss": loss, "weight": count, "accuracy": correct}

    # ---- incremental decoding (kerasplm.generation) ----
    def init_cache(self, batch_size, max_length):
        return self.backbone.init_cache(batch_size, max_length)

    def call_with_cache(self, token_ids, cache, cache_index):
        """-> ``(float32 logits (batch, n, vocab_size), hidden (batch, n, d_model), new cache)``."""
        hidden, cache = self.hidden_with_cache(token_ids, cache, cache_index)
        return self._logits(hidden), hidden, cache

    def hidden_with_cache(self, token_ids, cache, cache_index):
        """-> ``(hidden (batch, n, d_model), new cache)``: :meth:`call_with_cache` without the logits."""
        return self.backbone.call_with_cache(token_ids, cache, cache_index)

    @property
    def output_table(self):
        """The tied ``(vocab_size, d_model)`` table (logits = hidden · tableᵀ) when the model computes in
        float32, else None: the screened greedy search (:mod:`kerasplm.generation.screened_argmax`) certifies
        float32 argmaxes only."""
        table = self.backbone.embeddings.embedding.embeddings
        float32 = self.backbone.compute_dtype == "float32" and table.dtype == "float32"
        return table if float32 else None

    def check_preprocessor(self, tokenizer):
        """ValueError naming the file when ``tokenizer`` (a run's preprocessor: the tokenizer itself) has ids past
        the model's token embedding (``vocab_size``): a vocabulary of another run, or a damaged one."""
        size = getattr(tokenizer, "vocab_size", None)
        if size is not None and size > self.vocab_size:
            where = getattr(tokenizer, "vocabulary_file", None) or "the tokenizer"
            raise ValueError(f"{where}: {size} tokens, more than the model's vocab_size={self.vocab_size}; the "
                             f"file is damaged or from another run")

    @property
    def max_positions(self):
        return self.backbone.config.max_positions

    @property
    def vocab_size(self):
        return self.backbone.config.vocab_size

    def generate(self, prompt_ids, prompt_lengths=None, **options):
        """Token-id generation: see :func:`kerasplm.generation.generate` (``options``: max_new_tokens,
        sampler, temperature, top_k, top_p, seed, beam_size, alpha, stop_ids, pad_id, jit_compile)."""
        return generate(self, prompt_ids, prompt_lengths, **options)


register_presets("causal_lm", DecoderOnlyBackbone, PRESETS, num_parameters=num_parameters,
                 description="decoder-only Transformer LM (base of GPT-style families)")
