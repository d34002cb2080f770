"""Sentence-BERT on a BERT run: ``kerasplm finetune bert-sbert --init RUN_DIR --train TSV --objective ...``.

    summary = finetune_bert_sbert("runs/sbert", init="runs/minilm", train="nli.tsv", dev="nli_dev.tsv")
    summary = finetune_bert_sbert("runs/sts", init="runs/minilm", train="sts.tsv", objective="regression",
                                  score_scale=5)
    kerasplm export embedder --run runs/sbert --to export/sbert      # the run's pooling, recorded

Data (tab-separated, one example per line, no header unless ``--header``), by objective
(:class:`kerasplm.models.sentence_embedding.sbert.BertSentenceBert`):

* ``classification``: sentence1, sentence2, label (a class name: NLI's entailment / neutral / contradiction);
* ``regression``: sentence1, sentence2, score, a number in [0, ``score_scale``] divided by ``score_scale``;
* ``triplet``: anchor, positive, negative.

A row with another number of columns, an empty sentence, a score that is not a number or lies outside the range,
and a file without rows fail in one line naming the file and the line (:func:`read_sbert_tsv`).

Recipe (the paper's, section 4): batches of 16, one epoch, AdamW at 2e-5 with linear warmup over 10% of the steps,
mean pooling by default (the optimizer and schedule: :mod:`kerasplm.jobs.finetuning`). Run directory: family
``bert_sbert``; ``model`` the :class:`BertSentenceBert` (backbone, objective, pooling, labels, margin),
``preprocessor`` its :class:`BertPreprocessor` over asset ``vocab``, the options' ``sentence_embedding`` the pooling
in sentence-transformers' terms (:class:`~kerasplm.models.sentence_embedding.job.SentenceEmbeddingJob`), so that
``kerasplm export embedder --run`` serves the model's own embeddings. ``metrics.json`` with ``--dev``: accuracy,
F1 and MCC (classification), Spearman's ρ and Pearson's r of cos(u, v) against the gold scores (regression, the
paper's STS figure), the share of triplets with d(a, p) < d(a, n) and their mean loss (triplet). Resumable like
every kerasplm job.
"""
import math

import numpy as np
import tensorflow as tf

from kerasplm.data.sentences import read_tsv_rows
from kerasplm.models.sentence_embedding.manifest import SentenceBertOptions
from kerasplm.jobs.finetuning import label_ids
from kerasplm.models.sentence_embedding.job import SentenceEmbeddingJob
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.sentence_embedding.sbert import BertSentenceBert, pearson, spearman
from kerasplm.text.preprocessing import trim_to_bucket
from kerasplm.training.metrics import classification_metrics

FAMILY = "bert_sbert"
# The columns of each objective's rows, as messages name them.
COLUMNS = {"classification": ("sentence1", "sentence2", "label"), "regression": ("sentence1", "sentence2", "score"),
           "triplet": ("anchor", "positive", "negative")}
__all__ = ["SentenceBertOptions", "finetune_bert_sbert", "read_sbert_tsv", "make_sbert_dataset", "sbert_dev_scores"]


def read_sbert_tsv(path, objective, score_scale=1.0, header=False, max_examples=None):
    """``(sentence columns, targets)`` of an objective's TSV file: a list of k lists of strings (k = 2, or 3 for
    triplets) and the labels (class names, as str), the scores divided by ``score_scale`` (float32 numpy, in
    [0, 1]), or None for triplets. One-line errors name the file and line (``path:LINE: ...``)."""
    columns = COLUMNS[objective]
    rows = read_tsv_rows(path, columns, header=header, max_rows=max_examples)
    if objective == "triplet":
        return [list(column) for column in zip(*(fields for _, fields in rows))], None
    sentences = [[fields[0] for _, fields in rows], [fields[1] for _, fields in rows]]
    if objective == "classification":
        return sentences, [fields[2] for _, fields in rows]
    scores = []
    for lineno, fields in rows:
        try:
            score = float(fields[2])
        except ValueError:
            raise ValueError(f"{path}:{lineno}: the score {fields[2]!r} is not a number") from None
        if not (math.isfinite(score) and 0.0 <= score <= score_scale):
            raise ValueError(f"{path}:{lineno}: the score {fields[2]} is outside [0, {score_scale:g}] "
                             f"(score_scale / --score-scale)")
        scores.append(score / score_scale)
    return sentences, np.asarray(scores, np.float32)


