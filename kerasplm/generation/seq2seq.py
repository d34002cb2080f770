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
tokens (its [END] included), src_len_i = its number of non-pad source tokens. T is static (it sizes the
key/value cache and the output buffer): ``max_length`` when given, else
min(P, ceil(max_length_ratio · inp_len + max_length_offset)) for the padded source width inp_len;
always <= P = ``model.max_target_length`` (pe_target: the decoder has no position encodings beyond). Defaults ratio 1.5, offset 10:
translations are rarely 1.5× longer than their source, and +10 leaves room for very short inputs.

Compilation. ``make_translate_fn`` (and its greedy / beam forms ``make_greedy_fn`` /
``make_beam_search_fn``) return a function backed by one ``tf.function`` (``jit_compile=True``: XLA)
holding the whole decoding loop. It is traced (and
XLA-compiled) once per distinct source shape ``(batch, inp_len)``: pad sources to a few bucket widths to
bound compiles. Source ids are cast to int32 first, so int32 and int64 inputs share a trace.
``greedy_decode`` / ``beam_search_decode`` reuse one such function per model and options.
"""
import math

import tensorflow as tf

from kerasplm.generation.engine import as_seed, cached_fn, run_search, validate_options
from kerasplm.generation.search import _log_probs

DEFAULT_RATIO = 1.5
DEFAULT_OFFSET = 10


def cache_length(model, inp_len, max_length=None, max_length_ratio=DEFAULT_RATIO,
                 max_length_offset=DEFAULT_OFFSET):
    """The static cap T on generated tokens (see the module docstring); ``inp_len`` may be None."""
    pe_target = model.max_target_length
    if max_length is not None:
        if not 0 < max_length <= pe_target:
            raise ValueError(f"max_length must be in [1, pe_target={pe_target}], got {max_length}")
        return int(max_length)
    if inp_len is None:
        return pe_target
    return max(1, min(pe_target, math.ceil(max_length_ratio * inp_len + max_length_offset)))


def source_max_lengths(src_ids, cap, max_length_ratio=DEFAULT_RATIO, max_length_offset=DEFAULT_OFFSET, pad_id=0):
    """int32 ``(batch,)``: max_len_i = clip(floor(ratio · src_len_i + offset), 1, cap)."""
    src_len = tf.reduce_sum(tf.cast(tf.not_equal(src_ids, pad_id), tf.float32), axis=1)
    limit = tf.cast(tf.floor(max_length_ratio * src_len + max_length_offset), tf.int32)
    return tf.clip_by_value(limit, 1, cap)


def transformer_step_fn(model, src_ids, max_length, beam_size=1, pad_id=0):
    """Encodes the source once and returns ``(step_fn, cache)`` for :mod:`kerasplm.generation.search`.

    The encoder output, its padding mask and every layer's cross-attention keys/values are computed
    here, once, and repeated ``beam_size`` times (rows sentence-major). ``cache`` is the per-layer
    self-attention cache ``[(k, v)]``, each ``(batch · beam_size, num_heads, max_length, depth)``;
    ``step_fn(ids (n,), step, cache) -> (logits (n, target_vocab_size), cache)``.
    """
    enc_output, padding_mask = model.encode(src_ids, pad_id)
    cross_kv = model.cross_attention_kv(enc_output)
    if beam_size > 1:
        cross_kv = [(tf.repeat(k, beam_size, axis=0), tf.repeat(v, beam_size, axis=0)) for k, v in cross_kv]
        padding_mask = tf.repeat(padding_mask, beam_size, axis=0)
    cache = model.init_cache(tf.shape(src_ids)[0] * beam_size, max_length)

    def step_fn(ids, step, cache):
        logits, _, cache = model.call_with_cache(ids[:, tf.newaxis], cache, step, cross_kv, padding_mask)
        return logits[:, 0], cache

    return step_fn, cache


def seq2seq_search(model, src_ids, *, max_length=None, max_length_ratio=DEFAULT_RATIO,
                   max_length_offset=DEFAULT_OFFSET, start_id=2, end_id=3, pad_id=0, strategy="greedy",
                   beam_size=4, **options):
    """Encode + search, traceable (XLA-compilable): ``src_ids int32 (batch, inp_len)`` ->
    ``(ids (batch, T + 1), scores or None, num_steps)`` (see :func:`kerasplm.generation.engine.run_search`;
    ``options``: seed, temperature, top_k, top_p, alpha)."""
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


def make_translate_fn(model, *, strategy="greedy", beam_size=4, alpha=0.6, temperature=1.0, top_k=None, top_p=None,
                      max_length=None, max_length_ratio=DEFAULT_RATIO, max_length_offset=DEFAULT_OFFSET, start_id=2,
                      end_id=3, pad_id=0, jit_compile=True):
    """A reusable compiled decoder with any strategy ("greedy", "sample", "beam"):
    ``fn(src_ids (batch, inp_len), seed=0) -> (ids int32 (batch, <= T + 1), scores (batch,) or None)``.

    ``fn.core(src_ids int32, seed int32 (2,))`` is the ``tf.function``; one trace per source shape.
    """
    validate_options(strategy, temperature, top_k, top_p, beam_size, alpha, model.vocab_size)
    length = dict(max_length=max_length, max_length_ratio=max_length_ratio, max_length_offset=max_length_offset)
    options = dict(strategy=strategy, beam_size=beam_size, alpha=alpha, temperature=temperature, top_k=top_k,
                   top_p=top_p, start_id=start_id, end_id=end_id, pad_id=pad_id, **length)

    @tf.function(jit_compile=jit_compile)
    def core(src_ids, seed):
        ids, scores, steps = seq2seq_search(model, src_ids, seed=seed, **options)
        return ids, (tf.zeros([tf.shape(src_ids)[0]]) if scores is None else scores), steps

    def decode(src_ids, seed=0):
        ids, scores, steps = core(_as_source(src_ids), as_seed(seed))
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


def make_beam_search_fn(model, *, beam_size=4, alpha=0.6, max_length=None, max_length_ratio=DEFAULT_RATIO,
                        max_length_offset=DEFAULT_OFFSET, start_id=2, end_id=3, pad_id=0, jit_compile=True):
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


def beam_search_decode(model, src_ids, beam_size=4, alpha=0.6, max_length=None, max_length_ratio=DEFAULT_RATIO,
                       max_length_offset=DEFAULT_OFFSET, start_id=2, end_id=3, pad_id=0, jit_compile=True):
    """Cached beam search: ``src_ids (batch, inp_len) -> (best ids int32 (batch, <= T + 1), scores (batch,))``,
    scores = log P(Y | X) / ((5 + |Y|) / 6)^alpha. ``beam_size=1`` gives exactly the greedy tokens."""
    return cached_fn(model, "beam", make_beam_search_fn, beam_size=beam_size, alpha=alpha, max_length=max_length,
                      max_length_ratio=max_length_ratio, max_length_offset=max_length_offset, start_id=start_id,
                      end_id=end_id, pad_id=pad_id, jit_compile=jit_compile)(src_ids)


def greedy_decode_uncached(model, src_ids, max_length=None, max_length_ratio=DEFAULT_RATIO,
                           max_length_offset=DEFAULT_OFFSET, start_id=2, end_id=3, pad_id=0):
    """Reference greedy decoding that re-runs the full model on the whole prefix for every token (eager,
    like the seed's ``evaluate`` but batched, same length rule and stopping as ``greedy_decode``).
    The model's own masks treat id 0 as padding."""
    src_ids = _as_source(src_ids)
    cap = cache_length(model, src_ids.shape[1], max_length, max_length_ratio, max_length_offset)
    max_lengths = source_max_lengths(src_ids, cap, max_length_ratio, max_length_offset, pad_id)
    out = tf.fill([src_ids.shape[0], 1], start_id)
    finished = tf.zeros([src_ids.shape[0]], tf.bool)
    for step in range(cap):
        if bool(tf.reduce_all(finished)):
            break
        logits, _ = model((src_ids, out), training=False)
        token = tf.argmax(_log_probs(logits[:, -1], pad_id), axis=-1, output_type=tf.int32)
        token = tf.where(finished, pad_id, token)
        out = tf.concat([out, token[:, tf.newaxis]], axis=1)
        finished = finished | tf.equal(token, end_id) | (step + 1 >= max_lengths)
    return out


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
