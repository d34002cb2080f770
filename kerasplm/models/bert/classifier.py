"""Task models on the BERT backbone (Devlin et al. 2019, section 4), each owning its loss and metrics.

* :func:`pool_sequence`: sentence embeddings from the sequence output, ``[CLS]``, the mean or the max over real
  tokens (Sentence-BERT, Reimers & Gurevych 2019);
* :class:`SentenceEncoder`: the base of the tasks whose call is such an embedding (SimCSE, Sentence-BERT): what the
  embedder export (:mod:`kerasplm.models.sentence_embedding.embedder_export`) computes from their backbone;
* :class:`BertClassifier`: sequence classification of a sentence or a sentence pair on the pooled ``[CLS]``
  output, ``logits = Drop(pooled) W + b`` (section 4.1), or on the mean of the real tokens' hidden states
  (``pooling="mean"``); cross-entropy, or mean squared error when ``num_labels == 1`` (regression, e.g. STS-B);
* :func:`classification_metrics` (:mod:`kerasplm.training.metrics`, importable here as before): accuracy, F1
  (binary, or macro over classes) and Matthews' correlation coefficient, exact over a whole evaluation set.
"""
import keras
import numpy as np
import tensorflow as tf

from kerasplm.layers.dropout import Dropout
from kerasplm.models.base import Task
from kerasplm.models.bert.backbone import BertBackbone, ChecksBackboneVocabulary
from kerasplm.training.losses import classification_loss_sums
# The classifiers' figures live on the training floor (every family's classifier jobs use them).
from kerasplm.training.metrics import classification_metrics  # noqa: F401

POOLINGS = ("cls", "mean", "max")
# sentence-transformers' pooling modes (``1_Pooling/config.json``: what the converter records and the embedder
# export reads from a run's options) -> ours.
SENTENCE_TRANSFORMERS_POOLING = {"cls_token": "cls", "mean_tokens": "mean", "max_tokens": "max"}


def pool_sequence(sequence_output, padding_mask, pooling="mean"):
    """``(B, T, H)`` hidden states, ``(B, T)`` mask (1 = real token) -> ``(B, H)``.

    ``"cls"``: the hidden state at position 0; ``"mean"``: sum of real positions / their number
    (sentence-transformers' mean pooling; a row without real tokens gives zeros); ``"max"``: the elementwise
    maximum over the real positions, padding set to the dtype's lowest value first so that it never wins (a row
    without real tokens gives zeros).
    """
    if pooling == "cls":
        return sequence_output[:, 0]
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if pooling == "max":
        real = tf.cast(padding_mask, tf.bool)[:, :, tf.newaxis]
        lowest = tf.constant(sequence_output.dtype.min, sequence_output.dtype)
        maximum = tf.reduce_max(tf.where(real, sequence_output, lowest), axis=1)
        return tf.where(tf.reduce_any(real, axis=1), maximum, tf.zeros_like(maximum))
    mask = tf.cast(padding_mask, sequence_output.dtype)[:, :, tf.newaxis]
    total = tf.reduce_sum(sequence_output * mask, axis=1)
    return total / tf.maximum(tf.reduce_sum(mask, axis=1), tf.cast(1e-9, sequence_output.dtype))


def recorded_pooling(options):
    """The pooling (one of :data:`POOLINGS`) a run's options record of its sentence-transformers model
    (``sentence_embedding``, as the converter and the sentence-embedding jobs write it), or None when they record
    none. A recorded mode we do not have (or several) is refused in one line: the caller must choose."""
    modes = (options.get("sentence_embedding") or {}).get("pooling")
    if not modes:
        return None
    if len(modes) != 1 or modes[0] not in SENTENCE_TRANSFORMERS_POOLING:
        raise ValueError(f"the run's sentence-transformers pooling {modes} is not one of "
                         f"{sorted(SENTENCE_TRANSFORMERS_POOLING)}: choose pooling "
                         f"{' or '.join(map(repr, POOLINGS))}")
    return SENTENCE_TRANSFORMERS_POOLING[modes[0]]


