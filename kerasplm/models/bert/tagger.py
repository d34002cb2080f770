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

With ``crf=True`` (BERT paper's tagging head plus a linear-chain CRF, :class:`kerasplm.layers.crf.CRF`, as in
the BiLSTM-CRF taggers of Huang et al. 2015 / Lample et al. 2016), the first-piece logits of each sentence,
moved to the front in word order (:func:`first_piece_sequences`), are the CRF's emissions: the loss is the
negative log-likelihood of the word tag sequence (summed, divided by the number of words like the softmax
loss), decoding is Viterbi and a tag's score its marginal probability.
"""
import keras
import tensorflow as tf
import tensorflow_text as tf_text

from kerasplm.layers.crf import CRF
from kerasplm.layers.dropout import Dropout
from kerasplm.models.base import Task
from kerasplm.models.bert.backbone import BertBackbone, ChecksBackboneVocabulary, UntrackedPreprocessor
from kerasplm.models.bert.classifier import check_label_names
from kerasplm.runs.serialization import serializable
from kerasplm.text.preprocessing import Preprocessor, pack_segments, pad_packed
from kerasplm.text.wordpiece import sanitize_utf8

__all__ = ["BertTokenClassifier", "BertTaggerPreprocessor", "IGNORED", "decode_entities", "first_piece_sequences",
           "piece_tags", "split_words_with_offsets", "tag_texts"]

IGNORED = -1            # word_index of the positions that carry no word's label


@keras.saving.register_keras_serializable(package="kerasplm")
class BertTokenClassifier(UntrackedPreprocessor, ChecksBackboneVocabulary, Task):
    """A linear tagging head over a :class:`BertBackbone`.

    Args:
      backbone: the BERT encoder.
      num_labels: number of tags (``len(label_vocabulary)``).
      dropout: dropout on ``sequence_output`` before the head (BERT's 0.1).
      crf: a linear-chain CRF over the words' tags (see the module docstring).
      preprocessor: optional :class:`BertTaggerPreprocessor` (not part of the checkpoint).
      labels: the tag names by id (``O``, ``B-PER`` ...), part of the config.
    Call: the backbone's input dict -> float32 logits ``(batch, seq_len, num_labels)`` (with a CRF: its emissions).
    Loss (``compute_loss_sums``): ``batch`` is :class:`BertTaggerPreprocessor`'s dict (``token_ids``,
    ``segment_ids``, ``padding_mask``, ``labels``, ``label_weights``) or ``(inputs, labels, label_weights)``;
    returns the weighted cross-entropy sum (with a CRF: the sum of the sentences' negative log-likelihoods),
    the weight sum and the number of correct weighted tokens (with a CRF: of the Viterbi path).
    """

    backbone_class = BertBackbone

    def __init__(self, backbone, num_labels, dropout=0.1, preprocessor=None, crf=False, labels=None, **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
            raise ValueError(f"num_labels must be a positive integer, got {num_labels!r}")
        self.labels = check_label_names(labels, num_labels)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.num_labels, self.dropout_rate = num_labels, float(dropout)
        self.dropout = Dropout(dropout, name="head_dropout")
        init = keras.initializers.TruncatedNormal(stddev=backbone.config.initializer_range)
        self.head = keras.layers.Dense(num_labels, kernel_initializer=init, name="tagger_head")
        self.crf = CRF(num_labels, name="crf") if crf else None
        self.build()

    def build(self, input_shape=None):
        self.head.build((None, None, self.backbone.config.hidden_size))
        if self.crf is not None:
            self.crf.build()
        self.built = True

    def call(self, inputs, training=None):
        return self.forward(inputs, training=training)[0]

    def forward(self, inputs, training=None, output_hidden_states=False, output_attentions=False):
        """``(logits, the backbone's outputs)`` in one pass: the call's logits, and the backbone's dict with its
        ``hidden_states`` / ``attentions`` when asked for (what distillation's intermediate losses read)."""
        outputs = self.backbone(inputs, training=training, output_hidden_states=output_hidden_states,
                                output_attentions=output_attentions)
        hidden = outputs["sequence_output"]
        return tf.cast(self.head(self.dropout(hidden, training=training)), tf.float32), outputs

    @staticmethod
    def split_batch(batch):
        """``(inputs, labels, label_weights)`` of a training batch (the preprocessor's dict, or the triple)."""
        if isinstance(batch, dict):
            inputs = {k: batch[k] for k in ("token_ids", "segment_ids", "padding_mask") if k in batch}
            return inputs, batch["labels"], batch["label_weights"]
        return batch

    def compute_loss_sums(self, batch, training):
        inputs, labels, weights = self.split_batch(batch)
        return self.loss_sums(self(inputs, training=training), labels, weights)

    def loss_sums(self, logits, labels, weights):
        """The loss sums of ``logits (B, T, num_labels)`` (see the class docstring)."""
        labels = tf.cast(labels, tf.int32)
        weights = tf.cast(weights, tf.float32)
        if self.crf is not None:
            (emissions, word_labels), words = first_piece_sequences([logits, labels], weights > 0)
            predicted = tf.cast(self.crf.viterbi_decode(emissions, words)[0], tf.int32)
            correct = tf.cast(tf.equal(predicted, word_labels), tf.float32) * tf.cast(words, tf.float32)
            return {"loss": -tf.reduce_sum(self.crf.log_likelihood(emissions, word_labels, words)),
                    "weight": tf.reduce_sum(weights), "accuracy": tf.reduce_sum(correct)}
        cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
        return {"loss": tf.reduce_sum(cross_entropy * weights), "weight": tf.reduce_sum(weights),
                "accuracy": tf.reduce_sum(correct * weights)}

    @classmethod
    def from_preset(cls, preset, num_labels, dropout=0.1, preprocessor=None, crf=False, labels=None, **overrides):
        """A tagger over ``BertBackbone.from_preset(preset, **overrides)`` (random weights)."""
        return cls(BertBackbone.from_preset(preset, **overrides), num_labels, dropout, preprocessor, crf=crf,
                   labels=labels, name=preset)

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels, "dropout": self.dropout_rate,
                "crf": self.crf is not None, "labels": list(self.labels)}


def first_piece_sequences(values, first):
    """Moves each row's first-piece positions to its front, in order: the word sequence a CRF runs over.

    ``values``: a list of ``(batch, L, ...)`` tensors; ``first``: bool ``(batch, L)``. Returns ``(moved values,
    word mask)``, same shapes (a stable sort of the positions, so static shapes, XLA-friendly); the word mask
    is 1 on the first ``count`` positions of each row.
    """
    length = tf.shape(first)[1]
    order = tf.argsort(tf.where(first, 0, 1) * length + tf.range(length)[tf.newaxis], axis=1, stable=True)
    return [tf.gather(v, order, batch_dims=1) for v in values], tf.gather(first, order, batch_dims=1)


def piece_tags(logits, first, crf=None):
    """Per-piece ``(tags int64 (batch, L), scores float32 (batch, L))``, meaningful where ``first``.

    Without a CRF: the argmax of the logits and its softmax probability. With one: the Viterbi path over each
    sentence's words (its first pieces) and the marginal probability of each chosen tag.
    """
    logits = tf.cast(logits, tf.float32)
    if crf is None:
        probabilities = tf.nn.softmax(logits, axis=-1)
        return tf.argmax(probabilities, axis=-1), tf.reduce_max(probabilities, axis=-1)
    length = tf.shape(first)[1]
    positions = tf.broadcast_to(tf.range(length)[tf.newaxis], tf.shape(first))
    (emissions, order), words = first_piece_sequences([logits, positions], first)
    tags = crf.viterbi_decode(emissions, words)[0]
    scores = tf.gather(crf.marginals(emissions, words), tags, batch_dims=2)
    back = tf.argsort(order, axis=1)                                    # the inverse permutation
    return (tf.cast(tf.gather(tags, back, batch_dims=1), tf.int64), tf.gather(scores, back, batch_dims=1))


@serializable
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

    def get_config(self):
        return {"tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                "sequence_length": self.sequence_length, "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "tokenizer": keras.saving.deserialize_keras_object(config["tokenizer"])})

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
            tf.debugging.assert_equal(tf.cast(labels.row_lengths(), tf.int64), tf.cast(words.row_lengths(), tf.int64),
                                      message="labels must hold one label id per word")
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


# ---- raw text in, entity spans out (graph functions: the tagger export runs them) ----

# BERT's basic tokenizer splits at whitespace and makes every punctuation character (Unicode P*, plus the
# ASCII symbols $+<=>^`|~ that BERT counts as punctuation) a word of its own; words are cut the same way.
_PUNCTUATION = r"[\p{P}$+<=>^`|~]"


def split_words_with_offsets(texts):
    """``texts`` tf.string [batch] -> ``(words, byte_starts, byte_ends, char_starts, char_ends)``, each
    ragged [batch, (words)]; ends are exclusive; character offsets count Unicode code points of the text
    (invalid UTF-8 bytes replaced by U+FFFD first)."""
    texts = sanitize_utf8(texts)
    words, byte_starts, byte_ends = tf_text.regex_split_with_offsets(
        texts, delim_regex_pattern=r"\s+|" + _PUNCTUATION, keep_delim_regex_pattern=_PUNCTUATION)
    text_of_word = tf.gather(texts, words.value_rowids())

    def characters_before(byte_offsets):
        prefix = tf.strings.substr(text_of_word, tf.zeros_like(byte_offsets.flat_values), byte_offsets.flat_values)
        return byte_offsets.with_flat_values(tf.cast(tf.strings.length(prefix, unit="UTF8_CHAR"), tf.int64))

    return words, byte_starts, byte_ends, characters_before(byte_starts), characters_before(byte_ends)


def label_tables(label_names):
    """Per label id: ``(is_begin bool [C], type_id int64 [C] (-1 for O), type_names list)``. Labels are
    ``O``, ``B-TYPE`` or ``I-TYPE`` (IOB1 or IOB2)."""
    type_names = sorted({name[2:] for name in label_names if name != "O"})
    for name in label_names:
        if name != "O" and name[:2] not in ("B-", "I-"):
            raise ValueError(f"label {name!r} is not O, B-TYPE or I-TYPE")
    is_begin = [name.startswith("B-") for name in label_names]
    type_id = [type_names.index(name[2:]) if name != "O" else -1 for name in label_names]
    return tf.constant(is_begin), tf.constant(type_id, tf.int64), type_names


def decode_entities(texts, logits, word_index, words, label_names, crf=None):
    """Per-piece logits -> entity spans with character offsets (in graph).

    Each word's tag is the argmax at its first piece, its score that tag's probability (with ``crf``: the
    Viterbi path over the words and each tag's marginal probability, :func:`piece_tags`). A chunk starts at
    a ``B-`` tag or where the type changes (an ``I-`` after ``O`` or after another type): conlleval's
    rule for IOB1/IOB2 (:mod:`kerasplm.models.bert.ner_metrics`); it spans consecutive words of its type.

    Args:
      texts: tf.string [batch]; logits: float [batch, L, C]; word_index: int [batch, L] (the
      preprocessor's); words: :func:`split_words_with_offsets`'s tuple; label_names: list of C tags;
      crf: the model's :class:`kerasplm.layers.crf.CRF`, or None.
    Returns a dict of ragged [batch, (entities)] tensors: ``entity_text`` (the text between the offsets),
    ``entity_label`` (the type), ``start``/``end`` (int64 character offsets, end exclusive) and ``score``
    (float32, the mean over its words of the tag probability).
    """
    _, byte_starts, byte_ends, char_starts, char_ends = words
    is_begin, type_of_label, type_names = label_tables(label_names)
    first = word_index >= 0                           # words cut by truncation have no first piece: dropped
    piece_tag, piece_score = piece_tags(logits, first, crf)
    tags = tf.ragged.boolean_mask(piece_tag, first)                                      # [batch, (kept)]
    scores = tf.ragged.boolean_mask(piece_score, first)
    kept = tags.row_lengths()
    byte_starts, byte_ends, char_starts, char_ends = (
        tf.RaggedTensor.from_row_lengths(_take_first(r, kept), kept)
        for r in (byte_starts, byte_ends, char_starts, char_ends))

    type_ = tf.gather(type_of_label, tags.flat_values)
    at_row_start = tf.equal(tf.ragged.range(kept).flat_values, 0)
    previous_type = tf.where(at_row_start, tf.constant(-1, tf.int64), tf.concat([[-1], type_[:-1]], 0))
    inside = type_ >= 0
    starts = inside & (tf.gather(is_begin, tags.flat_values) | tf.not_equal(previous_type, type_))
    entity = tf.boolean_mask(tf.cumsum(tf.cast(starts, tf.int64)) - 1, inside)  # entity id of each word in one
    count = tf.reduce_sum(tf.cast(starts, tf.int64))

    def per_entity(values, reduce):
        return reduce(tf.boolean_mask(values, inside), entity, num_segments=count)

    row = per_entity(tags.value_rowids(), tf.math.unsorted_segment_min)
    byte_start = per_entity(byte_starts.flat_values, tf.math.unsorted_segment_min)
    byte_end = per_entity(byte_ends.flat_values, tf.math.unsorted_segment_max)
    text = tf.gather(sanitize_utf8(texts), row)
    spans = {
        "entity_text": tf.strings.substr(text, byte_start, byte_end - byte_start),
        "entity_label": tf.gather(tf.constant(type_names or [""], tf.string),
                                  tf.maximum(per_entity(type_, tf.math.unsorted_segment_min), 0)),
        "start": per_entity(char_starts.flat_values, tf.math.unsorted_segment_min),
        "end": per_entity(char_ends.flat_values, tf.math.unsorted_segment_max),
        "score": per_entity(scores.flat_values, tf.math.unsorted_segment_mean),
    }
    nrows = tf.shape(texts, out_type=tf.int64)[0]
    return {k: tf.RaggedTensor.from_value_rowids(v, row, nrows=nrows) for k, v in spans.items()}


def _take_first(ragged, lengths):
    """Each row's first ``lengths[row]`` values, flattened (the words the model saw)."""
    positions = tf.ragged.range(ragged.row_lengths())
    below = positions.flat_values < tf.gather(lengths, positions.value_rowids())
    return tf.boolean_mask(ragged.flat_values, below)


INPUT_KEYS = ("token_ids", "segment_ids", "padding_mask")


def tag_texts(model, preprocessor, texts, label_names):
    """Raw strings [batch] -> :func:`decode_entities`'s ragged spans, through ``model`` (a
    :class:`BertTokenClassifier`) and ``preprocessor`` (its :class:`BertTaggerPreprocessor`)."""
    texts = tf.convert_to_tensor(texts, tf.string)
    words = split_words_with_offsets(texts)
    inputs = preprocessor(words[0])
    logits = model({k: inputs[k] for k in INPUT_KEYS}, training=False)
    return decode_entities(texts, logits, inputs["word_index"], words, label_names, crf=getattr(model, "crf", None))