def make_sbert_dataset(preprocessor, sentences, targets, batch_size, shuffle=False, seed=0, repeat=False,
                       length_bucket=0):
    """Batches of B examples' k sentences packed by ``preprocessor`` into one input dict of ``(B, k, T)`` tensors,
    with their ``targets`` (``(inputs, targets)``) or alone (``targets`` None: triplets).

    Training batches (``shuffle``/``repeat``) all have ``batch_size`` rows; the seeded shuffle replays the same order
    in every process (exact resume). ``length_bucket`` > 0 cuts each batch's padding to its longest sentence rounded
    up to a multiple of it (:func:`~kerasplm.text.preprocessing.trim_to_bucket`); 0 keeps the preprocessor's width.
    """
    columns = tf.stack([tf.constant(column, tf.string) for column in sentences], axis=1)     # (N, k)
    ds = tf.data.Dataset.from_tensor_slices(columns if targets is None else (columns, tf.constant(targets)))
    if shuffle:
        ds = ds.shuffle(len(sentences[0]), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=repeat)
    k = len(sentences)

    @tf.autograph.experimental.do_not_convert
    def encode(strings, *targets):
        packed = preprocessor(tf.reshape(strings, [-1]))     # (B·k, T): example b's sentences at rows b·k ... b·k+k-1
        inputs = {key: tf.reshape(value, [-1, k, value.shape[-1]]) for key, value in packed.items()}
        if length_bucket:
            inputs = trim_to_bucket(inputs, inputs["padding_mask"], length_bucket)
        return (inputs, *targets) if targets else inputs

    return ds.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(2)


def sbert_dev_scores(model, sentences, targets, batch_size=128):
    """The held-out figures of a :class:`BertSentenceBert` on ``read_sbert_tsv``'s columns (``targets``: class ids
    for classification): ``{"accuracy", "f1", "mcc"}`` of ``argmax W_t [u; v; |u − v|]``; ``{"spearman", "pearson"}``
    of cos(u, v) against the scores; ``{"accuracy", "loss"}``: the share of triplets with ‖a − p‖ < ‖a − n‖ and the
    mean triplet loss at the model's margin; each with ``examples``. Test-time embeddings (no dropout), numpy float64
    for the figures."""
    embeddings = [model.embed_texts(column, batch_size) for column in sentences]
    count = len(embeddings[0])
    if model.objective == "classification":
        logits = np.concatenate([model.pair_logits(embeddings[0][i:i + batch_size], embeddings[1][i:i + batch_size])
                                 .numpy() for i in range(0, count, batch_size)])
        return classification_metrics(targets, logits.argmax(-1), model.num_labels)
    vectors = [e.astype(np.float64) for e in embeddings]
    if model.objective == "regression":
        unit = [v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12) for v in vectors]
        cosines = (unit[0] * unit[1]).sum(-1)
        return {"spearman": spearman(cosines, targets), "pearson": pearson(cosines, targets), "examples": count}
    anchor, positive, negative = vectors
    positive_distance = np.linalg.norm(anchor - positive, axis=-1)
    negative_distance = np.linalg.norm(anchor - negative, axis=-1)
    losses = np.maximum(positive_distance - negative_distance + model.margin, 0.0)
    return {"accuracy": float((positive_distance < negative_distance).mean()), "loss": float(losses.mean()),
            "examples": count}