def sentence_embedding_record(pooling, normalize):
    """What a sentence-embedding run records in its options as ``sentence_embedding`` (sentence-transformers'
    terms, as the converter writes them), so that ``kerasplm export embedder --run`` pools as it was trained."""
    modes = {ours: theirs for theirs, ours in SENTENCE_TRANSFORMERS_POOLING.items()}
    return {"pooling": [modes[pooling]], "normalize": bool(normalize)}


def real_token_mask(inputs):
    """The ``(B, T)`` padding mask of a backbone input dict (all ones when it has none)."""
    padding_mask = inputs.get("padding_mask")
    return tf.ones_like(inputs["token_ids"]) if padding_mask is None else padding_mask


def classifier_head(num_labels, width, initializer_range, dropout):
    """``(Dropout, Dense(num_labels))`` of a classification head over ``width``-wide features (truncated-normal
    kernel initialisation with ``initializer_range``, as BERT's and GPT's), built so its weights exist at once."""
    head = keras.layers.Dense(num_labels, kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
                              name="classifier")
    head.build((None, width))
    return Dropout(dropout, name="classifier_dropout"), head


class SentenceEncoder(ChecksBackboneVocabulary, Task):
    """Base of the task models whose call is a sentence embedding (SimCSE, Sentence-BERT): the backbone's final
    states pooled over the real tokens (:func:`pool_sequence`), float32 ``(B, H)``, neither normalized nor passed
    through any head, which is what the embedder export computes from the same backbone and pooling.

    Args: ``backbone`` (a :class:`BertBackbone`), ``pooling`` (one of :data:`POOLINGS`), ``preprocessor`` (a
    :class:`kerasplm.text.BertPreprocessor`, for :meth:`embed_texts`). Subclasses add their loss.
    """

    backbone_class = BertBackbone

    def __init__(self, backbone, pooling="mean", preprocessor=None, **kwargs):
        super().__init__(backbone, preprocessor=preprocessor, **kwargs)
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        self.pooling = pooling

    def call(self, inputs, training=None):
        outputs = self.backbone(inputs, training=training)
        return tf.cast(pool_sequence(outputs["sequence_output"], real_token_mask(inputs), self.pooling), tf.float32)

    def embed_texts(self, texts, batch_size=128, preprocessor=None):
        """Test-time embeddings (no dropout) of a list of strings, ``batch_size`` at a time through ``preprocessor``
        (default: the model's): numpy float32 ``(N, H)``."""
        preprocessor = preprocessor or self.preprocessor
        if preprocessor is None:
            raise ValueError(f"embed_texts needs a preprocessor ({type(self).__name__}(..., preprocessor=...))")
        chunks = [self(preprocessor(tf.constant(list(texts[i:i + batch_size]), tf.string)), training=False).numpy()
                  for i in range(0, len(texts), batch_size)]
        return np.concatenate(chunks) if chunks else np.zeros((0, self.backbone.config.hidden_size), np.float32)

    def get_config(self):
        return {**super().get_config(), "pooling": self.pooling}


