"""Input embeddings of Transformer models: token + position (+ segment) embeddings.

    h = Drop(LN?(E_tok[x] · (sqrt(E) if scale) + P[pos] + E_seg[s]))     (each term as configured)
    out = h W_proj + b   when the embedding size E differs from the model width H (ALBERT's
                         factorized embedding, Lan et al. 2019, section 3.1)

==================  ==================  ==========================================================
option              seed (Transformer)  others
==================  ==================  ==========================================================
position_embedding  "sinusoidal"        "learned": a trained (max_positions, E) table (BERT, GPT)
num_segments        0                   2: segment / token-type embeddings (BERT)
scale_embeddings    True: · sqrt(E)     False (BERT, GPT)
normalize           False               True: LayerNorm after the sum (BERT, ALBERT)
embedding_size      None (= d_model)    128 with d_model 768 (ALBERT base): projection E -> H
==================  ==================  ==========================================================

``EmbeddingMixin`` holds the logic so that the seed's ``Encoder``/``Decoder`` keep their own weight
layout (the token table is the attribute ``embedding``, as in the seed, so existing checkpoints
restore); ``TransformerEmbedding`` is the stand-alone layer that new backbones use.
"""
import math

import keras
import tensorflow as tf

from kerasplm.layers.attention import clone_initializer
from kerasplm.layers.dropout import Dropout
from kerasplm.layers.position import positional_encoding

POSITION_EMBEDDINGS = ("sinusoidal", "learned")


class EmbeddingMixin:
    """Token + position (+ segment) embedding logic for a ``keras.layers.Layer`` subclass.

    Call ``_init_embedding(...)`` in ``__init__``, ``_build_embedding()`` in ``build`` and
    ``embed(...)`` in ``call``.
    """

    def _init_embedding(self, vocab_size, d_model, maximum_position_encoding, rate=0.0, *,
                        position_embedding="sinusoidal", num_segments=0, embedding_size=None, scale_embeddings=True,
                        normalize=False, layer_norm_epsilon=1e-12, embeddings_initializer="uniform"):
        if position_embedding not in POSITION_EMBEDDINGS:
            raise ValueError(f"position_embedding must be one of {POSITION_EMBEDDINGS}, got {position_embedding!r}")
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model),
                            ("maximum_position_encoding", maximum_position_encoding)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if num_segments < 0 or (embedding_size is not None and embedding_size <= 0):
            raise ValueError(f"num_segments must be >= 0 and embedding_size > 0, got {num_segments}, {embedding_size}")
        self.vocab_size, self.d_model = vocab_size, d_model
        self.maximum_position_encoding = maximum_position_encoding
        self.position_embedding_type, self.num_segments = position_embedding, num_segments
        self.embedding_size = embedding_size
        self.scale_embeddings, self.normalize_embeddings = scale_embeddings, normalize
        self.embedding_layer_norm_epsilon = layer_norm_epsilon
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        width = embedding_size or d_model
        def init():
            return dict(embeddings_initializer=clone_initializer(self.embeddings_initializer))

        self.embedding = keras.layers.Embedding(vocab_size, width, name="embedding", **init())
        if position_embedding == "sinusoidal":
            self.pos_encoding = positional_encoding(maximum_position_encoding, width)
        else:
            self.position_embedding = keras.layers.Embedding(maximum_position_encoding, width,
                                                             name="position_embedding", **init())
        if num_segments:
            self.segment_embedding = keras.layers.Embedding(num_segments, width, name="segment_embedding", **init())
        if normalize:
            self.embedding_layernorm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon,
                                                                       name="embedding_layernorm")
        self.dropout = Dropout(rate)
        if width != d_model:
            self.embedding_projection = keras.layers.Dense(
                d_model, kernel_initializer=clone_initializer(self.embeddings_initializer), name="embedding_projection")

    def _build_embedding(self):
        width = self.embedding_size or self.d_model
        self.embedding.build((None, None))
        if self.position_embedding_type == "learned":
            self.position_embedding.build((None, None))
        if self.num_segments:
            self.segment_embedding.build((None, None))
        if self.normalize_embeddings:
            self.embedding_layernorm.build((None, None, width))
        if width != self.d_model:
            self.embedding_projection.build((None, None, width))

    def _position_table(self, positions):
        if self.position_embedding_type == "learned":
            return self.position_embedding(positions)
        return tf.gather(self.pos_encoding[0], positions)

    def embed(self, x, positions=None, training=None, segment_ids=None, project=True):
        """``x (batch, seq_len)`` ids -> ``(batch, seq_len, d_model)``.

        ``positions``: int ``(seq_len,)`` or ``(batch, seq_len)``; default 0..seq_len-1.
        ``segment_ids``: int ``(batch, seq_len)`` in [0, num_segments); default all 0.
        ``project=False``: stop before the E -> d_model projection, ``(batch, seq_len, E)`` (what
        :class:`SharedEmbedding` reads).
        """
        if x.shape.rank == 2 and x.shape[1] is not None and x.shape[1] > self.maximum_position_encoding:
            raise ValueError(f"sequence length {x.shape[1]} exceeds maximum_position_encoding="
                             f"{self.maximum_position_encoding}")
        if segment_ids is not None and not self.num_segments:
            raise ValueError("segment_ids given but this embedding has num_segments=0")
        h = self.embedding(x)
        if self.scale_embeddings:
            h *= tf.cast(math.sqrt(self.embedding_size or self.d_model), h.dtype)
        if positions is None:
            positions = tf.range(tf.shape(x)[1])
        pe = self._position_table(positions)
        h += tf.cast(pe if pe.shape.rank == 3 else pe[tf.newaxis], h.dtype)
        if self.num_segments:
            h += self.segment_embedding(tf.zeros_like(x) if segment_ids is None else segment_ids)
        if self.normalize_embeddings:
            h = self.embedding_layernorm(h)
        h = self.dropout(h, training=training)
        if project and (self.embedding_size or self.d_model) != self.d_model:
            h = self.embedding_projection(h)
        return h

    def _embedding_config(self):
        """The options of ``_init_embedding`` after the positional ones (for ``get_config``)."""
        return {"position_embedding": self.position_embedding_type, "num_segments": self.num_segments,
                "embedding_size": self.embedding_size, "scale_embeddings": self.scale_embeddings,
                "normalize": self.normalize_embeddings, "layer_norm_epsilon": self.embedding_layer_norm_epsilon,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer)}


