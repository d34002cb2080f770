"""BERT (Devlin et al. 2019) and ALBERT (Lan et al. 2019) encoders.

    h_0 = Drop(LN(E_tok[x] + P[pos] + E_seg[s]))     (learned positions, no sqrt(d) scaling)
          (ALBERT: embedding size E < H, then h_0 W_proj + b: the factorized embedding, section 3.1)
    h_l = Block_l(h_{l-1})                           (post-LN encoder block, exact-erf GELU, eps 1e-12)
          (ALBERT: one block reused L times, cross-layer parameter sharing, section 3.1)
    pooled = tanh(h_L[:, 0] W_p + b_p)               (the [CLS] pooler, BERT section 3)

``BertBackbone`` takes ``{"token_ids", "segment_ids", "padding_mask"}`` (each ``(batch, seq_len)``;
``padding_mask`` is 1 for real tokens, as HuggingFace's ``attention_mask``) and returns
``{"sequence_output": (batch, seq_len, H), "pooled_output": (batch, H)}``, plus ``hidden_states`` (L + 1
tensors: embeddings, then each block) and ``attentions`` (L tensors ``(batch, heads, seq_len, seq_len)``)
when called with ``output_hidden_states=True`` / ``output_attentions=True``.

Real weights: :mod:`kerasplm.models.bert.convert` (HuggingFace directories and Google's TF checkpoints).
"""
import dataclasses

import keras
import tensorflow as tf

from kerasplm.layers.embedding import TransformerEmbedding
from kerasplm.layers.transformer import EncoderLayer
from kerasplm.models.base import Backbone
from kerasplm.models.presets import register_presets
from kerasplm.text.bert_tokenizer import BertPreprocessor

# Block activations: exact-erf GELU (BERT) or its tanh approximation (ALBERT's "gelu_new").
ACTIVATIONS = ("gelu", "gelu_tanh")

