"""Export a vector index and its embedder as one retriever SavedModel: query strings in, top-k hits out.

``serving_default``: ``text`` tf.string [B] -> ``ids`` int64 [B, k], ``scores`` float32 [B, k], ``texts`` string
[B, k], best first. The query is embedded in graph by the index's own
:class:`kerasplm.models.sentence_embedding.embedder.SentenceEmbedder` (BERT tokenizer, backbone, pooling, optional
BERT-whitening, L2 normalization), then scored against the whole corpus matrix ``V`` [N, d] held in the SavedModel
(exact search, as Faiss' ``IndexFlatIP``)::

    scores = q V^T                       float32 (the cosine: both sides L2-normalized)
    scores = (q Q^T) * s                 int8: Q = round(V / s) with one scale s_i = max_j |V_ij| / 127 per vector

and ``tf.math.top_k`` keeps the k best (k fixed at export, at most N); their ids and texts are gathered from the
SavedModel's variables ``corpus_ids`` and ``corpus_texts``. ``embed``: ``text`` [B] -> ``embedding`` float32
[B, d], the query vectors themselves. Only TensorFlow and tensorflow-text ops: no kerasplm or Faiss to serve it.

>>> path = export_retriever("indexes/squad", "export/retriever", top_k=10)          # -> "export/retriever/1"
>>> path = export_retriever("indexes/squad", "export/retriever_int8", int8=True)
"""
import numpy as np
import tensorflow as tf

from kerasplm.export.base import ExportModule, save_version
from kerasplm.models.sentence_embedding.vector_index import load_embedder, load_index

FAMILY = "retriever"
INT8_MAX = 127


def quantize_int8(vectors):
    """Symmetric per-vector int8: ``(codes int8 [N, d], scales float32 [N])`` with ``vectors ≈ codes * scales``
    (a zero vector gets scale 1 and zero codes)."""
    vectors = np.asarray(vectors, np.float32)
    scales = np.abs(vectors).max(axis=1) / INT8_MAX if len(vectors) else np.zeros((0,), np.float32)
    scales = np.where(scales > 0, scales, 1.0).astype(np.float32)
    codes = np.clip(np.rint(vectors / scales[:, None]), -INT8_MAX, INT8_MAX).astype(np.int8)
    return codes, scales


class RetrieverModule(ExportModule):
    """The exported retriever (see the module docstring): ``encoder`` (a ``SentenceEmbedder``), the corpus'
    ``vectors`` float32 [N, d], ``ids`` int64 [N], ``texts`` (N strings), ``top_k`` (<= N), ``int8``."""

    family = FAMILY

    def __init__(self, encoder, vectors, ids, texts, top_k, int8=False):
        super().__init__(encoder.backbone, name="retriever")
        vectors = np.asarray(vectors, np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != encoder.dim or not len(vectors) == len(ids) == len(texts):
            raise ValueError(f"vectors [N, {encoder.dim}], ids [N] and texts [N] must agree, got shapes "
                             f"{vectors.shape}, {np.shape(ids)} and {len(texts)} texts")
        if not 1 <= top_k <= len(vectors):
            raise ValueError(f"top_k must be in [1, {len(vectors)}] (the index's vectors), got {top_k}")
        self.encoder, self.top_k, self.int8 = encoder, int(top_k), bool(int8)
        if self.int8:
            codes, scales = quantize_int8(vectors)
            self.corpus_matrix = tf.Variable(codes, trainable=False, name="corpus_matrix")
            self.corpus_scales = tf.Variable(scales, trainable=False, name="corpus_scales")
        else:
            self.corpus_matrix = tf.Variable(vectors, trainable=False, name="corpus_matrix")
            self.corpus_scales = None
        self.corpus_ids = tf.Variable(np.asarray(ids, np.int64), trainable=False, name="corpus_ids")
        self.corpus_texts = tf.Variable(tf.constant(list(texts), tf.string), trainable=False, name="corpus_texts")

    def scores(self, vectors):
        """Query vectors [B, d] -> their inner products with every corpus vector, float32 [B, N]."""
        matrix = tf.cast(self.corpus_matrix, tf.float32)
        scores = tf.matmul(vectors, matrix, transpose_b=True)
        if self.corpus_scales is not None:
            scores = scores * self.corpus_scales[tf.newaxis, :]
        return scores

    # autograph=False: straight-line code; autograph would rewrite the whole Keras model at every trace.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False)
    def retrieve(self, text):
        """``text`` [B] -> ``{"ids" int64 [B, k], "scores" float32 [B, k], "texts" string [B, k]}``, best first."""
        best = tf.math.top_k(self.scores(self.encoder(text)), k=self.top_k, sorted=True)
        return {"ids": tf.gather(self.corpus_ids, best.indices), "scores": best.values,
                "texts": tf.gather(self.corpus_texts, best.indices)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False)
    def embed(self, text):
        """``text`` [B] -> ``{"embedding": float32 [B, d]}``: the query vectors (L2-normalized)."""
        return {"embedding": self.encoder(text)}

    def signatures(self):
        return {"serving_default": self.retrieve, "embed": self.embed}


def export_retriever(index, model_base_path, top_k=5, int8=False, embedder=None, version=None, overwrite=False):
    """Export the index directory ``index`` (``kerasplm index build``) with its embedder as a retriever SavedModel in
    ``model_base_path/<version>/``; returns the version directory's path.

    ``embedder``: the BERT run that embeds the queries (default: the run the index records; a run of other weights
    is refused). ``top_k``: hits per query, at most the index's vectors. ``int8``: the corpus matrix as int8 codes
    with per-vector scales. The metadata records the index's manifest, ``top_k``, ``int8`` and the corpus' size.
    """
    loaded = load_index(index)
    if not 1 <= top_k <= loaded.count:
        raise ValueError(f"top_k must be in [1, {loaded.count}] (the index's vectors), got {top_k}")
    encoder = load_embedder(loaded, embedder)
    module = RetrieverModule(encoder, loaded.vectors(), loaded.ids, loaded.texts, top_k, int8=int8)
    manifest = loaded.manifest
    metadata = {"index": loaded.path, "index_type": manifest["type"], "count": loaded.count, "dim": manifest["dim"],
                "top_k": module.top_k, "int8": module.int8, "embedder": manifest["embedder"],
                "corpus_bytes": int(module.corpus_matrix.numpy().nbytes
                                    + (module.corpus_scales.numpy().nbytes if module.int8 else 0))}
    return save_version(module, model_base_path, version=version, overwrite=overwrite, metadata=metadata)


def export_retriever_command(index, to, top_k=5, int8=False, embedder=None, version=None, overwrite=False):
    """``kerasplm export retriever``: prints and returns the version directory."""
    path = export_retriever(index, to, top_k=top_k, int8=int8, embedder=embedder, version=version,
                            overwrite=overwrite)
    print(path)
    return 0
