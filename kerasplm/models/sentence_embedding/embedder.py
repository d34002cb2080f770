"""Sentence vectors of a BERT run, in process: what a vector index is built from and queried with.

:class:`SentenceEmbedder` is the graph ``text [B] -> vector [B, k]``: the in-graph BERT preprocessor
(``[CLS] text [SEP]``, cut at ``sequence_length``), the backbone, ``[CLS]`` or mean pooling over the real tokens
(Sentence-BERT), optionally BERT-whitening ``(pooled - mu) W`` (:mod:`kerasplm.models.sentence_embedding.whitening`), then L2
normalization, so that the inner product of two vectors is their cosine. The index commands embed a corpus with it
and the retriever export embeds its queries with the same module, so both sides of a search share one graph; the
embedder export (:mod:`kerasplm.models.sentence_embedding.embedder_export`) serves it, optionally without the normalization.

:func:`bert_run_parts` (BERT's, :mod:`kerasplm.models.bert.runs`; importable here as before) reads any BERT run
(converted, pretrained or fine-tuned) with :func:`kerasplm.runs.load_run`;
:func:`recorded_settings` gives the pooling and length a converted sentence-transformers run records;
:func:`weights_sha256` fingerprints a backbone's weights, so an index can tell the embedder that built it.
"""
import hashlib

import numpy as np
import tensorflow as tf

from kerasplm.models.bert.classifier import POOLINGS, SENTENCE_TRANSFORMERS_POOLING, pool_sequence, recorded_pooling
from kerasplm.models.bert.runs import bert_run_parts
from kerasplm.text.bert_tokenizer import BertPreprocessor

__all__ = ["SentenceEmbedder", "bert_run_parts", "recorded_settings", "weights_sha256", "SENTENCE_TRANSFORMERS_POOLING"]

# Sentences per batch when a corpus is embedded (sorted by length: little padding).
ENCODE_BATCH_SIZE = 64


def recorded_settings(options, pooling=None, normalize=None, sequence_length=None):
    """``(pooling, normalize, sequence_length)``: the given values, else what the run's options record of its
    sentence-transformers model (``sentence_embedding``: pooling mode, normalization, ``max_seq_length``), else mean
    pooling, normalized, ``None`` (the model's position limit)."""
    recorded = options.get("sentence_embedding") or {}
    if pooling is None:
        pooling = recorded_pooling(options) or "mean"
    normalize = recorded.get("normalize", True) if normalize is None else normalize
    return pooling, normalize, sequence_length or recorded.get("max_seq_length")


def weights_sha256(backbone):
    """The SHA-256 (hex) of a backbone's weights: every weight's shape, dtype and bytes, in the model's own order
    (not its variable names, which Keras numbers per process)."""
    digest = hashlib.sha256()
    for weight in backbone.weights:
        value = np.ascontiguousarray(np.asarray(weight.numpy()))
        digest.update(f"{value.dtype.str}{value.shape};".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


class SentenceEmbedder(tf.Module):
    """``text`` [B] -> sentence vectors float32 [B, k] (k = H, or the whitening's k), L2-normalized unless
    ``normalize=False`` (an embedder export may serve the raw pooled vectors; an index always normalizes).

    ``whitening``: ``(mu [1, H], W [H, k])`` (:func:`kerasplm.models.sentence_embedding.whitening.fit_whitening`'s), held as the
    float32 variables ``whitening_mean`` and ``whitening_kernel``. The backbone is kept untracked (an exporter
    tracks its ``tf.Variable``\\ s itself, :class:`kerasplm.export.base.ExportModule`); the preprocessor, with its
    vocabulary, is tracked.
    """

    def __init__(self, backbone, tokenizer, pooling="mean", sequence_length=None, whitening=None, normalize=True,
                 name="encoder"):
        super().__init__(name=name)
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        limit = backbone.config.max_positions - backbone.config.position_offset
        sequence_length = int(sequence_length or limit)
        if not 3 <= sequence_length <= limit:
            raise ValueError(f"sequence_length must be in [3, {limit}] (the model's positions), got {sequence_length}")
        self.__dict__["backbone"] = backbone
        self.pooling, self.sequence_length, self.normalize = pooling, sequence_length, bool(normalize)
        # Padded to the longest row of each call, not to sequence_length: a batch pays for its real tokens only.
        self.preprocessor = BertPreprocessor.for_tokenizer(tokenizer, sequence_length, pad_to_length=False)
        self.whitening_mean = self.whitening_kernel = None
        if whitening is not None:
            mean, kernel = (np.asarray(a, np.float32) for a in whitening)
            hidden = backbone.config.hidden_size
            if mean.shape != (1, hidden) or kernel.ndim != 2 or kernel.shape[0] != hidden:
                raise ValueError(f"whitening must be (mu [1, {hidden}], W [{hidden}, k]), got shapes {mean.shape}, "
                                 f"{kernel.shape}")
            self.whitening_mean = tf.Variable(mean, trainable=False, name="whitening_mean")
            self.whitening_kernel = tf.Variable(kernel, trainable=False, name="whitening_kernel")

    @property
    def dim(self):
        """The vectors' width: k with whitening, else the backbone's H."""
        if self.whitening_kernel is not None:
            return int(self.whitening_kernel.shape[1])
        return self.backbone.config.hidden_size

    def pool(self, text):
        """``text`` [B] -> the pooled final states, float32 [B, H] (neither whitened nor normalized)."""
        inputs = self.preprocessor(text)
        outputs = self.backbone(inputs, training=False)
        return tf.cast(pool_sequence(outputs["sequence_output"], inputs["padding_mask"], self.pooling), tf.float32)

    def __call__(self, text):
        """``text`` [B] -> float32 [B, k]: pooled, whitened when there is whitening, L2-normalized (unless
        ``normalize=False``)."""
        vectors = self.pool(text)
        if self.whitening_kernel is not None:
            # Before the normalization: whitening makes the cosine of the whitened vectors meaningful (the paper).
            vectors = tf.matmul(vectors - self.whitening_mean, self.whitening_kernel)
        return tf.math.l2_normalize(vectors, axis=-1) if self.normalize else vectors

    def _graph(self, name, fn):
        """``fn`` as a tf.function over string batches, traced once per encoder (kept out of tf.Module tracking)."""
        graphs = self.__dict__.setdefault("_graphs", {})    # a plain dict: neither tracked nor saved
        if name not in graphs:
            graphs[name] = tf.function(fn, input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
        return graphs[name]

    def _batched(self, fn, sentences, width, batch_size):
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        result = np.zeros((len(sentences), width), np.float32)
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            result[rows] = fn(tf.constant([sentences[i] for i in rows], tf.string)).numpy()
        return result

    def pooled(self, sentences, batch_size=ENCODE_BATCH_SIZE):
        """The pooled vectors of a list of strings, float32 numpy [N, H] (what whitening is fitted on)."""
        return self._batched(self._graph("pool", self.pool), sentences, self.backbone.config.hidden_size,
                             batch_size)

    def encode(self, sentences, batch_size=ENCODE_BATCH_SIZE):
        """The vectors of a list of strings, float32 numpy [N, k], computed batch by batch (sentences of similar
        lengths together) by the graph :meth:`__call__` traces."""
        return self._batched(self._graph("encode", self.__call__), sentences, self.dim, batch_size)