class BertSentenceBertJob(SentenceEmbeddingJob):
    """``kerasplm finetune bert-sbert``: Sentence-BERT (siamese or triplet BERT) on a BERT run."""

    family, task, options_class, what = FAMILY, "sentence_embedding", SentenceBertOptions, "Sentence-BERT"

    def __init__(self, out, options=None, log=print, **overrides):
        super().__init__(out, options, log, **overrides)
        self.sentences = self.raw_targets = self.labels = None
        self.dev_data = None   # (sentences, targets) of --dev

    def read(self, o, path, max_examples=None):
        return read_sbert_tsv(path, o.objective, o.score_scale, o.header, max_examples)

    def read_examples(self, o):
        if o.train is None:
            raise ValueError("give the training file (train / --train)")
        self.sentences, self.raw_targets = self.read(o, o.train, o.max_examples)
        if o.objective == "classification" and len(set(self.raw_targets)) < 2:   # before the run directory exists
            raise ValueError(f"{o.train}: one label only ({self.raw_targets[0]!r}); classification needs at least two")
        return len(self.sentences[0])

    def targets(self, path, raw):
        """Model targets: class ids among the run's labels (classification), else the scores / None as read."""
        if self.options.objective != "classification":
            return raw
        return label_ids(path, raw, self.labels, regression=False)

    def build_data(self):
        super().build_data()   # the training file, the schedule
        o = self.options
        stored = self.open_encoder()   # the backbone's config, the preprocessor; a new run's config
        if o.objective == "classification":   # a resumed run's labels are its model's, in its order
            self.labels = list(stored.labels) if stored is not None else sorted(set(self.raw_targets))
        sentences, targets, bucket = self.sentences, self.targets(o.train, self.raw_targets), o.length_bucket
        what = {"classification": f"{len(self.labels or [])} labels: " + ", ".join(self.labels or []),
                "regression": f"scores / {o.score_scale:g}", "triplet": "triplets"}[o.objective]
        self.log(f"data: {len(sentences[0])} training examples ({o.objective}, {what}), batches of {o.batch_size}, "
                 f"{o.pooling} pooling")
        self.train_dataset = lambda: make_sbert_dataset(self.preprocessor, sentences, targets, o.batch_size,
                                                        shuffle=True, seed=o.seed, repeat=True, length_bucket=bucket)
        if o.dev is not None:
            dev_sentences, dev_raw = self.read(o, o.dev)
            self.dev_data = (dev_sentences, self.targets(o.dev, dev_raw))

    def build_model(self):
        o = self.options
        classification = o.objective == "classification"
        model = BertSentenceBert(BertBackbone.from_config_object(self.backbone_config), o.objective, o.pooling,
                                 num_labels=len(self.labels) if classification else None,
                                 labels=self.labels if classification else None, margin=o.margin,
                                 preprocessor=self.preprocessor)
        return self.with_starting_weights(model)

    def evaluate(self, trainer, summary):
        if self.labels is not None:
            summary["labels"] = self.labels
        super().evaluate(trainer, summary)

    def score(self, model):
        if self.dev_data is None:
            return None
        return {"dev": sbert_dev_scores(model, *self.dev_data, batch_size=self.options.eval_batch_size)}

    def dev_report(self, summary):
        dev = summary["dev"]
        shown = {"classification": ("accuracy", "f1", "mcc"), "regression": ("spearman", "pearson"),
                 "triplet": ("accuracy", "loss")}[self.options.objective]
        return "dev " + " ".join(f"{k} {dev[k]:.4f}" for k in shown) + f" ({dev['examples']} examples)"


def finetune_bert_sbert(out, options=None, log=print, **overrides):
    """Train (or resume) Sentence-BERT in run directory ``out``; returns the summary (``metrics.json``), with the
    trained :class:`BertSentenceBert` under ``"model"``."""
    return BertSentenceBertJob(out, options, log, **overrides).run()
