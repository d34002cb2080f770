"""Sentence-BERT (Reimers & Gurevych 2019): a siamese BERT fine-tuned so that its pooled outputs compare by cosine.

One BERT (shared weights) encodes each sentence of an example into u = pool(BERT(s)) (``cls``, ``mean`` (the paper's
best) or ``max`` over the real tokens: :func:`kerasplm.models.bert.classifier.pool_sequence`); three objectives
(section 3 of the paper; seed 003_*, "sentence BERT"):

* classification (NLI pairs, k labels): ``o = softmax(W_t [u; v; |u − v|])``, ``W_t ∈ R^{3n × k}``, cross-entropy;
* regression (STS pairs, gold score s ∈ [0, 1]): ``(cos(u, v) − s)²`` (mean squared error);
* triplet (anchor a, positive p, negative n): ``max(‖a − p‖ − ‖a − n‖ + ε, 0)``, Euclidean distance, ε = 1.

Only the encoder is kept for use: the model's call is the sentence embedding
(:class:`~kerasplm.models.bert.classifier.SentenceEncoder`), which the embedder export reproduces; ``W_t`` serves the
classification objective's training and its held-out accuracy.

Training batches hold the k sentences of B examples (k = 2, or 3 for triplets) as one input dict of ``(B, k, T)``
tensors: one backbone pass over the B·k rows, and a batch split along its first axis (several replicas) keeps each
example's sentences together. Batches are ``(inputs, labels)`` (int class ids, or float scores) or, for triplets,
``inputs`` alone.
"""
import keras
import numpy as np
import tensorflow as tf

from kerasplm.models.bert.classifier import SentenceEncoder, classifier_head
from kerasplm.training.losses import classification_loss_sums

__all__ = ["BertSentenceBert", "OBJECTIVES", "pair_features", "cosine_similarity", "euclidean_distance",
           "triplet_losses", "pearson", "spearman"]

OBJECTIVES = ("classification", "regression", "triplet")
# The squared distance below which the Euclidean distance is taken at this floor: sqrt's gradient is infinite at 0
# (a sentence compared with itself, without dropout), and the distance's error is at most 1e-6.
_SQUARED_DISTANCE_FLOOR = 1e-12


def pair_features(u, v):
    """The classification objective's features ``[u; v; |u − v|]``: ``(B, H)`` twice -> ``(B, 3H)``."""
    return tf.concat([u, v, tf.abs(u - v)], axis=-1)


def cosine_similarity(u, v):
    """``cos(u_b, v_b)`` per row: ``(B, H)`` twice -> ``(B,)`` (a zero vector has cosine 0 with anything)."""
    return tf.reduce_sum(tf.math.l2_normalize(u, axis=-1) * tf.math.l2_normalize(v, axis=-1), axis=-1)


def euclidean_distance(x, y):
    """``‖x_b − y_b‖₂`` per row: ``(B, H)`` twice -> ``(B,)`` (the squared distance floored at 1e-12: a finite
    gradient where x = y)."""
    return tf.sqrt(tf.maximum(tf.reduce_sum(tf.square(x - y), axis=-1), _SQUARED_DISTANCE_FLOOR))


def triplet_losses(anchor, positive, negative, margin=1.0):
    """``(losses, d(a, p), d(a, n))``, each ``(B,)``: ``losses = max(d(a, p) − d(a, n) + margin, 0)``."""
    positive_distance = euclidean_distance(anchor, positive)
    negative_distance = euclidean_distance(anchor, negative)
    return tf.nn.relu(positive_distance - negative_distance + margin), positive_distance, negative_distance


