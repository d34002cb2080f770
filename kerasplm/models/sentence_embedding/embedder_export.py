"""Export a BERT encoder as a sentence-embedding SavedModel (strings in, vectors out).

``serving_default``: ``text`` tf.string [None] -> ``embedding`` float32 [None, H] ([None, k] with whitening): the
in-graph BERT tokenizer and ``[CLS] text [SEP]`` packing (:class:`kerasplm.text.BertPreprocessor`, cut at
``sequence_length``), the backbone, then ``[CLS]`` or mean pooling over the real tokens (Sentence-BERT, Reimers &
Gurevych 2019), optionally BERT-whitening (Su et al. 2021: ``(pooled - mu) W``, fitted on a corpus at export time
by :mod:`kerasplm.models.sentence_embedding.whitening`; ``mu`` [1, H] and ``W`` [H, k] are variables of the SavedModel) and
optionally L2 normalization, in that order. Defaults come from the run: a run converted from a sentence-transformers
model (all-MiniLM-L6-v2 ...) records its pooling, normalization and ``max_seq_length``
(:func:`kerasplm.models.bert.convert.convert_bert_to_run`), so the export reproduces ``SentenceTransformer.encode``.

>>> path = export_embedder("runs/minilm", "export/minilm")     # -> "export/minilm/1"
>>> path = export_embedder("runs/minilm", "export/white", whitening="corpus.txt", whitening_dim=128)

Any BERT run works (read with :func:`kerasplm.runs.load_run`): a converted or pretrained run (family ``bert``: the
backbone, or the pretrainer's) or a fine-tuned task run (its ``backbone``). Variable tracking, metadata and the
atomic versioned save are :mod:`kerasplm.export.base`'s.
"""
import os

import tensorflow as tf

from kerasplm.data.sentences import read_sentence_lines
from kerasplm.export.base import ExportModule, save_version
from kerasplm.models.bert.runs import bert_run_parts
from kerasplm.models.sentence_embedding.embedder import SentenceEmbedder, recorded_settings
from kerasplm.models.sentence_embedding.whitening import fit_whitening

FAMILY = "bert_embedder"
# Sentences per batch when the whitening corpus is embedded (sorted by length: little padding).
WHITENING_BATCH_SIZE = 64


class EmbedderModule(ExportModule):
    """The exported embedder: backbone + BERT preprocessor + pooling [+ whitening] [+ L2 normalization] (see the
    module docstring), the graph of :class:`kerasplm.models.sentence_embedding.embedder.SentenceEmbedder` (``encoder``).

    ``whitening``: ``(mu [1, H], W [H, k])`` (e.g. :func:`kerasplm.models.sentence_embedding.whitening.fit_whitening`'s), stored as the
    float32 variables ``whitening_mean`` and ``whitening_kernel``; the embedding is then ``[B, k]``.
    """

    family = FAMILY

    def __init__(self, backbone, tokenizer, pooling="mean", normalize=True, sequence_length=None, whitening=None):
        super().__init__(backbone, name="embedder")
        self.encoder = SentenceEmbedder(backbone, tokenizer, pooling=pooling, sequence_length=sequence_length,
                                        whitening=whitening, normalize=normalize)
        self.pooling, self.normalize = self.encoder.pooling, self.encoder.normalize
        self.sequence_length = self.encoder.sequence_length
        # Tracked here too, so the SavedModel keeps its top-level names (the vocabulary asset, whitening_mean and
        # whitening_kernel: restored by any loader).
        self.preprocessor = self.encoder.preprocessor
        self.whitening_mean, self.whitening_kernel = self.encoder.whitening_mean, self.encoder.whitening_kernel

    @property
    def embedding_size(self):
        """The width of ``embedding``: k with whitening, else the backbone's H."""
        return self.encoder.dim

    def pool(self, text):
        """``text`` [B] -> the pooled final states, float32 [B, H] (neither whitened nor normalized)."""
        return self.encoder.pool(text)

    def pooled_embeddings(self, sentences, batch_size=WHITENING_BATCH_SIZE):
        """The pooled vectors of a list of strings, float32 numpy [N, H], computed batch by batch (sentences of
        similar lengths together) by the same graph that serves them."""
        return self.encoder.pooled(sentences, batch_size)

    # autograph=False: straight-line code; autograph would rewrite the whole Keras model at every trace.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False)
    def embed(self, text):
        """``text`` [B] -> ``{"embedding": float32 [B, H]}`` ([B, k] with whitening)."""
        return {"embedding": self.encoder(text)}

    def signatures(self):
        return {"serving_default": self.embed}


def export_embedder(run_dir, model_base_path, pooling=None, normalize=None, sequence_length=None, whitening=None,
                    whitening_dim=None, version=None, overwrite=False):
    """Export the BERT run ``run_dir`` as an embedder SavedModel in ``model_base_path/<version>/``.

    ``pooling`` ("cls" or "mean"), ``normalize`` and ``sequence_length`` default to the run's recorded
    sentence-transformers settings, else mean pooling, L2-normalized, the model's position limit.
    ``whitening``: a corpus file (one sentence per line) embedded with this pooling to fit BERT-whitening's ``mu``
    and ``W`` (``whitening_dim`` = k columns kept, default H), applied in graph before the normalization and
    recorded in the metadata as ``whitening: {"dim", "corpus", "sentences"}`` (null without).
    Returns the version directory's path.
    """
    if whitening_dim is not None and whitening is None:
        raise ValueError("whitening_dim needs a whitening corpus (--whitening CORPUS)")
    sentences = read_sentence_lines(whitening) if whitening is not None else None   # a bad corpus fails first
    backbone, tokenizer, options = bert_run_parts(run_dir)
    pooling, normalize, sequence_length = recorded_settings(options, pooling, normalize, sequence_length)
    module = EmbedderModule(backbone, tokenizer, pooling=pooling, normalize=normalize,
                            sequence_length=sequence_length)
    whitening_record = None
    if whitening is not None:
        try:
            mean, kernel = fit_whitening(module.pooled_embeddings(sentences), whitening_dim)
        except ValueError as e:
            raise ValueError(f"whitening on {whitening}: {e}") from None
        module = EmbedderModule(backbone, tokenizer, pooling=pooling, normalize=normalize,
                                sequence_length=sequence_length, whitening=(mean, kernel))
        whitening_record = {"dim": module.embedding_size, "corpus": os.path.abspath(whitening),
                            "sentences": len(sentences)}
    metadata = {"pooling": module.pooling, "normalize": module.normalize, "sequence_length": module.sequence_length,
                "embedding_size": module.embedding_size, "lower_case": getattr(tokenizer, "lower_case", None),
                "whitening": whitening_record}
    return save_version(module, model_base_path, version=version, overwrite=overwrite, metadata=metadata)


def export_embedder_run(run, to, pooling=None, normalize=None, sequence_length=None, whitening=None,
                        whitening_dim=None, version=None, overwrite=False):
    """``kerasplm export embedder``: prints and returns the version directory."""
    path = export_embedder(run, to, pooling=pooling, normalize=normalize, sequence_length=sequence_length,
                           whitening=whitening, whitening_dim=whitening_dim, version=version, overwrite=overwrite)
    print(path)
    return path
