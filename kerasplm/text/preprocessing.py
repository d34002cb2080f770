"""Preprocessors: the in-graph steps between a tokenizer and a model.

A tokenizer (:mod:`kerasplm.text.wordpiece`) knows only normalization and its vocabulary. Everything a
*model* adds around the word pieces lives here, as graph functions usable in a ``tf.data`` pipeline, in
eager code and inside an exported ``tf.Module``:

* :func:`pack_segments`: one or more segments packed as ``[start] A [end]`` or ``[start] A [end] B [end]``
  (BERT: ``[CLS] A [SEP] B [SEP]``) with segment ids, trimmed to a total length;
* :func:`pad_packed`: packed ragged ids -> dense model inputs at a fixed width, with the input mask;
* :func:`trim_to_bucket`: a fixed-width batch cut to its longest row rounded up to a bucket width (training
  pays for the tokens a batch holds, not for ``max_length``);
* :class:`Preprocessor`: the base class of every family's preprocessor (a ``tf.Module``);
* :class:`TranslatorPreprocessor`: the Transformer translator's [START]/[END] rule for the source and the
  target, its truncation (the cut keeps [END]) and the decoding's inverse (stop at [END], detokenize).

All three are tensorflow-text ops (``RoundRobinTrimmer``, ``combine_segments``, ``pad_model_inputs``), so
they export with the model and run in TF Serving.
"""
import keras
import tensorflow as tf
import tensorflow_text as tf_text

from kerasplm.runs.serialization import serializable
from kerasplm.text.wordpiece import DEFAULT_RESERVED_TOKENS, END, PAD, START


def pack_segments(segments, start_id, end_id, max_length=None):
    """Packs segments as ``[start] A [end] B [end] ...`` (BERT's ``[CLS] A [SEP] B [SEP]``).

    Args:
      segments: list of int64 RaggedTensors ``[batch, (n_i)]`` (word-piece ids, no special tokens).
      start_id, end_id: the ids put before the first segment and after every segment.
      max_length: cap on the packed length, special tokens included (None: no cap). Segments are trimmed
        round robin, which for two segments gives the lengths of BERT's ``_truncate_seq_pair`` (the
        longer segment loses tokens first, the second one on ties); the special tokens are always kept.
    Returns ``(token_ids, segment_ids)``, int64 RaggedTensors ``[batch, (len)]``; the start token and the
    first segment with its end token have segment id 0, the second segment with its end token 1, ...
    """
    segments = list(segments)
    if not segments:
        raise ValueError("pack_segments needs at least one segment")
    budget = None
    if max_length is not None:
        budget = int(max_length) - 1 - len(segments)          # one start + one end per segment
        if budget < 0:
            raise ValueError(f"max_length={max_length} cannot hold the {1 + len(segments)} special tokens "
                             f"of {len(segments)} segment(s)")
    return _pack(segments, int(start_id), int(end_id), budget)


# One graph for every caller: the ids and the budget are Python numbers (part of the trace's key), the segments
# ragged tensors of any batch size. Every preprocessor's dataset map and export signature traces packing again; as a
# call to this function it is traced once per process instead of rebuilt (tensorflow-text's trimmer and combiner
# are a few hundred ops) in each of those traces, and in eager code it runs as one graph, not op by op.
@tf.function(reduce_retracing=True, autograph=False)
def _pack(segments, start_id, end_id, budget):
    if budget is not None:
        segments = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(segments)
    return tf_text.combine_segments(segments, start_of_sequence_id=start_id, end_of_segment_id=end_id)


def pad_packed(token_ids, segment_ids, sequence_length, pad_id=0):
    """Packed ragged ids -> dense model inputs of width ``sequence_length`` (longer rows are cut).

    Returns ``{"token_ids": int64 [batch, L], "segment_ids": int64 [batch, L],
    "input_mask": int64 [batch, L]}`` (mask 1 = real token, 0 = padding; padding ids are ``pad_id``,
    padding segment ids 0).
    """
    token_ids, input_mask = tf_text.pad_model_inputs(token_ids, max_seq_length=sequence_length, pad_value=pad_id)
    segment_ids, _ = tf_text.pad_model_inputs(segment_ids, max_seq_length=sequence_length, pad_value=0)
    return {"token_ids": token_ids, "segment_ids": segment_ids, "input_mask": input_mask}


