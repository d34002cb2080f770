"""Decoding for encoder-decoder models (the ``Transformer`` translator) over token ids (tokenize /
detokenize outside): the engine of :mod:`kerasplm.generation.engine` with the start token as a
one-token prompt and the encoder's cross-attention keys/values computed once. The model implements
the encoder-decoder protocol described there (``encode``, ``cross_attention_kv``, ``init_cache``,
``call_with_cache``, ``max_target_length``, ``vocab_size``).

Every function takes source ids ``src_ids (batch, inp_len)`` exactly as the model was trained on them
(with [START]/[END] if the tokenizer adds them), padded with ``pad_id`` (0), and returns target ids
``[START] y_1 ... y_m`` int32, where ``y_m`` is [END] unless the sentence reached its length cap, and 0
after it. The output has ``1 + (number of loop steps)`` columns: the loop stops as soon as every
sentence has finished.

Length rule. Sentence i may generate at most
    max_len_i = min(T, floor(max_length_ratio · src_len_i + max_length_offset))
tokens (its [END] included), src_len_i = its number of non-pad source tokens. T sizes the key/value cache and
the output buffer (static in process; in a SavedModel's signature, a run-time value): ``max_length`` when given, else
min(P, ceil(max_length_ratio · inp_len + max_length_offset)) for the padded source width inp_len;
always <= P = ``model.max_target_length`` (pe_target: the decoder has no position encodings beyond). Defaults ratio 1.5, offset 10:
translations are rarely 1.5× longer than their source, and +10 leaves room for very short inputs.

Compilation. ``make_translate_fn`` (and its greedy / beam forms ``make_greedy_fn`` /
``make_beam_search_fn``) return a function backed by one ``tf.function`` (``jit_compile=True``: XLA)
holding the whole decoding loop. It is traced (and
XLA-compiled) once per distinct source shape ``(batch, inp_len)``: pad sources to a few bucket widths to
bound compiles. Source ids are cast to int32 first, so int32 and int64 inputs share a trace.
``greedy_decode`` / ``beam_search_decode`` reuse one such function per model and options.

Strings. :class:`Seq2SeqDecoder` is the one text client of these functions: source strings to ids, the
search, ids to target strings, attention weights on request. The in-process translator
(``kerasplm.models.translator.job.Translator``) calls its Python methods; its SavedModel
(``kerasplm.models.translator.export``) calls the same object's graph methods from its signatures, where the batch,
the source width and T are known only at run time.
"""
import math

import numpy as np
import tensorflow as tf

from kerasplm.generation.engine import cached_fn, run_search
from kerasplm.generation.options import (DEFAULT_ALPHA, DEFAULT_BEAM_SIZE, DEFAULT_SEED, DEFAULT_STRATEGY,
                                         DEFAULT_TEMPERATURE, validate_options)
from kerasplm.generation.sampling import as_seed
from kerasplm.generation.search import _log_probs

DEFAULT_RATIO = 1.5
DEFAULT_OFFSET = 10


def cache_length(model, inp_len, max_length=None, max_length_ratio=DEFAULT_RATIO,
                 max_length_offset=DEFAULT_OFFSET, limit=None):
    """The static cap T on generated tokens (see the module docstring); ``inp_len`` may be None.
    ``limit``: the largest T (default and at most ``model.max_target_length``); :func:`decode_buffer` is the
    same rule in graph."""
    pe_target = model.max_target_length
    limit = pe_target if limit is None else min(limit, pe_target)
    if max_length is not None:
        if not 0 < max_length <= limit:
            bound = f"pe_target={pe_target}" if limit == pe_target else f"max_decode_length={limit}"
            raise ValueError(f"max_length must be in [1, {bound}], got {max_length}")
        return int(max_length)
    if inp_len is None:
        return limit
    return max(1, min(limit, math.ceil(max_length_ratio * inp_len + max_length_offset)))


