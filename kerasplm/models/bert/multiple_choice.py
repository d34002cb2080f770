"""BERT multiple choice (SWAG, RACE, ARC ...): one sequence per choice, a softmax over the choices.

Each (context, choice_c) pair is packed as ``[CLS] context [SEP] choice_c [SEP]`` and encoded on its own
(BERT paper, section 4.4, SWAG: "we construct four input sequences, each containing the concatenation of
the given sentence (sentence A) and a possible continuation (sentence B)"):

    inputs   (B, C, T)  ->  flattened (B·C, T)  ->  backbone  ->  pooled [CLS] (B·C, H)
    score_c = Drop(pooled_c) · w + b          (one dense unit shared by all choices)  -> (B, C)
    P(c | context) = softmax_c(score_c)        over the row's real choices only

A row may have fewer choices than the batch's width ``C``: the missing ones are padding choices, all of
whose ``padding_mask`` entries are 0 (:class:`BertMultipleChoicePreprocessor` writes them so); their score
is -1e9, so they get probability 0 and change neither the loss nor the other choices' probabilities.
"""
import keras
import tensorflow as tf

from kerasplm.layers.dropout import Dropout
from kerasplm.models.base import Task
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.training.losses import classification_loss_sums
from kerasplm.text.preprocessing import Preprocessor

__all__ = ["BertMultipleChoice", "BertMultipleChoicePreprocessor", "choice_mask"]

INPUT_KEYS = ("token_ids", "segment_ids", "padding_mask")
_PADDING_CHOICE_SCORE = -1e9


def choice_mask(padding_mask):
    """``(B, C, T)`` token mask -> ``(B, C)`` bool: True for real choices (at least one real token)."""
    return tf.reduce_any(tf.not_equal(padding_mask, 0), axis=-1)


@keras.saving.register_keras_serializable(package="kerasplm")
class BertMultipleChoice(Task):
    """Scores each choice on the pooled ``[CLS]`` output of its own sequence (see the module docstring).

    Args:
      backbone: a :class:`kerasplm.models.bert.backbone.BertBackbone`.
      preprocessor: optional :class:`BertMultipleChoicePreprocessor` (strings -> inputs).
      dropout: dropout on the pooled output before the scoring unit.
    Call: dict of int ``token_ids``, ``segment_ids``, ``padding_mask``, each ``(B, C, T)`` -> float32 choice
    logits ``(B, C)`` (padding choices -1e9). Training batches are ``(inputs, labels)``, int labels ``(B,)``.
    """

    backbone_class = BertBackbone

    def __init__(self, backbone, preprocessor=None, dropout=0.1, **kwargs):
        super().__init__(backbone, preprocessor=preprocessor, **kwargs)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.dropout_rate = float(dropout)
        self.head_dropout = Dropout(dropout, name="choice_dropout")
        self.head = keras.layers.Dense(
            1, kernel_initializer=keras.initializers.TruncatedNormal(stddev=backbone.config.initializer_range),
            name="choice_score")
        self.head.build((None, backbone.config.hidden_size))
        self.built = True

    def call(self, inputs, training=None):
        shape = tf.shape(inputs["token_ids"])                                   # (B, C, T)
        flat = {k: tf.reshape(inputs[k], [-1, shape[2]]) for k in INPUT_KEYS if k in inputs}
        pooled = self.backbone(flat, training=training)["pooled_output"]       # (B·C, H)
        scores = tf.cast(self.head(self.head_dropout(pooled, training=training)), tf.float32)
        scores = tf.reshape(scores, shape[:2])                                 # (B, C)
        if "padding_mask" not in inputs:
            return scores
        return tf.where(choice_mask(inputs["padding_mask"]), scores, _PADDING_CHOICE_SCORE)

    @tf.autograph.experimental.do_not_convert
    def compute_loss_sums(self, batch, training):
        """``batch = (inputs, labels)`` -> ``{"loss": Σ cross-entropy, "weight": B, "accuracy": correct}``."""
        inputs, labels = batch
        return classification_loss_sums(labels, self(inputs, training=training))

    def predict_texts(self, contexts, choices):
        """Choice probabilities ``(N, C)`` for ``contexts`` [N] and ``choices`` [N][c_i] (lists of str)."""
        if self.preprocessor is None:
            raise ValueError("predict_texts needs a preprocessor (BertMultipleChoice(..., preprocessor=...))")
        logits = self(self.preprocessor(contexts, choices), training=False)
        return tf.nn.softmax(logits).numpy()

    def get_config(self):
        return {**super().get_config(), "dropout": self.dropout_rate}


class BertMultipleChoicePreprocessor(Preprocessor):
    """``(context [B], choices [B, (C)])`` strings -> the model's ``(B, C, L)`` inputs, in graph.

    Every choice is packed with its context by ``bert_preprocessor`` (a :class:`kerasplm.text.BertPreprocessor`:
    ``[CLS] context [SEP] choice [SEP]``, HuggingFace's ``longest_first`` truncation to its
    ``sequence_length``, fixed or per-batch width). Rows with fewer choices than the widest row (or than
    ``num_choices`` when given: a fixed width for training) are padded with all-zero choices.

    Args:
      bert_preprocessor: the pair packer to reuse.
      num_choices: fixed choice width ``C`` (None: the most choices of the batch).
    Call: ``context`` tf.string [B]; ``choices`` a ragged or dense tf.string [B, (C)] (or a list of lists)
    -> dict of int64 ``token_ids``, ``segment_ids``, ``padding_mask`` ``(B, C, L)``.
    """

    def __init__(self, bert_preprocessor, num_choices=None, name=None):
        if num_choices is not None and (isinstance(num_choices, bool) or not isinstance(num_choices, int)
                                        or num_choices < 1):
            raise ValueError(f"num_choices must be None or a positive integer, got {num_choices!r}")
        super().__init__(sequence_length=bert_preprocessor.sequence_length, pad_id=bert_preprocessor.pad_id,
                         name=name)
        self.bert_preprocessor = bert_preprocessor
        self.num_choices = num_choices

    @tf.autograph.experimental.do_not_convert
    def __call__(self, context, choices):
        if isinstance(choices, list):
            choices = tf.ragged.constant(choices, dtype=tf.string)
        elif not isinstance(choices, tf.RaggedTensor):
            choices = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(choices, tf.string))
        context = tf.convert_to_tensor(context, tf.string)
        if self.num_choices is not None:
            tf.debugging.assert_less_equal(choices.row_lengths(), tf.cast(self.num_choices, tf.int64),
                                           message=f"a row has more than num_choices={self.num_choices} choices")
        flat = self.bert_preprocessor(tf.repeat(context, choices.row_lengths()), choices.flat_values)  # (N, L)
        shape = [None, self.num_choices, None if not self.bert_preprocessor.pad_to_length else self.sequence_length]
        return {k: tf.RaggedTensor.from_row_lengths(v, choices.row_lengths()).to_tensor(
                    default_value=tf.cast(self.pad_id if k == "token_ids" else 0, v.dtype), shape=shape)
                for k, v in flat.items()}

    @property
    def special_token_ids(self):
        return self.bert_preprocessor.special_token_ids