def trim_to_bucket(structure, mask, multiple):
    """Cuts a right-padded batch to its longest real row, rounded up to a multiple of ``multiple``.

    ``mask`` (int or bool ``[..., L]``, nonzero = real token, L static) marks the real tokens of the batch;
    every tensor in ``structure`` (any nest: inputs, labels) whose last axis has the static width L is cut to

        W = min(L, multiple * max(1, ceil(longest / multiple))),   longest = the most real tokens in a row,

    other tensors are left as they are. Because the rows are right-padded and a model masks padding, the cut
    changes no real position's output; its point is speed: a batch of short sentences costs W, not L, tokens,
    while the widths stay few (at most ceil(L / multiple): one trace of a shape-generic step, one XLA compile
    per width). The cut axis has an unknown static size afterwards.
    """
    width = mask.shape[-1]
    if width is None:
        raise ValueError("trim_to_bucket needs a mask of static width (a batch padded to a fixed length)")
    if not isinstance(multiple, int) or multiple < 1:
        raise ValueError(f"multiple must be a positive integer, got {multiple!r}")
    longest = tf.reduce_max(tf.concat([tf.reshape(tf.reduce_sum(tf.cast(tf.not_equal(mask, 0), tf.int32), -1),
                                                  [-1]), [0]], 0))
    cut = tf.minimum(width, multiple * tf.maximum(1, (longest + multiple - 1) // multiple))

    def trim(tensor):
        if tensor.shape.rank and tensor.shape[-1] == width:
            return tensor[..., :cut]
        return tensor

    return tf.nest.map_structure(trim, structure)


class Preprocessor(tf.Module):
    """Base of in-graph preprocessors: strings -> a model's input ids, TensorFlow ops only (so they export).

    A subclass owns its tokenizer(s) and the special tokens it inserts (``special_token_ids``) and implements
    ``__call__``. Special-token-aware truncation is :func:`pack_segments` (it trims the word pieces, then adds
    the special tokens, so a cut sequence still ends with [END] / [SEP]); :meth:`pad_and_truncate` is the
    dense, fixed-width last step.

    Args:
      sequence_length: the model's input width (None: the subclass decides per call).
      pad_id: the padding id (0 in every kerasplm vocabulary and in BERT's).
    """

    def __init__(self, sequence_length=None, pad_id=0, name=None):
        super().__init__(name=name)
        if sequence_length is not None and (isinstance(sequence_length, bool) or not isinstance(sequence_length, int)
                                            or sequence_length <= 0):
            raise ValueError(f"sequence_length must be a positive integer or None, got {sequence_length!r}")
        self.sequence_length = sequence_length
        self.pad_id = pad_id

    @property
    def special_token_ids(self):
        """Dict name -> id of the special tokens this preprocessor inserts (at least ``pad``)."""
        return {"pad": self.pad_id}

    def pad_and_truncate(self, ids, sequence_length=None):
        """Ragged (or dense) ``ids (batch, None)`` -> dense ``(batch, sequence_length)``, cut to the width and
        right-padded with ``pad_id``."""
        width = sequence_length or self.sequence_length
        if width is None:
            raise ValueError("pad_and_truncate needs a sequence_length")
        ids = tf.RaggedTensor.from_tensor(ids) if isinstance(ids, tf.Tensor) else ids
        return ids[:, :width].to_tensor(default_value=tf.cast(self.pad_id, ids.dtype), shape=[None, width])

    def __call__(self, inputs):
        raise NotImplementedError(f"{type(self).__name__}.__call__")


def _special_ids(tokenizer, side):
    """(start, end) ids of a translator vocabulary; ValueError naming what is missing."""
    missing = [t for t in TranslatorPreprocessor.special_tokens if t not in tokenizer.special_tokens]
    file = getattr(tokenizer, "vocabulary_file", None)
    if file:
        side = f"{side} ({file})"
    if missing:
        raise ValueError(f"the {side} vocabulary lacks the translator's special token(s) {', '.join(missing)} "
                         f"(a translator vocabulary holds {', '.join(TranslatorPreprocessor.special_tokens)}; "
                         f"build it with build_wordpiece_vocab)")
    if tokenizer.pad_id != 0:
        raise ValueError(f"the {side} vocabulary has {PAD} at id {tokenizer.pad_id}; the translator pads with 0")
    return tokenizer.token_to_id(START), tokenizer.token_to_id(END)


def _check_length(name, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
        raise ValueError(f"{name} must be an integer >= 2 ([START] and [END]) or None, got {value!r}")
    return value


@serializable
class TranslatorPreprocessor(Preprocessor):
    """The translator's special tokens: ``[START] pieces [END]`` on both sides, cut to a maximum length.

    A sentence longer than the maximum keeps its first ``max_length - 2`` word pieces and still ends with
    [END] (so the model always sees a finished sentence). Source and target ids use their own vocabulary's
    [START]/[END] ids; [PAD] must be id 0 in both (the model's padding masks test ``id == 0``).

    >>> pre = TranslatorPreprocessor(src_tokenizer, tgt_tokenizer, max_source_length=40)
    >>> pre.source_ids(tf.constant(["Hace frío."]))   # ragged int64 [[2, ..., 3]]
    """

    special_tokens = DEFAULT_RESERVED_TOKENS   # [PAD]=0, [UNK], [START], [END]

    def __init__(self, src_tokenizer, tgt_tokenizer, max_source_length=None, max_target_length=None, name=None):
        super().__init__(sequence_length=_check_length("max_source_length", max_source_length), pad_id=0, name=name)
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        self.src_start_id, self.src_end_id = _special_ids(src_tokenizer, "source")
        self.start_id, self.end_id = _special_ids(tgt_tokenizer, "target")
        self.max_source_length = max_source_length
        self.max_target_length = _check_length("max_target_length", max_target_length)

    @property
    def special_token_ids(self):
        return {"pad": self.pad_id, "start": self.start_id, "end": self.end_id,
                "source_start": self.src_start_id, "source_end": self.src_end_id}

    def get_config(self):
        return {"src_tokenizer": keras.saving.serialize_keras_object(self.src_tokenizer),
                "tgt_tokenizer": keras.saving.serialize_keras_object(self.tgt_tokenizer),
                "max_source_length": self.max_source_length, "max_target_length": self.max_target_length,
                "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, **{key: keras.saving.deserialize_keras_object(config[key])
                                   for key in ("src_tokenizer", "tgt_tokenizer")}})

    def __call__(self, strings):
        """The model's source input: ``source_ids``."""
        return self.source_ids(strings)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def source_ids(self, strings):
        """Source strings [batch] -> int64 RaggedTensor [batch, (len)]: [START] pieces [END], len <= max."""
        ids, _ = pack_segments([self.src_tokenizer.tokenize(strings)], self.src_start_id, self.src_end_id,
                               self.max_source_length)
        return ids

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def target_ids(self, strings):
        """Target strings [batch] -> int64 RaggedTensor [batch, (len)]: [START] pieces [END], len <= max."""
        ids, _ = pack_segments([self.tgt_tokenizer.tokenize(strings)], self.start_id, self.end_id,
                               self.max_target_length)
        return ids

    # reduce_retracing: decoding calls this once per batch, each with its own [batch, len]; one
    # shape-generic trace replaces a trace per shape (and TensorFlow's retracing warnings).
    @tf.function(reduce_retracing=True)
    def detokenize_target(self, ids):
        """Generated target ids [batch, len] (dense or ragged, any int dtype) -> strings [batch].

        Everything from the first [END] on is dropped (a finished hypothesis is padded after it), then the
        tokenizer's ``detokenize`` removes [START]/[PAD] and joins the word pieces.
        """
        ids = tf.cast(ids, tf.int64)
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=self.pad_id)
        before_end = tf.math.cumsum(tf.cast(ids == self.end_id, tf.int32), axis=1) == 0
        return self.tgt_tokenizer.detokenize(tf.ragged.boolean_mask(ids, before_end))
