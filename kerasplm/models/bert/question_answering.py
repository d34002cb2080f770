"""Extractive question answering on BERT (Devlin et al. 2019, section 4.2: SQuAD v1.1).

A start vector S and an end vector E (here one dense layer with two outputs) score every token of the
sequence output ``T_i``: ``P(start = i) = softmax_i(S·T_i)``, ``P(end = j) = softmax_j(E·T_j)``; the loss is
the mean of the start and end cross-entropies; the answer is the span ``i <= j`` of highest ``S·T_i + E·T_j``.

Long contexts are read in overlapping windows, as google-research/bert's ``run_squad.py`` does::

    [CLS] question pieces [SEP] context pieces [start, start + n) [SEP]      start = 0, stride, 2·stride, ...

``n`` = what is left of ``sequence_length`` after the question (cut to ``max_query_length`` pieces) and the
three special tokens; windows advance by ``doc_stride`` until one reaches the end of the context. A context
piece appears in several windows; only the window where it has the most context on both sides
(``min(left, right) + 0.01·n``, the first on ties) may start an answer there. Every context piece carries
the character span ``[start, end)`` it came from (:meth:`kerasplm.text.BertTokenizer.tokenize_with_offsets`),
so a span of pieces maps back to characters of the original context. Training labels point at the answer's
first and last piece in the windows that hold all of it, and at ``[CLS]`` (position 0) in the others.

Everything here is TensorFlow ops (the preprocessor, :func:`decode_answers`, :func:`answer_questions`), so
training, evaluation and the exported SavedModel (:mod:`kerasplm.models.bert.question_answering_export`) share one code path.
"""
import keras
import tensorflow as tf
import tensorflow_text as tf_text

from kerasplm.models.base import Task
from kerasplm.models.bert.backbone import BertBackbone, ChecksBackboneVocabulary, UntrackedPreprocessor
from kerasplm.runs.serialization import serializable
from kerasplm.text.preprocessing import Preprocessor
from kerasplm.text.wordpiece import sanitize_utf8

__all__ = ["BertQuestionAnswerer", "QuestionAnswerPreprocessor", "decode_answers", "answer_questions", "INPUT_KEYS"]

INPUT_KEYS = ("token_ids", "segment_ids", "padding_mask")
NO_SPAN = -1          # the character offset of positions that are not context ([CLS], question, [SEP], padding)
_NEG = -1e9           # logits of positions that cannot be chosen
_PADDING = {"token_start": NO_SPAN, "token_end": NO_SPAN, "max_context": False}