# The run family of a BERT encoder's own runs (``kerasplm convert bert``, ``kerasplm train bert``).
RUN_FAMILY = "bert"


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of a BERT / ALBERT encoder (HuggingFace's names in brackets where they differ:
    num_layers [num_hidden_layers], num_heads [num_attention_heads], max_positions
    [max_position_embeddings], num_segments [type_vocab_size], dropout [hidden_dropout_prob],
    attention_dropout [attention_probs_dropout_prob], layer_norm_epsilon [layer_norm_eps]).

    The defaults are BERT's; the variants the converters read set: ``num_segments`` 0 (DistilBERT: no token-type
    table) or 1 (RoBERTa); ``embedding_size`` (ALBERT, ELECTRA: E -> H projection); ``share_layers`` (ALBERT);
    ``activation`` ``"gelu_tanh"`` (ALBERT's ``gelu_new``); ``position_offset`` (RoBERTa: position i reads row
    i + 2 of the table, HuggingFace's ``padding_idx + 1``; the usable length is ``max_positions - position_offset``).
    A model with fewer than two token types reads no ``segment_ids``."""

    vocab_size: int
    num_layers: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    max_positions: int = 512
    num_segments: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_epsilon: float = 1e-12
    embedding_size: int = None
    share_layers: bool = False
    initializer_range: float = 0.02
    activation: str = "gelu"
    position_offset: int = 0

    def validate(self):
        for name in ("vocab_size", "num_layers", "hidden_size", "num_heads", "intermediate_size",
                     "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        for name in ("num_segments", "position_offset"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"BertConfig.{name} must be a non-negative integer, got {value!r}")
        if self.position_offset >= self.max_positions:
            raise ValueError(f"BertConfig.position_offset={self.position_offset} leaves no position of "
                             f"max_positions={self.max_positions}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"BertConfig.activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"BertConfig.hidden_size={self.hidden_size} must be divisible by "
                             f"num_heads={self.num_heads}")
        if self.embedding_size is not None and (not isinstance(self.embedding_size, int) or self.embedding_size <= 0):
            raise ValueError("BertConfig.embedding_size must be None or a positive integer, "
                             f"got {self.embedding_size!r}")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"BertConfig.{name} must be in [0, 1), got {getattr(self, name)}")
        if not self.layer_norm_epsilon > 0 or not self.initializer_range > 0:
            raise ValueError("BertConfig.layer_norm_epsilon and initializer_range must be > 0, got "
                             f"{self.layer_norm_epsilon}, {self.initializer_range}")
        return self


def _bert(num_layers, hidden_size, num_heads, **kwargs):
    return BertConfig(vocab_size=30522, num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                      intermediate_size=4 * hidden_size, **kwargs)


PRESETS = {
    # Turc et al. 2019, "Well-Read Students Learn Better" (the compact BERTs), and the two of the paper.
    "bert_tiny": _bert(2, 128, 2),
    "bert_mini": _bert(4, 256, 4),
    "bert_small": _bert(4, 512, 8),
    "bert_medium": _bert(8, 512, 8),
    "bert_base": _bert(12, 768, 12),
    "bert_large": _bert(24, 1024, 16),
    "albert_base": BertConfig(vocab_size=30000, num_layers=12, hidden_size=768, num_heads=12,
                              intermediate_size=3072, embedding_size=128, share_layers=True, dropout=0.0,
                              attention_dropout=0.0),
}


def num_parameters(config):
    """Exact weight count: embeddings (+ ALBERT's projection) + blocks (one when shared) + pooler."""
    h, f = config.hidden_size, config.intermediate_size
    e = config.embedding_size or h
    embeddings = (config.vocab_size + config.max_positions + config.num_segments) * e + 2 * e
    projection = e * h + h if e != h else 0
    block = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
    blocks = (1 if config.share_layers else config.num_layers) * block
    return embeddings + projection + blocks + (h * h + h)


@keras.saving.register_keras_serializable(package="kerasplm")
class BertBackbone(Backbone):
    """BERT / ALBERT encoder (see the module docstring).

    Args: the fields of :class:`BertConfig` (by keyword, or by position in its field order), plus Keras'
    ``name`` etc., and two for a backbone that lives inside another model (ELECTRA's generator): ``embeddings``,
    an embedding layer to read instead of building one (a :class:`kerasplm.layers.embedding.SharedEmbedding` over
    another backbone's tables; such a backbone has no Keras config of its own), and ``pooler=False`` (no
    ``[CLS]`` pooler, no ``pooled_output``).
    Call: ``inputs`` dict of int ``token_ids``, ``segment_ids`` (optional, default 0) and ``padding_mask``
    (optional, 1 = real token, default all real), each ``(batch, seq_len)``; ``training``;
    ``output_hidden_states``; ``output_attentions`` -> dict of outputs.
    """

    config_class = BertConfig
    preset_family = "bert"

    def __init__(self, *args, embeddings=None, pooler=True, **kwargs):
        super().__init__(*args, **kwargs)   # ConfigMixin: self.config, mapped by field name
        c = self.config
        init = keras.initializers.TruncatedNormal(stddev=c.initializer_range)
        self.embeddings = embeddings if embeddings is not None else TransformerEmbedding(
            vocab_size=c.vocab_size, d_model=c.hidden_size, max_positions=c.max_positions, rate=c.dropout,
            position_embedding="learned", num_segments=c.num_segments, embedding_size=c.embedding_size,
            scale_embeddings=False, normalize=True, layer_norm_epsilon=c.layer_norm_epsilon,
            embeddings_initializer=init, name="embeddings")

        def block(name):
            return EncoderLayer(d_model=c.hidden_size, num_heads=c.num_heads, dff=c.intermediate_size,
                                rate=c.dropout, normalize_first=False, activation=c.activation,
                                layer_norm_epsilon=c.layer_norm_epsilon, attention_dropout=c.attention_dropout,
                                kernel_initializer=init, name=name)

        # With share_layers one block is reused num_layers times (its weights exist once).
        self.blocks = ([block("block")] if c.share_layers
                       else [block(f"block{i + 1}") for i in range(c.num_layers)])
        self.pooler = None
        if pooler:
            self.pooler = keras.layers.Dense(c.hidden_size, activation="tanh", kernel_initializer=init,
                                             name="pooler")
        self.build()

    @staticmethod
    def num_parameters(config):
        return num_parameters(config)

    def check_preprocessor(self, preprocessor):
        """ValueError naming the vocabulary file when ``preprocessor``'s tokenizer has not ``vocab_size`` tokens
        (:meth:`kerasplm.runs.RunDir.build` calls it: a damaged vocabulary, or another run's)."""
        check_vocabulary(self.config.vocab_size, preprocessor)

    def build(self, input_shape=None):
        shape = (None, None, self.config.hidden_size)
        self.embeddings.build()
        for block in self.blocks:
            block.build(shape)
        if self.pooler is not None:
            self.pooler.build((None, self.config.hidden_size))
        self.built = True

    def get_config(self):
        return {**super().get_config(), **({} if self.pooler is not None else {"pooler": False})}

    def layer_blocks(self):
        """The block applied at each of the ``num_layers`` positions (the same one when shared)."""
        return [self.blocks[0 if self.config.share_layers else i] for i in range(self.config.num_layers)]

    def call(self, inputs, training=None, output_hidden_states=False, output_attentions=False,
             output_positions=None):
        """``output_positions`` int ``(batch, P)``: the last block computes its output only at ``[CLS]`` and
        these positions (its keys/values still cover the whole sequence), and ``sequence_output`` is
        ``(batch, P, H)`` at them. The values are the full call's at those positions (every sub-layer but
        the keys/values is row-wise); pretraining needs no more, since the MLM loss reads the masked
        positions only and NSP reads ``[CLS]``, and it skips ~85% of the last block's work (as NVIDIA's
        BERT pretraining does). The last entries of ``hidden_states`` / ``attentions`` are then restricted
        the same way (``[CLS]`` first).
        """
        token_ids = inputs["token_ids"]
        # One token type (RoBERTa) or none (DistilBERT): the segments of a pair differ by their separators only.
        segment_ids = inputs.get("segment_ids") if self.config.num_segments > 1 else None
        padding_mask = inputs.get("padding_mask")
        if padding_mask is None:
            padding_mask = tf.ones_like(token_ids)
        # kerasplm's convention: 1.0 = may not attend, broadcast over heads and queries.
        attention_mask = (1.0 - tf.cast(padding_mask, tf.float32))[:, tf.newaxis, tf.newaxis, :]
        positions = None
        if self.config.position_offset:
            positions = tf.range(tf.shape(token_ids)[1]) + self.config.position_offset
        x = self.embeddings(token_ids, segment_ids=segment_ids, positions=positions, training=training)
        hidden_states, attentions = [x], []
        blocks = self.layer_blocks()
        for i, block in enumerate(blocks):
            queries = None
            if output_positions is not None and i == len(blocks) - 1:
                positions = tf.cast(output_positions, tf.int32)
                positions = tf.concat([tf.zeros_like(positions[:, :1]), positions], axis=1)  # [CLS] first
                queries = tf.gather(x, positions, batch_dims=1)                             # (B, 1 + P, H)
            x, weights = block(x, training=training, padding_mask=attention_mask, return_attention=True,
                               queries=queries)
            hidden_states.append(x)
            attentions.append(weights)
        outputs = {"sequence_output": x if output_positions is None else x[:, 1:]}
        if self.pooler is not None:
            outputs["pooled_output"] = self.pooler(x[:, 0])
        if output_hidden_states:
            outputs["hidden_states"] = hidden_states
        if output_attentions:
            outputs["attentions"] = attentions
        return outputs


def bert_run_preprocessor(tokenizer, config):
    """The preprocessor a ``bert`` run stores with its model (a :class:`BertConfig` ``config``): ``tokenizer``
    packing ``[CLS] A [SEP]`` up to the model's positions, each batch padded to its longest row."""
    return BertPreprocessor(tokenizer, config.max_positions - config.position_offset, pad_to_length=False)


def check_vocabulary(vocab_size, preprocessor):
    """ValueError naming the file when the tokenizer of ``preprocessor`` (if it has one) has not ``vocab_size``
    tokens."""
    tokenizer = getattr(preprocessor, "tokenizer", None)
    if tokenizer is None or tokenizer.vocab_size == vocab_size:
        return
    where = getattr(tokenizer, "vocabulary_file", None) or "the vocabulary"
    raise ValueError(f"{where}: {tokenizer.vocab_size} tokens, but the model was trained with {vocab_size}; the "
                     f"file is damaged or from another run")


class ChecksBackboneVocabulary:
    """Mixin of the BERT task models: ``check_preprocessor`` is the backbone's (the vocabulary's size)."""

    def check_preprocessor(self, preprocessor):
        self.backbone.check_preprocessor(preprocessor)


class UntrackedPreprocessor:
    """Mixin of the task models whose checkpoints never held their preprocessor (the pretrainer, the tagger, the
    question answerer): ``preprocessor`` is set without tracking, so the checkpoint's object graph stays the one
    their runs have always had (a tracked tokenizer adds its variables to it)."""

    def __setattr__(self, name, value):
        if name == "preprocessor":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)


register_presets("bert", BertBackbone, PRESETS, num_parameters=num_parameters,
                 description="BERT / ALBERT encoder (post-LN, learned positions, segments, [CLS] pooler)")