def decode_buffer(src_ids, max_length, limit, max_length_ratio=DEFAULT_RATIO, max_length_offset=DEFAULT_OFFSET):
    """:func:`cache_length` in graph, for sources whose width is known at run time only (a SavedModel's):
    int32 zeros ``(T + 1,)`` (T as a length: see :func:`buffer_cap`). ``max_length``: int32 scalar, 0 = the
    length rule (from the padded width of ``src_ids``); ``limit``: the largest T."""
    width = tf.cast(tf.shape(src_ids)[1], tf.float64)  # float64: the same arithmetic as cache_length's Python
    rule = tf.maximum(1, tf.cast(tf.math.ceil(max_length_ratio * width + max_length_offset), tf.int32))
    cap = tf.minimum(tf.where(max_length > 0, max_length, rule), limit)
    return tf.zeros(tf.reshape(cap + 1, [1]), tf.int32)


def buffer_cap(buffer):
    """T of a buffer ``(T + 1,)``: its static length when known (a compile-time constant for XLA), else its
    run-time one."""
    length = buffer.shape[0]
    return length - 1 if length is not None else tf.shape(buffer)[0] - 1


def source_max_lengths(src_ids, cap, max_length_ratio=DEFAULT_RATIO, max_length_offset=DEFAULT_OFFSET, pad_id=0):
    """int32 ``(batch,)``: max_len_i = clip(floor(ratio · src_len_i + offset), 1, cap)."""
    src_len = tf.reduce_sum(tf.cast(tf.not_equal(src_ids, pad_id), tf.float32), axis=1)
    limit = tf.cast(tf.floor(max_length_ratio * src_len + max_length_offset), tf.int32)
    return tf.clip_by_value(limit, 1, cap)


def transformer_step_fn(model, src_ids, max_length, beam_size=1, pad_id=0):
    """Encodes the source once and returns ``(step_fn, cache)`` for :mod:`kerasplm.generation.search`.

    The encoder output, its padding mask and what every decoder step reads of it (``cross_attention_kv``: the
    Transformer's per-layer keys/values; an RNN's projected attention keys, encoder outputs and final state) are
    computed here, once, and repeated ``beam_size`` times (rows sentence-major). ``cache`` is the decoder's
    evolving state: ``model.init_cache(batch · beam_size, max_length)`` (the Transformer's per-layer
    self-attention cache ``[(k, v)]``, each ``(batch · beam_size, num_heads, max_length, depth)``), or, for a
    model whose initial decoder state comes from the source (an RNN: the encoder's final state),
    ``model.initial_cache(cross_kv)``. ``step_fn(ids (n,), step, cache) -> (logits (n, target_vocab_size), cache)``.
    """
    enc_output, padding_mask = model.encode(src_ids, pad_id)
    cross_kv = model.cross_attention_kv(enc_output)
    if beam_size > 1:
        cross_kv, padding_mask = tf.nest.map_structure(lambda t: tf.repeat(t, beam_size, axis=0),
                                                       (cross_kv, padding_mask))
    if hasattr(model, "initial_cache"):
        cache = model.initial_cache(cross_kv)
    else:
        cache = model.init_cache(tf.shape(src_ids)[0] * beam_size, max_length)

    def step_fn(ids, step, cache):
        logits, _, cache = model.call_with_cache(ids[:, tf.newaxis], cache, step, cross_kv, padding_mask)
        return logits[:, 0], cache

    return step_fn, cache


def seq2seq_search(model, src_ids, *, max_length=None, max_length_ratio=DEFAULT_RATIO,
                   max_length_offset=DEFAULT_OFFSET, start_id=2, end_id=3, pad_id=0, strategy=DEFAULT_STRATEGY,
                   beam_size=DEFAULT_BEAM_SIZE, cap=None, **options):
    """Encode + search, traceable (XLA-compilable): ``src_ids int32 (batch, inp_len)`` ->
    ``(ids (batch, T + 1), scores or None, num_steps)`` (see :func:`kerasplm.generation.engine.run_search`;
    ``options``: seed, temperature, top_k, top_p, alpha). ``cap``: T, an int or an int32 scalar tensor
    (default: :func:`cache_length` of the static width and ``max_length``)."""
    if cap is None:
        cap = cache_length(model, src_ids.shape[1], max_length, max_length_ratio, max_length_offset)
    step_fn, cache = transformer_step_fn(model, src_ids, cap, beam_size if strategy == "beam" else 1, pad_id)
    max_lengths = source_max_lengths(src_ids, cap, max_length_ratio, max_length_offset, pad_id)
    return run_search(step_fn, cache, start_id, max_lengths, cap, strategy=strategy, beam_size=beam_size,
                      end_id=end_id, pad_id=pad_id, **options)