@keras.saving.register_keras_serializable(package="kerasplm")
class TransformerEmbedding(EmbeddingMixin, keras.layers.Layer):
    """Stand-alone token + position (+ segment) embedding (see the module docstring for the options).

    Args: ``vocab_size, d_model, max_positions, rate`` (dropout), then keyword options
    ``position_embedding, num_segments, embedding_size, scale_embeddings, normalize, layer_norm_epsilon,
    embeddings_initializer``. Defaults are the seed's (sinusoidal, · sqrt(d), no LayerNorm).
    Call: ``token_ids (batch, seq_len), segment_ids=None, positions=None, training`` -> ``(batch, seq_len, d_model)``.
    """

    def __init__(self, vocab_size, d_model, max_positions, rate=0.0, *, position_embedding="sinusoidal",
                 num_segments=0, embedding_size=None, scale_embeddings=True, normalize=False,
                 layer_norm_epsilon=1e-12, embeddings_initializer="uniform", **kwargs):
        super().__init__(**kwargs)
        self.rate = rate
        self._init_embedding(vocab_size, d_model, max_positions, rate, position_embedding=position_embedding,
                             num_segments=num_segments, embedding_size=embedding_size,
                             scale_embeddings=scale_embeddings, normalize=normalize,
                             layer_norm_epsilon=layer_norm_epsilon, embeddings_initializer=embeddings_initializer)

    def build(self, input_shape=None):
        self._build_embedding()
        self.built = True

    def call(self, token_ids, segment_ids=None, positions=None, training=None, project=True):
        return self.embed(token_ids, positions=positions, training=training, segment_ids=segment_ids,
                          project=project)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model,
                "max_positions": self.maximum_position_encoding, "rate": self.rate, **self._embedding_config()}


class SharedEmbedding(keras.layers.Layer):
    """Another model's :class:`TransformerEmbedding` tables read at this model's width (ELECTRA's generator and
    discriminator share token, position and segment embeddings and their LayerNorm, Clark et al. 2020 §3.2)::

        h = source(x, project=False) W + b      (batch, seq_len, E) -> (batch, seq_len, d_model)

    The projection (``embedding_projection``) is this layer's own, and is left out when ``d_model`` is E. The
    tables stay ``source``'s variables (one variable each, updated by both models); ``embedding`` is the source's
    token table layer, what a tied output layer reads. Built from live objects, so it has no Keras config: the
    model that owns both rebuilds it.

    Args: ``source`` (a built :class:`TransformerEmbedding`), ``d_model``, ``kernel_initializer``.
    Call: as :class:`TransformerEmbedding`'s.
    """

    def __init__(self, source, d_model, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        # Untracked: the source's own projection is not this layer's weight. The shared layers are tracked one by
        # one instead, so that this layer's weights (and a checkpoint's object graph) hold exactly the tables.
        object.__setattr__(self, "source", source)
        for name in ("embedding", "position_embedding", "segment_embedding", "embedding_layernorm"):
            if getattr(source, name, None) is not None:
                setattr(self, name, getattr(source, name))
        self.d_model = int(d_model)
        self.embedding_size = source.embedding_size or source.d_model
        self.embedding_projection = None
        if self.embedding_size != self.d_model:
            self.embedding_projection = keras.layers.Dense(self.d_model, kernel_initializer=kernel_initializer,
                                                           name="embedding_projection")

    def build(self, input_shape=None):
        if self.embedding_projection is not None:
            self.embedding_projection.build((None, None, self.embedding_size))
        self.built = True

    def call(self, token_ids, segment_ids=None, positions=None, training=None):
        h = self.source(token_ids, segment_ids=segment_ids, positions=positions, training=training, project=False)
        return h if self.embedding_projection is None else self.embedding_projection(h)


def table_logits(hidden, table):
    """Logits against an embedding table (weight tying): ``hidden (..., H)`` · ``table (V, H)``ᵀ -> ``(..., V)``,
    in hidden's dtype.

    One 2-D GEMM over the flattened rows: a rank-3 ``tf.matmul`` against the 2-D table runs as a broadcast
    batch matmul, 2-3x slower on CPU forward and backward (benchmarks/RESULTS.md, issue 11 profile). Used by
    BERT's MLM head, the causal LMs' output layer and ELMo's softmax.
    """
    flat = tf.reshape(hidden, [-1, tf.shape(hidden)[-1]])
    logits = tf.matmul(flat, tf.cast(table, hidden.dtype), transpose_b=True)
    return tf.reshape(logits, tf.concat([tf.shape(hidden)[:-1], tf.shape(table)[:1]], 0))