@keras.saving.register_keras_serializable(package="kerasplm")
class BertQuestionAnswerer(UntrackedPreprocessor, ChecksBackboneVocabulary, Task):
    """Start and end logits over a :class:`BertBackbone`'s sequence output.

    Args:
      backbone: the BERT encoder.
      preprocessor: optional :class:`QuestionAnswerPreprocessor` (not part of the checkpoint).
      max_answer_length, n_best: how :func:`decode_answers` searches the spans when this model answers
        (:func:`answer_questions`' defaults for it; part of the config).
    Call: the backbone's input dict -> ``{"start_logits", "end_logits"}``, float32 ``(B, L)``; padding
    positions get -1e9 (no probability mass, so a row's logits do not depend on the batch's width).
    Loss (``compute_loss_sums``): ``batch`` is :class:`QuestionAnswerPreprocessor`'s dict with
    ``start_positions`` / ``end_positions`` ``(B,)``; the two cross-entropies are terms of weight 1/2 each
    (the mean of the two, as in BERT), with start and end accuracy as metrics.
    """

    backbone_class = BertBackbone

    def __init__(self, backbone, preprocessor=None, max_answer_length=30, n_best=20, **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        for label, value in (("max_answer_length", max_answer_length), ("n_best", n_best)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be a positive integer, got {value!r}")
        self.max_answer_length, self.n_best = max_answer_length, n_best
        init = keras.initializers.TruncatedNormal(stddev=backbone.config.initializer_range)
        self.span_head = keras.layers.Dense(2, kernel_initializer=init, name="span_head")
        self.span_head.build((None, None, backbone.config.hidden_size))
        self.built = True

    def call(self, inputs, training=None):
        hidden = self.backbone(inputs, training=training)["sequence_output"]
        logits = tf.cast(self.span_head(hidden), tf.float32)                    # (B, L, 2)
        real = tf.cast(inputs["padding_mask"], tf.bool)
        logits = tf.where(real[:, :, None], logits, _NEG)
        return {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}

    @tf.autograph.experimental.do_not_convert
    def compute_loss_sums(self, batch, training):
        outputs = self({k: batch[k] for k in INPUT_KEYS}, training=training)
        count = tf.cast(tf.shape(batch["token_ids"])[0], tf.float32)
        sums = {"losses": {}}
        for side in ("start", "end"):
            labels = tf.cast(batch[f"{side}_positions"], tf.int32)
            logits = outputs[f"{side}_logits"]
            loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            correct = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels)
            sums["losses"][side] = (tf.reduce_sum(loss), count, 0.5)
            sums[f"{side}_accuracy"] = (tf.reduce_sum(tf.cast(correct, tf.float32)), count)
        return sums

    def get_config(self):
        return {**super().get_config(), "max_answer_length": self.max_answer_length, "n_best": self.n_best}


@serializable
class QuestionAnswerPreprocessor(Preprocessor):
    """Question + context strings -> BERT windows with character offsets (see the module docstring).

    Args:
      tokenizer: a :class:`kerasplm.text.BertTokenizer` (its vocabulary holds [CLS] and [SEP]).
      sequence_length: tokens per window, special tokens included (BERT's SQuAD setting: 384).
      doc_stride: context pieces between the starts of consecutive windows (128).
      max_query_length: the question keeps its first pieces up to this many (64).
      pad_to_length: pad every window to ``sequence_length`` (training); False pads to the longest window of
        the call (serving).
    Call: ``question``, ``context`` tf.string [B] and optionally ``answer_start``/``answer_end`` int [B]
    (character span of the answer in the context, end exclusive; -1: none) -> dict over the W windows of the
    batch: int64 ``token_ids``, ``segment_ids``, ``padding_mask`` (W, L); int64 ``example_index`` (W,) (the
    row each window comes from; every row has at least one window); int64 ``token_start``/``token_end``
    (W, L) (character span of each context piece, -1 elsewhere); bool ``max_context`` (W, L); with answers
    int64 ``start_positions``/``end_positions`` (W,).
    """

    def __init__(self, tokenizer, sequence_length=384, doc_stride=128, max_query_length=64, pad_to_length=True,
                 name=None):
        for label, value, least in (("sequence_length", sequence_length, 5), ("doc_stride", doc_stride, 1),
                                    ("max_query_length", max_query_length, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{label} must be an integer >= {least}, got {value!r}")
        if max_query_length > sequence_length - 4:
            raise ValueError(f"max_query_length={max_query_length} leaves no context piece in a window of "
                             f"sequence_length={sequence_length} (at most sequence_length - 4)")
        super().__init__(sequence_length, pad_id=tokenizer.pad_id, name=name)
        self.tokenizer = tokenizer
        self.doc_stride, self.max_query_length, self.pad_to_length = doc_stride, max_query_length, bool(pad_to_length)
        self.cls_id, self.sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")

    @property
    def special_token_ids(self):
        return {"pad": self.pad_id, "cls": self.cls_id, "sep": self.sep_id}

    def get_config(self):
        return {"tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                "sequence_length": self.sequence_length, "doc_stride": self.doc_stride,
                "max_query_length": self.max_query_length, "pad_to_length": self.pad_to_length, "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "tokenizer": keras.saving.deserialize_keras_object(config["tokenizer"])})

    @tf.autograph.experimental.do_not_convert
    def __call__(self, question, context, answer_start=None, answer_end=None):
        question = tf.convert_to_tensor(question, tf.string)
        question_ids = self.tokenizer.tokenize(question)[:, :self.max_query_length]          # [B, (q)]
        context_ids, char_starts, char_ends = self.tokenizer.tokenize_with_offsets(context)  # [B, (c)]
        question_length, context_length = question_ids.row_lengths(), context_ids.row_lengths()
        room = self.sequence_length - 3 - question_length                                    # >= 1
        stride = tf.minimum(tf.constant(self.doc_stride, tf.int64), room)
        num_windows = 1 + tf.maximum(tf.constant(0, tf.int64), -((room - context_length) // stride))  # ceil
        example = tf.repeat(tf.range(tf.size(num_windows, out_type=tf.int64)), num_windows)  # [W]
        first = tf.ragged.range(num_windows).flat_values * tf.gather(stride, example)       # window start
        length = tf.minimum(tf.gather(room, example), tf.gather(context_length, example) - first)
        position = tf.ragged.range(first, first + length)                                    # [W, (n)]
        flat_index = position + tf.gather(context_ids.row_splits, example)[:, None]         # into the flat pieces

        def windowed(flat):
            return tf.gather(flat, flat_index)

        token_ids, segment_ids = tf_text.combine_segments(
            [tf.gather(question_ids, example), windowed(context_ids.flat_values)], self.cls_id, self.sep_id)
        # Around the window's pieces: [CLS] question [SEP] before, [SEP] after.
        lead_length, windows = tf.gather(question_length, example) + 2, tf.size(example, out_type=tf.int64)

        def around(window_values, value):
            """[W, (n)] values of the context pieces -> [W, (len)] with ``value`` on the special/question tokens."""
            return tf.concat([_filled(lead_length, value), window_values, _filled(tf.ones([windows], tf.int64), value)],
                             axis=1)

        # A piece may start an answer in the window where min(left, right) context + 0.01 n is largest.
        within = position - first[:, None]
        score = (tf.cast(tf.minimum(within, length[:, None] - 1 - within), tf.float32)
                 + 0.01 * tf.cast(length, tf.float32)[:, None]).flat_values
        piece, total = flat_index.flat_values, tf.size(context_ids.flat_values, out_type=tf.int64)
        best = tf.gather(tf.math.unsorted_segment_max(score, piece, total), piece)
        window_of = flat_index.value_rowids()
        candidate = tf.where(tf.equal(score, best), window_of, tf.int64.max)
        is_max = tf.equal(window_of, tf.gather(tf.math.unsorted_segment_min(candidate, piece, total), piece))

        width = self.sequence_length if self.pad_to_length else None
        shape = [None, width]
        out = {"token_ids": token_ids.to_tensor(default_value=tf.cast(self.pad_id, tf.int64), shape=shape),
               "segment_ids": segment_ids.to_tensor(default_value=0, shape=shape),
               "padding_mask": tf.ones_like(token_ids).to_tensor(default_value=0, shape=shape),
               "token_start": around(windowed(char_starts.flat_values), NO_SPAN).to_tensor(NO_SPAN, shape=shape),
               "token_end": around(windowed(char_ends.flat_values), NO_SPAN).to_tensor(NO_SPAN, shape=shape),
               "max_context": around(flat_index.with_flat_values(is_max), False).to_tensor(False, shape=shape),
               "example_index": example}
        if not self.pad_to_length:
            # Every window holds [CLS] [SEP] [SEP]; only an empty batch is narrower ([0, 0]): widen it so that the
            # model's position slicing stays well defined.
            out = {k: v if k == "example_index" else tf.pad(v, [[0, 0], [0, tf.maximum(0, 3 - tf.shape(v)[1])]],
                                                            constant_values=_PADDING.get(k, 0))
                   for k, v in out.items()}
        if answer_start is not None:
            out.update(self._answer_positions(char_starts, char_ends, answer_start, answer_end, example, first,
                                              length, question_length))
        return out

    @staticmethod
    def _answer_positions(char_starts, char_ends, answer_start, answer_end, example, first, length, question_length):
        """Window positions of the answer's first and last piece; 0 ([CLS]) where the window lacks any of it.
        Piece spans are sorted, so the first piece is the number of pieces ending at or before the answer's
        start, the last one the number of pieces starting before its end, minus one."""
        answer_start = tf.cast(answer_start, tf.int64)[:, None]
        answer_end = tf.cast(answer_end, tf.int64)[:, None]
        first_piece = tf.reduce_sum(tf.cast(char_ends <= answer_start, tf.int64), axis=1)
        last_piece = tf.reduce_sum(tf.cast(char_starts < answer_end, tf.int64), axis=1) - 1
        has_answer = (answer_start[:, 0] >= 0) & (first_piece <= last_piece)
        first_piece, last_piece = tf.gather(first_piece, example), tf.gather(last_piece, example)
        inside = tf.gather(has_answer, example) & (first_piece >= first) & (last_piece < first + length)
        offset = 2 + tf.gather(question_length, example) - first          # [CLS] question [SEP] before the window
        return {"start_positions": tf.where(inside, first_piece + offset, 0),
                "end_positions": tf.where(inside, last_piece + offset, 0)}


def _filled(lengths, value):
    """A RaggedTensor [N, (lengths)] holding ``value`` (int64 or bool) everywhere."""
    values = tf.fill([tf.reduce_sum(lengths)], tf.constant(value, tf.bool if isinstance(value, bool) else tf.int64))
    return tf.RaggedTensor.from_row_lengths(values, lengths, validate=False)


def decode_answers(context, features, start_logits, end_logits, max_answer_length=30, n_best=20):
    """The best span of each example across its windows, in characters of its context (in graph).

    For each window, the ``n_best`` highest start logits among the pieces that may start an answer there
    (context, maximum context) and the ``n_best`` highest end logits among its context pieces are paired;
    a pair ``i <= j`` with ``j - i + 1 <= max_answer_length`` scores ``start_logits[i] + end_logits[j]``
    (``run_squad.py``'s n-best search; it compares these sums across windows too). The best pair of an
    example's windows (the first window on ties) gives its answer.

    Args:
      context: tf.string [B]; features: :class:`QuestionAnswerPreprocessor`'s dict for these examples;
      start_logits, end_logits: float [W, L].
    Returns ``{"answer": string [B], "start": int64 [B], "end": int64 [B], "score": float32 [B]}``: the text
    between the character offsets ``[start, end)`` of the context (invalid UTF-8 counted as U+FFFD), and
    ``score`` = P(start) · P(end) under the window's softmaxes over its context pieces. An example without
    any context piece answers ``""``, 0, 0, score 0.
    """
    token_start, token_end = features["token_start"], features["token_end"]
    is_context = token_start >= 0
    can_start = is_context & features["max_context"]
    start_logits, end_logits = tf.cast(start_logits, tf.float32), tf.cast(end_logits, tf.float32)
    k = tf.minimum(n_best, tf.shape(start_logits)[1])
    top_start, start_index = tf.math.top_k(tf.where(can_start, start_logits, _NEG), k)      # [W, k]
    top_end, end_index = tf.math.top_k(tf.where(is_context, end_logits, _NEG), k)
    span_length = end_index[:, None, :] - start_index[:, :, None] + 1                        # [W, k, k]
    allowed = ((top_start > _NEG / 2)[:, :, None] & (top_end > _NEG / 2)[:, None, :] & (span_length >= 1)
               & (span_length <= max_answer_length))
    pair_score = tf.reshape(tf.where(allowed, top_start[:, :, None] + top_end[:, None, :], 2 * _NEG),
                            [tf.shape(top_start)[0], -1])
    best_pair = tf.argmax(pair_score, axis=1, output_type=tf.int32)                          # [W]
    window_score = tf.gather(pair_score, best_pair, batch_dims=1)
    window_start = tf.gather(start_index, best_pair // k, batch_dims=1)
    window_end = tf.gather(end_index, best_pair % k, batch_dims=1)

    # The best window of each example (the first one on ties).
    example, num_examples = features["example_index"], tf.size(context, out_type=tf.int64)
    windows = tf.range(tf.size(example, out_type=tf.int64))
    best_score = tf.math.unsorted_segment_max(window_score, example, num_examples)
    chosen = tf.math.unsorted_segment_min(tf.where(tf.equal(window_score, tf.gather(best_score, example)),
                                                   windows, tf.int64.max), example, num_examples)
    found = best_score > _NEG                             # a valid pair exists (sums of real logits exceed -1e9)
    chosen = tf.where(found, chosen, 0)
    start_piece, end_piece = tf.gather(window_start, chosen), tf.gather(window_end, chosen)
    start = tf.where(found, tf.gather_nd(token_start, tf.stack([chosen, tf.cast(start_piece, tf.int64)], 1)), 0)
    end = tf.where(found, tf.gather_nd(token_end, tf.stack([chosen, tf.cast(end_piece, tf.int64)], 1)), 0)

    def log_softmax_at(logits, piece):
        chosen_logits = tf.gather(tf.where(is_context, logits, _NEG), chosen)
        return tf.gather(chosen_logits, piece, batch_dims=1) - tf.reduce_logsumexp(chosen_logits, axis=1)

    score = tf.where(found, tf.exp(log_softmax_at(start_logits, start_piece) + log_softmax_at(end_logits, end_piece)),
                     0.0)
    answer = tf.strings.substr(sanitize_utf8(context), start, end - start, unit="UTF8_CHAR")
    return {"answer": answer, "start": start, "end": end, "score": score}


def answer_questions(model, preprocessor, question, context, max_answer_length=30, n_best=20):
    """Question and context strings [B] -> :func:`decode_answers`'s dict, through ``model`` (a
    :class:`BertQuestionAnswerer`) and ``preprocessor`` (a :class:`QuestionAnswerPreprocessor`). Graph code:
    the job wraps it in a ``tf.function``, the export in its signature."""
    question = tf.convert_to_tensor(question, tf.string)
    context = tf.convert_to_tensor(context, tf.string)
    features = preprocessor(question, context)
    logits = model({k: features[k] for k in INPUT_KEYS}, training=False)
    return decode_answers(context, features, logits["start_logits"], logits["end_logits"], max_answer_length, n_best)