def _as_source(src_ids):
    src_ids = tf.convert_to_tensor(src_ids)
    if src_ids.shape.rank != 2 or not src_ids.dtype.is_integer:
        raise ValueError(f"src_ids must be integer token ids of shape (batch, inp_len), got {src_ids.dtype.name} "
                         f"{src_ids.shape}")
    return tf.cast(src_ids, tf.int32)


def make_translate_fn(model, *, strategy=DEFAULT_STRATEGY, beam_size=DEFAULT_BEAM_SIZE, alpha=DEFAULT_ALPHA,
                      temperature=DEFAULT_TEMPERATURE, top_k=None, top_p=None, max_length=None,
                      max_length_ratio=DEFAULT_RATIO, max_length_offset=DEFAULT_OFFSET, max_decode_length=None,
                      start_id=2, end_id=3, pad_id=0, jit_compile=True):
    """A reusable compiled decoder with any strategy ("greedy", "sample", "beam"):
    ``fn(src_ids (batch, inp_len), seed=0) -> (ids int32 (batch, <= T + 1), scores (batch,) or None)``.

    ``fn`` takes T from :func:`cache_length` (``max_length``, else the length rule; at most
    ``max_decode_length``, default the model's ``max_target_length``). ``fn.core(src_ids int32, buffer
    int32 (T + 1,), seed int32 (2,)) -> (ids (batch, T + 1), scores (batch,), num_steps)`` is the
    ``tf.function``; T is the buffer's length minus one (:func:`buffer_cap`): static for ``fn`` (one trace
    per source shape), known at run time only in a SavedModel signature (:func:`decode_buffer`).
    """
    validate_options(strategy, temperature, top_k, top_p, beam_size, alpha, model.vocab_size)
    rule = dict(max_length_ratio=max_length_ratio, max_length_offset=max_length_offset)
    options = dict(strategy=strategy, beam_size=beam_size, alpha=alpha, temperature=temperature, top_k=top_k,
                   top_p=top_p, start_id=start_id, end_id=end_id, pad_id=pad_id, **rule)

    @tf.function(jit_compile=jit_compile)
    def core(src_ids, buffer, seed):
        ids, scores, steps = seq2seq_search(model, src_ids, cap=buffer_cap(buffer), seed=seed, **options)
        return ids, (tf.zeros([tf.shape(src_ids)[0]]) if scores is None else scores), steps

    def decode(src_ids, seed=DEFAULT_SEED):
        src_ids = _as_source(src_ids)
        cap = cache_length(model, src_ids.shape[1], max_length, limit=max_decode_length, **rule)
        ids, scores, steps = core(src_ids, tf.zeros([cap + 1], tf.int32), as_seed(seed))
        return ids[:, :steps + 1], (scores if strategy == "beam" else None)

    decode.core = core
    return decode


def make_greedy_fn(model, *, max_length=None, max_length_ratio=DEFAULT_RATIO, max_length_offset=DEFAULT_OFFSET,
                   start_id=2, end_id=3, pad_id=0, jit_compile=True):
    """A reusable compiled greedy decoder: ``fn(src_ids (batch, inp_len)) -> ids int32 (batch, <= T + 1)``
    (``make_translate_fn`` with ``strategy="greedy"``; ``fn.core`` is its ``tf.function``)."""
    translate = make_translate_fn(model, strategy="greedy", max_length=max_length, max_length_ratio=max_length_ratio,
                                  max_length_offset=max_length_offset, start_id=start_id, end_id=end_id,
                                  pad_id=pad_id, jit_compile=jit_compile)

    def decode(src_ids):
        return translate(src_ids)[0]

    decode.core = translate.core
    return decode


