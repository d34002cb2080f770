"""BERT token classification (named-entity tagging), BERT paper section 4.3.

    logits = Drop(h_L) W + b          h_L: the backbone's sequence_output (batch, seq_len, H); W: (H, num_labels)

Each word is labelled at its FIRST word piece; its other pieces, [CLS], [SEP] and padding carry weight 0
in the loss (the paper: "we use the representation of the first sub-token as the input to the token-level
classifier"). :class:`BertTaggerPreprocessor` makes that alignment in graph:

    words    [["Johanson", "lives", "in", "1996-08-30"]]
    pieces   [CLS] johan ##son lives in 1996 - 08 - 30 [SEP]
    weights    0     1     0     1    1   1   0  0  0  0   0
    word_index -1    0    -1     2... (the word whose first piece sits there, -1 elsewhere)

so a tagger's per-piece predictions read back to one tag per word by ``word_index``.
"""
import keras
import tensorflow as tf

from kerasplm.layers.dropout import Dropout
from kerasplm.models.base import Task
from kerasplm.models.bert import BertBackbone
from kerasplm.text.preprocessing import Preprocessor, pack_segments, pad_packed

__all__ = ["BertTokenClassifier", "BertTaggerPreprocessor", "IGNORED"]

IGNORED = -1            # word_index of the positions that carry no word's label