@keras.saving.register_keras_serializable(package="kerasplm")
class BertClassifier(ChecksBackboneVocabulary, Task):
    """BERT sequence classifier (or regressor when ``num_labels == 1``).

    Args:
      backbone: a :class:`kerasplm.models.bert.backbone.BertBackbone`.
      num_labels: number of classes; 1 = regression (one real-valued output, mean squared error).
      preprocessor: optional :class:`kerasplm.text.BertPreprocessor` (strings -> inputs) for :meth:`predict_texts`.
      dropout: dropout on the pooled output before the classification layer.
      pooling: ``"cls"`` (the paper's: the backbone's tanh pooler on ``h_L[:, 0]``), ``"mean"`` or ``"max"`` (the
        mean or maximum of ``h_L`` over real tokens, :func:`pool_sequence`; the pooler is then unused). Mean pooling
        reads the token states that masked-LM pretraining trains directly; the ``[CLS]`` state is trained only by the
        sentence task.
      labels: the class names, in the order of the outputs (the training file's; empty for regression).
      pair_input: the model was trained on sentence pairs (its preprocessor is called with ``text, text_pair``).
    ``labels`` and ``pair_input`` are part of the config: a loaded run answers with the names it was trained on.
    Call: the backbone's input dict -> float32 logits ``(B, num_labels)`` (regression: ``(B, 1)`` values).
    Training batches are ``(inputs, labels)``: int labels ``(B,)``, or float targets ``(B,)`` for regression.
    """

    backbone_class = BertBackbone

    def __init__(self, backbone, num_labels, preprocessor=None, dropout=0.1, pooling="cls", labels=None,
                 pair_input=False, **kwargs):
        super().__init__(backbone, preprocessor=preprocessor, **kwargs)
        if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
            raise ValueError(f"num_labels must be a positive integer (1 = regression), got {num_labels!r}")
        self.labels = check_label_names(labels, num_labels)
        self.pair_input = bool(pair_input)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        self.num_labels, self.dropout_rate, self.pooling = num_labels, float(dropout), pooling
        self.head_dropout, self.head = classifier_head(num_labels, backbone.config.hidden_size,
                                                       backbone.config.initializer_range, dropout)
        self.built = True

    @property
    def is_regression(self):
        return self.num_labels == 1

    def call(self, inputs, training=None):
        return self.forward(inputs, training=training)[0]

    def forward(self, inputs, training=None, output_hidden_states=False, output_attentions=False):
        """``(logits, the backbone's outputs)`` in one pass: the call's logits, and the backbone's dict with its
        ``hidden_states`` / ``attentions`` when asked for (what distillation's intermediate losses read)."""
        outputs = self.backbone(inputs, training=training, output_hidden_states=output_hidden_states,
                                output_attentions=output_attentions)
        if self.pooling == "cls":
            pooled = outputs["pooled_output"]
        else:
            pooled = pool_sequence(outputs["sequence_output"], real_token_mask(inputs), self.pooling)
        return tf.cast(self.head(self.head_dropout(pooled, training=training)), tf.float32), outputs

    # Straight-line code: autograph (the Trainer's tf.function) need not rewrite it and the whole model below it.
    @tf.autograph.experimental.do_not_convert
    def compute_loss_sums(self, batch, training):
        """``batch = (inputs, labels)`` -> ``{"loss": sum, "weight": B[, "accuracy": correct]}``."""
        inputs, labels = batch
        logits = self(inputs, training=training)
        count = tf.cast(tf.shape(logits)[0], tf.float32)
        if self.is_regression:
            error = logits[:, 0] - tf.cast(labels, tf.float32)
            return {"loss": tf.reduce_sum(tf.square(error)), "weight": count}
        return classification_loss_sums(labels, logits)

    def predict_texts(self, texts, pairs=None, batch_size=64):
        """Class probabilities ``(N, C)`` (regression: values ``(N,)``) for lists of strings, via the preprocessor."""
        logits = logits_for_texts(self, texts, pairs, batch_size)
        return logits[:, 0] if self.is_regression else tf.nn.softmax(logits).numpy()

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels, "dropout": self.dropout_rate,
                "pooling": self.pooling, "labels": list(self.labels), "pair_input": self.pair_input}


def check_label_names(labels, num_labels):
    """``labels`` as a list of str: one name per output, or none (regression, or names not given)."""
    labels = [str(name) for name in (labels or [])]
    if labels and len(labels) != num_labels:
        raise ValueError(f"{len(labels)} label names for {num_labels} outputs (num_labels)")
    return labels


def logits_for_texts(task, texts, pairs=None, batch_size=64):
    """``task(task.preprocessor(texts[, pairs]))`` in batches of ``batch_size`` strings -> numpy float32 logits
    ``(N, C)`` (``(0, task.num_labels)`` for no text). Every classifier task's ``predict_texts`` uses it."""
    if task.preprocessor is None:
        raise ValueError(f"predict_texts needs a preprocessor ({type(task).__name__}(..., preprocessor=...))")
    outputs = []
    for start in range(0, len(texts), batch_size):
        chunk = tf.constant(list(texts[start:start + batch_size]), tf.string)
        pair = None if pairs is None else tf.constant(list(pairs[start:start + batch_size]), tf.string)
        outputs.append(task(task.preprocessor(chunk, pair), training=False).numpy())
    return np.concatenate(outputs) if outputs else np.zeros((0, task.num_labels), np.float32)