def make_beam_search_fn(model, *, beam_size=DEFAULT_BEAM_SIZE, alpha=DEFAULT_ALPHA, max_length=None,
                        max_length_ratio=DEFAULT_RATIO, max_length_offset=DEFAULT_OFFSET, start_id=2, end_id=3,
                        pad_id=0, jit_compile=True):
    """A reusable compiled beam search: ``fn(src_ids) -> (ids int32 (batch, <= T + 1), scores (batch,))``
    (``make_translate_fn`` with ``strategy="beam"``). ``scores`` are log P(Y | X) / lp(Y) of the returned
    hypotheses (see ``search.beam_search``)."""
    translate = make_translate_fn(model, strategy="beam", beam_size=beam_size, alpha=alpha, max_length=max_length,
                                  max_length_ratio=max_length_ratio, max_length_offset=max_length_offset,
                                  start_id=start_id, end_id=end_id, pad_id=pad_id, jit_compile=jit_compile)

    def decode(src_ids):
        return translate(src_ids)

    decode.core = translate.core
    return decode


def greedy_decode(model, src_ids, max_length=None, max_length_ratio=DEFAULT_RATIO,
                  max_length_offset=DEFAULT_OFFSET, start_id=2, end_id=3, pad_id=0, jit_compile=True):
    """Cached greedy decoding: ``src_ids (batch, inp_len) -> ids int32 (batch, <= T + 1)``.

    Reuses one ``make_greedy_fn`` function per model and options (no retrace for a seen shape).
    """
    return cached_fn(model, "greedy", make_greedy_fn, max_length=max_length, max_length_ratio=max_length_ratio,
                      max_length_offset=max_length_offset, start_id=start_id, end_id=end_id, pad_id=pad_id,
                      jit_compile=jit_compile)(src_ids)


def beam_search_decode(model, src_ids, beam_size=DEFAULT_BEAM_SIZE, alpha=DEFAULT_ALPHA, max_length=None,
                       max_length_ratio=DEFAULT_RATIO, max_length_offset=DEFAULT_OFFSET, start_id=2, end_id=3, pad_id=0,
                       jit_compile=True):
    """Cached beam search: ``src_ids (batch, inp_len) -> (best ids int32 (batch, <= T + 1), scores (batch,))``,
    scores = log P(Y | X) / ((5 + |Y|) / 6)^alpha. ``beam_size=1`` gives exactly the greedy tokens."""
    return cached_fn(model, "beam", make_beam_search_fn, beam_size=beam_size, alpha=alpha, max_length=max_length,
                      max_length_ratio=max_length_ratio, max_length_offset=max_length_offset, start_id=start_id,
                      end_id=end_id, pad_id=pad_id, jit_compile=jit_compile)(src_ids)


def attention_for(model, src_ids, tgt_ids):
    """Attention weights for plotting: one teacher-forced pass over ``tgt_ids (batch, tar_len)`` (e.g. a
    decoder output, [START] first) -> ``{"decoder_layer{i}_block{1,2}": (batch, heads, tar_len, ...)}``."""
    _, attention = model((tf.convert_to_tensor(src_ids), tf.convert_to_tensor(tgt_ids)), training=False)
    return attention


def sequence_log_probs(model, src_ids, tgt_ids, pad_id=0):
    """Teacher-forced log P(y_1..y_m | X) of ``tgt_ids = [START] y_1 .. y_m 0 ..`` -> float32 ``(batch,)``,
    under the decoding distribution (padding id excluded from the softmax); padding contributes 0."""
    tgt_ids = tf.cast(tgt_ids, tf.int32)
    logits, _ = model((tf.convert_to_tensor(src_ids), tgt_ids[:, :-1]), training=False)
    logp = _log_probs(logits, pad_id)
    gold = tgt_ids[:, 1:]
    token_logp = tf.gather(logp, gold, batch_dims=2)
    return tf.reduce_sum(tf.where(tf.equal(gold, pad_id), 0.0, token_logp), axis=1)


def last_cross_attention(weights):
    """The last decoder layer's cross-attention of a teacher-forced pass's weights dict
    (``"decoder_layer{i}_block2"`` with the largest i)."""
    names = [name for name in weights if name.startswith("decoder_layer") and name.endswith("_block2")]
    if not names:
        raise ValueError(f"no decoder cross-attention weights (decoder_layer<i>_block2) among {sorted(weights)}")
    return weights[max(names, key=lambda name: int(name[len("decoder_layer"):-len("_block2")]))]