@keras.saving.register_keras_serializable(package="kerasplm")
class BertSentenceBert(SentenceEncoder):
    """Sentence-BERT on a :class:`~kerasplm.models.bert.backbone.BertBackbone` (see the module docstring).

    Args:
      backbone: the BERT encoder (shared by every sentence of an example).
      objective: ``"classification"``, ``"regression"`` or ``"triplet"``.
      pooling: ``"cls"``, ``"mean"`` (default, the paper's) or ``"max"``.
      num_labels: classes of the classification objective (none for the others).
      labels: their names, in the order of ``W_t``'s outputs (kept in the config).
      margin: ε of the triplet objective (1, the paper's).
      preprocessor: optional :class:`kerasplm.text.BertPreprocessor` (:meth:`embed_texts`).
    Call: the backbone's input dict ``(N, T)`` -> float32 sentence embeddings ``(N, H)``.
    """

    def __init__(self, backbone, objective="classification", pooling="mean", num_labels=None, labels=None,
                 margin=1.0, preprocessor=None, **kwargs):
        super().__init__(backbone, pooling=pooling, preprocessor=preprocessor, **kwargs)
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
        self.objective = objective
        labels = [str(name) for name in (labels or [])]
        if objective == "classification":
            num_labels = len(labels) if num_labels is None else num_labels
            if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 2:
                raise ValueError(f"the classification objective needs num_labels >= 2, got {num_labels!r}")
            if labels and len(labels) != num_labels:
                raise ValueError(f"{len(labels)} label names for {num_labels} classes (num_labels)")
        elif num_labels or labels:
            raise ValueError(f"the {objective} objective takes no labels (num_labels, labels)")
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin > 0:
            raise ValueError(f"margin must be a number > 0, got {margin!r}")
        self.num_labels, self.labels, self.margin = num_labels or None, labels, float(margin)
        self.head = None
        if objective == "classification":   # W_t (with a bias) over [u; v; |u − v|]
            _, self.head = classifier_head(num_labels, 3 * backbone.config.hidden_size,
                                           backbone.config.initializer_range, 0.0)
        self.built = True

    @property
    def columns(self):
        """Sentences per example: 3 for triplets, else 2."""
        return 3 if self.objective == "triplet" else 2

    def embed_columns(self, inputs, training=None):
        """``inputs`` of ``(B, k, T)`` tensors -> the embeddings of every sentence, float32 ``(B, k, H)``."""
        width = tf.shape(inputs["token_ids"])[-1]
        flat = {key: tf.reshape(value, [-1, width]) for key, value in inputs.items()}
        embeddings = self(flat, training=training)
        return tf.reshape(embeddings, [-1, self.columns, self.backbone.config.hidden_size])

    def pair_logits(self, u, v):
        """The classification objective's logits ``W_t [u; v; |u − v|] + b``: ``(B, H)`` twice -> float32
        ``(B, num_labels)``."""
        if self.head is None:
            raise ValueError(f"the {self.objective} objective has no classification head")
        return tf.cast(self.head(pair_features(tf.cast(u, tf.float32), tf.cast(v, tf.float32))), tf.float32)

    # Straight-line code: autograph (the Trainer's tf.function) need not rewrite it and the whole model below it.
    @tf.autograph.experimental.do_not_convert
    def compute_loss_sums(self, batch, training):
        """``batch`` -> the Trainer's sums: classification ``{"loss": Σ CE, "weight": B, "accuracy"}``; regression
        ``{"loss": Σ (cos(u, v) − s)², "weight": B}``; triplet ``{"loss": Σ max(d_ap − d_an + ε, 0), "weight": B,
        "accuracy": rows with d_ap < d_an}``."""
        if self.objective == "triplet":
            inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
            embeddings = self.embed_columns(inputs, training=training)
            losses, positive, negative = triplet_losses(embeddings[:, 0], embeddings[:, 1], embeddings[:, 2],
                                                        self.margin)
            return {"loss": tf.reduce_sum(losses), "weight": tf.cast(tf.shape(losses)[0], tf.float32),
                    "accuracy": tf.reduce_sum(tf.cast(positive < negative, tf.float32))}
        inputs, targets = batch
        embeddings = self.embed_columns(inputs, training=training)
        u, v = embeddings[:, 0], embeddings[:, 1]
        if self.objective == "classification":
            return classification_loss_sums(targets, self.pair_logits(u, v))
        error = cosine_similarity(u, v) - tf.cast(targets, tf.float32)
        return {"loss": tf.reduce_sum(tf.square(error)), "weight": tf.cast(tf.shape(error)[0], tf.float32)}

    def get_config(self):
        return {**super().get_config(), "objective": self.objective, "num_labels": self.num_labels,
                "labels": list(self.labels), "margin": self.margin}


# ------------------------------------------------------------------------------------------------ correlations
def pearson(x, y):
    """Pearson's r of two equally long vectors (0 when either is constant)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x @ x) * (y @ y))
    return float(x @ y / denominator) if denominator > 0 else 0.0


def _average_ranks(x):
    """Ranks 1..n of ``x``, ties given the mean of the ranks they span (as ``scipy.stats.rankdata``)."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), np.float64)
    ranks[order] = np.arange(1, len(x) + 1)
    _, first, counts = np.unique(x[order], return_index=True, return_counts=True)
    for start, count in zip(first, counts):
        if count > 1:
            ranks[order[start:start + count]] = start + (count + 1) / 2.0
    return ranks


def spearman(x, y):
    """Spearman's ρ: Pearson's r of the average ranks (ties share their mean rank)."""
    return pearson(_average_ranks(x), _average_ranks(y))
