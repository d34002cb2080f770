"""Unsupervised SimCSE on a BERT run: ``kerasplm finetune bert-simcse --train TXT --init RUN_DIR ...``.

    summary = finetune_bert_simcse("runs/simcse", train="sentences.txt", init="runs/minilm", steps=500)
    kerasplm export embedder --run runs/simcse --to export/simcse      # [CLS] (or mean) pooling, recorded

Recipe (Gao et al. 2021, section 3 and appendix A): one sentence per line of a plain-text file, batches of
64, sentences cut to 32 word pieces, learning rate 3e-5 decaying linearly to 0, no warmup, no weight decay,
temperature 0.05, dropout 0.1 as the only noise (:class:`kerasplm.models.sentence_embedding.simcse.BertSimCSE`). The
optimizer is the BERT fine-tuning one (:func:`kerasplm.jobs.finetuning.make_optimizer`).

Run directory: family ``bert_simcse``; ``model`` = the :class:`BertSimCSE` (its backbone, ``pooling``, ``mlp``,
``temperature``), ``preprocessor`` = its :class:`BertPreprocessor` over asset ``vocab``; the options record
``sentence_embedding`` in the converter's (sentence-transformers') terms, so ``kerasplm export embedder --run``
pools as the model was trained. ``kerasplm.runs.load_run`` gives the trained :class:`BertSimCSE`.
``metrics.json``: the training summary and, with ``--dev``, uniformity and mean pairwise cosine of the
held-out sentences' embeddings (Wang & Isola 2020). Resumable like every kerasplm job.
"""
import functools

import numpy as np
import tensorflow as tf

from kerasplm.data.sentences import read_sentence_lines
from kerasplm.models.sentence_embedding.manifest import SimCSEOptions
from kerasplm.jobs.finetuning import cut_padding
from kerasplm.models.sentence_embedding.job import SentenceEmbeddingJob
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.sentence_embedding.simcse import BertSimCSE, alignment_uniformity
from kerasplm.models.bert.classifier import SENTENCE_TRANSFORMERS_POOLING

FAMILY = "bert_simcse"
# Our pooling names -> sentence-transformers' (what the embedder export reads from a run's options).
_RECORDED_POOLING = {ours: theirs for theirs, ours in SENTENCE_TRANSFORMERS_POOLING.items()}
__all__ = ["SimCSEOptions", "finetune_bert_simcse", "read_sentences"]


# ``read_sentences(path, max_examples=None)``: the non-empty lines of a UTF-8 text file (stripped), the first
# ``max_examples``; errors name the file (:func:`kerasplm.data.sentences.read_sentence_lines`).
read_sentences = functools.partial(read_sentence_lines, min_sentences=2,
                                   too_few="{count} sentence(s); SimCSE needs at least 2 (in-batch negatives)")


def make_sentence_dataset(preprocessor, sentences, batch_size, seed, length_bucket=0):
    """Endless batches of ``batch_size`` packed sentences (input dicts), in a seeded order every process replays,
    each cut to its longest sentence rounded up to a multiple of ``length_bucket`` (0: the preprocessor's width)."""
    ds = tf.data.Dataset.from_tensor_slices(tf.constant(sentences, tf.string))
    ds = ds.shuffle(len(sentences), seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(batch_size, drop_remainder=True)
    ds = ds.map(tf.autograph.experimental.do_not_convert(preprocessor), num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True)
    return cut_padding(ds, length_bucket).prefetch(2)


def embed_sentences(model, preprocessor, sentences, batch_size=128):
    """Test-time embeddings (no dropout, no MLP) ``(N, H)`` of a list of strings."""
    return model.embed_texts(sentences, batch_size, preprocessor=preprocessor)


def dev_metrics(model, preprocessor, sentences):
    """Uniformity (Wang & Isola) and the mean cosine of distinct sentences on held-out ``sentences``."""
    embeddings = embed_sentences(model, preprocessor, sentences)
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=-1, keepdims=True), 1e-12)
    cosines = (unit @ unit.T)[np.triu_indices(len(unit), k=1)]
    return {**alignment_uniformity(embeddings), "mean_cosine": float(cosines.mean()), "sentences": len(sentences)}


class BertSimCSEJob(SentenceEmbeddingJob):
    """``kerasplm finetune bert-simcse``: unsupervised SimCSE (two dropout views, in-batch negatives) on a BERT run."""

    family, task, options_class, what = FAMILY, "sentence_embedding", SimCSEOptions, "BERT SimCSE"

    def read_examples(self, o):
        if o.train is None:
            raise ValueError("give the training sentences (train / --train)")
        self.sentences = read_sentences(o.train, o.max_examples)
        if len(self.sentences) < o.batch_size:
            raise ValueError(f"{o.train}: {len(self.sentences)} sentences, fewer than batch_size={o.batch_size}")
        return len(self.sentences)

    def build_data(self):
        super().build_data()   # the training sentences, the schedule
        o = self.options
        self.open_encoder()   # the backbone's config, the preprocessor; a new run's config with its pooling
        self.log(f"data: {len(self.sentences)} sentences, batches of {o.batch_size}, {o.pooling} pooling")
        self.train_dataset = make_sentence_dataset(self.preprocessor, self.sentences, o.batch_size, o.seed,
                                                   o.length_bucket)

    def build_model(self):
        o = self.options
        model = BertSimCSE(BertBackbone.from_config_object(self.backbone_config), o.pooling, o.temperature,
                           o.mlp and o.pooling == "cls", preprocessor=self.preprocessor)
        return self.with_starting_weights(model)

    def score(self, model):
        if self.options.dev is None:
            return None
        return {"dev": dev_metrics(model, self.preprocessor, read_sentences(self.options.dev))}

    def dev_report(self, summary):
        dev = summary["dev"]
        return (f"dev uniformity {dev['uniformity']:.3f}, mean cosine {dev['mean_cosine']:.3f} "
                f"({dev['sentences']} sentences)")


def finetune_bert_simcse(out, options=None, log=print, **overrides):
    """Train (or resume) unsupervised SimCSE in run directory ``out``; returns the summary (``metrics.json``),
    with the trained :class:`BertSimCSE` under ``"model"``."""
    return BertSimCSEJob(out, options, log, **overrides).run()