class Seq2SeqDecoder:
    """Strings in, strings out: the one translation client of the engine, for an encoder-decoder model and
    its text preprocessing. The in-process translator (``kerasplm.models.translator.job.Translator``) calls its
    Python methods (:meth:`translate`, :meth:`translate_ids`); its SavedModel
    (``kerasplm.models.translator.export.TranslatorModule``) calls the graph methods (:meth:`encode`,
    :meth:`decode_buffer`, :meth:`search`, :meth:`detokenize`, :meth:`attention`) from its signatures. Both
    decode with the same compiled functions (:func:`make_translate_fn`, one per strategy / beam size and
    options, shared per model) and the same length rule, stopping and beam scoring.

    Args:
      model: an encoder-decoder model: the protocol of :mod:`kerasplm.generation.engine`, plus
        ``max_source_length`` (the encoder's position limit) and the teacher-forced call ``model((src_ids,
        tgt_ids), training=False) -> (logits, {"decoder_layer{i}_block2": cross-attention, ...})``.
      preprocessor: the text pieces (a :class:`kerasplm.text.TranslatorPreprocessor`): ``source_ids(strings
        [B]) -> int RaggedTensor`` ([START] pieces [END], cut to its ``max_source_length``),
        ``detokenize_target(ids) -> strings [B]``, the target's ``start_id`` / ``end_id`` / ``pad_id`` (0), and
        ``src_tokenizer`` / ``tgt_tokenizer`` whose ``lookup(ids)`` gives word pieces (for :meth:`attention`).
      max_decode_length: the largest T (generated tokens); default and at most ``model.max_target_length``.
      max_length_ratio, max_length_offset: the length rule (module docstring).
      alpha: beam search's length penalty exponent.
      length_bucket: :meth:`encode` rounds the source width up to a multiple of this (at most the
        preprocessor's ``max_source_length``), so that a compiled decoder is traced once per bucket.
      jit_compile: XLA-compile the search loops.
    """

    def __init__(self, model, preprocessor, *, max_decode_length=None, max_length_ratio=DEFAULT_RATIO,
                 max_length_offset=DEFAULT_OFFSET, alpha=DEFAULT_ALPHA, length_bucket=1, jit_compile=True):
        self.model, self.preprocessor = model, preprocessor
        self.max_source_length = int(preprocessor.max_source_length or model.max_source_length)
        if self.max_source_length > model.max_source_length:
            raise ValueError(f"the preprocessor keeps {self.max_source_length} source tokens, more than the model's "
                             f"max_source_length={model.max_source_length}")
        self.max_decode_length = int(max_decode_length or model.max_target_length)
        if not 1 <= self.max_decode_length <= model.max_target_length:
            raise ValueError(f"max_decode_length must be in [1, pe_target={model.max_target_length}], got "
                             f"{max_decode_length}")
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.max_length_ratio, self.max_length_offset = float(max_length_ratio), float(max_length_offset)
        self.alpha, self.length_bucket, self.jit_compile = float(alpha), int(length_bucket), bool(jit_compile)
        self.start_id, self.end_id = preprocessor.start_id, preprocessor.end_id
        self.pad_id = getattr(preprocessor, "pad_id", 0)

    def translate_fn(self, beam_size=None, *, max_length=None, max_length_ratio=None, max_length_offset=None,
                     alpha=None, jit_compile=None):
        """The compiled decoder (:func:`make_translate_fn`): greedy for ``beam_size`` None, else beam search of
        that size; options default to this decoder's. One per model and options, reused (so the in-process
        translator and an export of the same model share them)."""
        beam = beam_size is not None
        return cached_fn(
            self.model, "seq2seq", make_translate_fn, strategy="beam" if beam else "greedy",
            beam_size=int(beam_size) if beam else DEFAULT_BEAM_SIZE,
            alpha=float(self.alpha if alpha is None or not beam else alpha), max_length=max_length,
            max_length_ratio=float(self.max_length_ratio if max_length_ratio is None else max_length_ratio),
            max_length_offset=float(self.max_length_offset if max_length_offset is None else max_length_offset),
            max_decode_length=self.max_decode_length, start_id=self.start_id, end_id=self.end_id,
            pad_id=self.pad_id, jit_compile=self.jit_compile if jit_compile is None else bool(jit_compile))

    # ---- graph methods (also run eagerly) ----
    def encode(self, texts, length_bucket=None):
        """Source strings [B] -> ``(src_ids int32 (B, S), has_words bool (B,))``: ``[START] pieces [END]``
        (cut to ``max_source_length``, [END] kept), 0-padded to S = the longest row (at least 2) rounded up to
        a multiple of ``length_bucket`` (default this decoder's), at most ``max_source_length``;
        ``has_words`` is False for a source without word pieces (empty, blank)."""
        ids = self.preprocessor.source_ids(tf.convert_to_tensor(texts, tf.string))
        lengths = ids.row_lengths()
        bucket = int(length_bucket or self.length_bucket)
        longest = tf.reduce_max(tf.concat([lengths, tf.constant([2], lengths.dtype)], axis=0))
        width = tf.minimum(tf.cast(self.max_source_length, lengths.dtype), -(-longest // bucket) * bucket)
        dense = ids.to_tensor(default_value=0)
        dense = tf.pad(dense, [[0, 0], [0, width - tf.shape(dense, out_type=lengths.dtype)[1]]])
        return tf.cast(dense, tf.int32), lengths > 2

    def decode_buffer(self, src_ids, max_length=0):
        """int32 zeros ``(T + 1,)`` for :meth:`search`: T = ``max_length`` (a scalar; 0 = the length rule on the
        padded width of ``src_ids``), at most ``max_decode_length`` (:func:`decode_buffer`)."""
        return decode_buffer(src_ids, max_length, self.max_decode_length, self.max_length_ratio,
                             self.max_length_offset)

    def search(self, src_ids, buffer, beam_size=None, max_beam_size=None):
        """The search, in graph: ``-> (ids int32 (B, steps + 1), scores float32 (B,))``.

        ``buffer``: :meth:`decode_buffer`'s. ``beam_size``: None = greedy (scores 0); an int = beam search of
        that size (1 gives the greedy tokens, with their scores); an int32 scalar tensor = beam search of size
        ``clip(beam_size, 1, max_beam_size)``, one traced branch per size.
        """
        src_ids = tf.cast(src_ids, tf.int32)
        seed = as_seed(DEFAULT_SEED)

        def run(beam_size):
            def branch():
                ids, scores, steps = self.translate_fn(beam_size).core(src_ids, buffer, seed)
                # One static rank for every branch.
                return tf.ensure_shape(ids[:, :steps + 1], [None, None]), tf.ensure_shape(scores, [None])
            return branch

        if not tf.is_tensor(beam_size):
            return run(beam_size)()
        if not max_beam_size or max_beam_size < 1:
            raise ValueError(f"a tensor beam_size needs max_beam_size >= 1, got {max_beam_size!r}")
        index = tf.clip_by_value(beam_size, 1, max_beam_size) - 1
        return tf.switch_case(index, [run(k) for k in range(1, max_beam_size + 1)])

    def detokenize(self, ids, has_words=None):
        """Target ids ``[START] y_1 ... [END] 0 ...`` -> strings [B] ("" where ``has_words`` is False)."""
        text = self.preprocessor.detokenize_target(ids)
        return text if has_words is None else tf.where(has_words, text, tf.constant("", tf.string))

    def attention(self, src_ids, ids, has_words=None):
        """The last decoder layer's cross-attention over a decoded output, for plotting (one teacher-forced pass).

        ``ids``: :meth:`search`'s ``[START] y_1 ... y_m [END] 0 ...``. Returns ``tokens`` string [B, T] (the
        generated target word pieces, [END] included, "" after it), ``source_tokens`` string [B, S] ("" for
        padding), ``attention`` float32 [B, heads, T, S] (``attention[b, h, t, s]``: the weight of source token
        s when producing token t; 0 for padding rows and columns, and for rows whose ``has_words`` is False),
        ``target_length`` and ``source_length`` int32 [B].
        """
        src_ids = tf.cast(src_ids, tf.int32)
        ids = tf.cast(ids, tf.int32)
        # Every sentence generates >= 1 token, so ids has >= 2 columns, except in an empty batch (no step
        # runs): pad that one so the teacher-forced pass gets a non-empty target.
        ids = tf.pad(ids, [[0, 0], [0, tf.maximum(0, 2 - tf.shape(ids)[1])]])
        dec_in, generated = ids[:, :-1], ids[:, 1:]
        _, weights = self.model((src_ids, dec_in), training=False)
        attention = tf.cast(last_cross_attention(weights), tf.float32)
        valid_t = tf.cast(generated != self.pad_id, tf.float32)
        if has_words is not None:
            valid_t *= tf.cast(has_words, tf.float32)[:, tf.newaxis]
        valid_s = tf.cast(src_ids != self.pad_id, tf.float32)
        attention = attention * valid_t[:, tf.newaxis, :, tf.newaxis] * valid_s[:, tf.newaxis, tf.newaxis, :]
        empty = tf.constant("", tf.string)
        # to_tensor with an explicit shape: an empty batch would otherwise give [0, 0].
        tokens = self.preprocessor.tgt_tokenizer.lookup(tf.cast(generated, tf.int64)).to_tensor(
            default_value="", shape=tf.shape(generated, out_type=tf.int64))
        source_tokens = self.preprocessor.src_tokenizer.lookup(tf.cast(src_ids, tf.int64)).to_tensor(
            default_value="", shape=tf.shape(src_ids, out_type=tf.int64))
        return {"tokens": tf.where(valid_t > 0, tokens, empty),
                "source_tokens": tf.where(src_ids != self.pad_id, source_tokens, empty),
                "attention": attention,
                "target_length": tf.reduce_sum(tf.cast(valid_t, tf.int32), axis=1),
                "source_length": tf.reduce_sum(tf.cast(valid_s, tf.int32), axis=1)}

    # ---- in process (Python) ----
    def translate_ids(self, src_ids, beam_size=1, **options):
        """Source ids ``(B, S)`` -> ``(ids int32 (B, <= T + 1), scores (B,) or None)``: greedy for ``beam_size``
        <= 1, else beam search. ``options``: ``max_length`` (T; default the length rule), ``max_length_ratio``,
        ``max_length_offset``, ``alpha``, ``jit_compile`` (default: this decoder's)."""
        return self.translate_fn(beam_size if beam_size > 1 else None, **options)(src_ids)

    def translate(self, texts, beam_size=1, batch_size=64, attention=False, length_bucket=None, **options):
        """Translates source strings; returns one str per input, in input order.

        Sentences are decoded in batches of ``batch_size`` of similar length (sorted by character count), which
        wastes less work on padding; each result is independent of its batch-mates. ``options``: as
        :meth:`translate_ids`; ``length_bucket``: :meth:`encode`'s. ``attention=True``: one dict per input
        instead, ``{"translation", "tokens" (the generated word pieces, [END] included), "source_tokens",
        "attention" (float32 numpy ``(heads, len(tokens), len(source_tokens))``, the last decoder layer's
        cross-attention)}``.
        """
        texts = list(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = [None] * len(texts)
        for start in range(0, len(texts), batch_size):
            chunk = order[start:start + batch_size]
            src_ids, _ = self.encode([texts[i] for i in chunk], length_bucket)
            ids, _ = self.translate_ids(src_ids, beam_size=beam_size, **options)
            decoded = [t.decode("utf-8") for t in self.detokenize(ids).numpy()]
            if not attention:
                for i, text in zip(chunk, decoded):
                    out[i] = text
                continue
            weights = {k: v.numpy() for k, v in self.attention(src_ids, ids).items()}
            for row, (i, text) in enumerate(zip(chunk, decoded)):
                t, s = weights["target_length"][row], weights["source_length"][row]
                out[i] = {"translation": text,
                          "tokens": [p.decode("utf-8") for p in weights["tokens"][row, :t]],
                          "source_tokens": [p.decode("utf-8") for p in weights["source_tokens"][row, :s]],
                          "attention": np.asarray(weights["attention"][row, :, :t, :s])}
        return out