@keras.saving.register_keras_serializable(package="kerasplm")
class BertTokenClassifier(Task):
    """A linear tagging head over a :class:`BertBackbone`.

    Args:
      backbone: the BERT encoder.
      num_labels: number of tags (``len(label_vocabulary)``).
      dropout: dropout on ``sequence_output`` before the head (BERT's 0.1).
    Call: the backbone's input dict -> float32 logits ``(batch, seq_len, num_labels)``.
    Loss (``compute_loss_sums``): ``batch`` is :class:`BertTaggerPreprocessor`'s dict (``token_ids``,
    ``segment_ids``, ``padding_mask``, ``labels``, ``label_weights``) or ``(inputs, labels, label_weights)``;
    returns the weighted cross-entropy sum, the weight sum and the number of correct weighted tokens.
    """

    backbone_class = BertBackbone

    def __init__(self, backbone, num_labels, dropout=0.1, preprocessor=None, **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
            raise ValueError(f"num_labels must be a positive integer, got {num_labels!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.num_labels, self.dropout_rate = num_labels, float(dropout)
        self.dropout = Dropout(dropout, name="head_dropout")
        init = keras.initializers.TruncatedNormal(stddev=backbone.config.initializer_range)
        self.head = keras.layers.Dense(num_labels, kernel_initializer=init, name="tagger_head")
        self.build()

    def build(self, input_shape=None):
        self.head.build((None, None, self.backbone.config.hidden_size))
        self.built = True

    def call(self, inputs, training=None):
        hidden = self.backbone(inputs, training=training)["sequence_output"]
        return tf.cast(self.head(self.dropout(hidden, training=training)), tf.float32)

    def compute_loss_sums(self, batch, training):
        if isinstance(batch, dict):
            inputs = {k: batch[k] for k in ("token_ids", "segment_ids", "padding_mask") if k in batch}
            labels, weights = batch["labels"], batch["label_weights"]
        else:
            inputs, labels, weights = batch
        logits = self(inputs, training=training)
        labels = tf.cast(labels, tf.int32)
        weights = tf.cast(weights, tf.float32)
        cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
        return {"loss": tf.reduce_sum(cross_entropy * weights), "weight": tf.reduce_sum(weights),
                "accuracy": tf.reduce_sum(correct * weights)}

    @classmethod
    def from_preset(cls, preset, num_labels, dropout=0.1, preprocessor=None, **overrides):
        """A tagger over ``BertBackbone.from_preset(preset, **overrides)`` (random weights)."""
        return cls(BertBackbone.from_preset(preset, **overrides), num_labels, dropout, preprocessor, name=preset)

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels, "dropout": self.dropout_rate}


class BertTaggerPreprocessor(Preprocessor):
    """Words (and their label ids) -> BERT inputs with labels on the first word piece of every word.

    Args:
      tokenizer: a :class:`kerasplm.text.WordPieceTokenizer` whose vocabulary holds [CLS] and [SEP].
      sequence_length: the model's width L, [CLS] and [SEP] included; longer sentences lose their last
        pieces (a word whose first piece is cut gets no label and no prediction).
    Call: ``words`` tf.string ``[batch, (words)]`` (ragged, or a list of lists of str) and optional
    ``labels`` int ``[batch, (words)]`` -> dict of ``(batch, L)`` tensors: int64 ``token_ids``,
    ``segment_ids`` (0), ``padding_mask`` (1 = real), float32 ``label_weights`` (1 at each kept word's
    first piece), int64 ``word_index`` (that word's index in its sentence, -1 elsewhere) and, with labels,
    int64 ``labels`` (the word's label at its first piece, 0 elsewhere).
    """

    def __init__(self, tokenizer, sequence_length=128, name=None):
        if sequence_length is None or sequence_length < 3:
            raise ValueError(f"sequence_length must be an integer >= 3 ([CLS], a piece, [SEP]), got "
                             f"{sequence_length!r}")
        super().__init__(sequence_length, pad_id=tokenizer.pad_id, name=name)
        self.tokenizer = tokenizer
        self.cls_id, self.sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")

    @property
    def special_token_ids(self):
        return {"pad": self.pad_id, "cls": self.cls_id, "sep": self.sep_id}

    def word_pieces(self, words):
        """``words [batch, (words)]`` -> int64 piece ids ragged ``[batch, (words), (pieces)]``; a word that
        normalizes to nothing (only control characters) becomes one [UNK], so it keeps its label."""
        pieces = self.tokenizer.tokenize(words.flat_values)                    # [n_words, (pieces)]
        empty = tf.equal(pieces.row_lengths(), 0)[:, None]
        unk = tf.fill(tf.shape(empty), tf.constant(self.tokenizer.unk_id, tf.int64))
        pieces = tf.concat([pieces, tf.ragged.boolean_mask(unk, empty)], axis=1)
        return tf.RaggedTensor.from_row_splits(pieces, words.row_splits)

    def __call__(self, words, labels=None):
        if not isinstance(words, tf.RaggedTensor):
            words = tf.ragged.constant(words, dtype=tf.string) if isinstance(words, list) else words
        pieces = self.word_pieces(words)                                       # [batch, (words), (pieces)]
        # Per piece: is it its word's first, and which word (index within the sentence) it belongs to.
        within_word = tf.ragged.range(pieces.values.row_lengths())            # 0, 1, ... inside each word
        word_in_sentence = tf.ragged.range(words.row_lengths()).flat_values    # per flat word
        word_index = tf.where(tf.equal(within_word.flat_values, 0),
                              tf.repeat(word_in_sentence, pieces.values.row_lengths()), IGNORED)
        per_piece = {"word_index": word_index}
        if labels is not None:
            if not isinstance(labels, tf.RaggedTensor):
                labels = tf.ragged.constant(labels, dtype=tf.int64) if isinstance(labels, list) else labels
            flat_labels = tf.repeat(tf.cast(labels.flat_values, tf.int64), pieces.values.row_lengths())
            per_piece["labels"] = tf.where(word_index >= 0, flat_labels, 0)

        def by_sentence(flat):                                                  # [batch, (pieces)]
            return pieces.with_flat_values(flat).merge_dims(1, 2)

        token_ids, segment_ids = pack_segments([by_sentence(pieces.flat_values)], self.cls_id, self.sep_id,
                                               max_length=self.sequence_length)
        packed = pad_packed(token_ids, segment_ids, self.sequence_length, pad_id=self.pad_id)
        out = {"token_ids": packed["token_ids"], "segment_ids": packed["segment_ids"],
               "padding_mask": packed["input_mask"]}
        budget = self.sequence_length - 2
        for key, flat in per_piece.items():
            ragged = by_sentence(flat)[:, :budget]
            edge = tf.RaggedTensor.from_tensor(tf.fill([ragged.nrows(), 1], tf.constant(
                IGNORED if key == "word_index" else 0, tf.int64)))
            ragged = tf.concat([edge, ragged, edge], axis=1)                     # [CLS] ... [SEP]
            out[key] = ragged.to_tensor(default_value=IGNORED if key == "word_index" else 0,
                                        shape=[None, self.sequence_length])
        out["label_weights"] = tf.cast(out["word_index"] >= 0, tf.float32)
        return out
