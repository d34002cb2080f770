"""The decoding engine: one entry point for greedy, sampling and beam search over any cached model.

``run_search`` dispatches a model-agnostic ``step_fn`` (see :mod:`kerasplm.generation.search`) to the
greedy/sampling loop or the beam-search loop. Models plug in through a small protocol:

Decoder-only models (``kerasplm.models.CausalLM``)::

    model.init_cache(batch_size, max_length) -> cache            (nested tensors, leading dim batch)
    model.call_with_cache(token_ids (batch, n), cache, cache_index) -> (logits (batch, n, vocab), hidden, cache)
    model.max_positions, model.vocab_size
    optional, for greedy decoding without full logits (:mod:`kerasplm.generation.screened_argmax`):
    model.output_table -> float32 (vocab, hidden) with logits = hidden · tableᵀ, or None
    model.hidden_with_cache(token_ids, cache, cache_index) -> (hidden (batch, n, hidden), cache)

Encoder-decoder models (``kerasplm.models.Transformer``, ``kerasplm.models.RNNSeq2Seq``;
:mod:`kerasplm.generation.seq2seq`)::

    model.encode(src_ids, pad_id) -> (enc_output, padding_mask)
    model.cross_attention_kv(enc_output) -> what each step reads of the source (nested tensors, leading dim
                                           batch), computed once per source
    model.init_cache(batch_size, max_length) -> cache
      or model.initial_cache(cross_kv) -> cache    (a decoder state that starts from the source: an RNN's)
    model.call_with_cache(ids, cache, cache_index, cross_kv, padding_mask) -> (logits, hidden, cache)
    model.max_target_length, model.vocab_size

Prompts (decoder-only) are **right-padded** ``(batch, width)`` with their true lengths. Why right
and not left padding: every row keeps positions 0, 1, 2, ... (learned position tables see the
positions they were trained on) and no padding mask is needed anywhere. The price is that rows are at
different positions: the cache index is a ``(batch,)`` vector. Decoding then works as follows:

1. prefill: one ``call_with_cache`` over ``prompt[:, :width - 1]`` at index 0 fills the cache (pad
   positions get garbage keys that are never visible: row b later overwrites slot ``len_b - 1 + t``
   at step t, and the causal mask hides every slot after the current position);
2. step t feeds each row's last token at position ``len_b - 1 + t`` (step 0: the last prompt token)
   and chooses the next token; generated tokens are written right after each row's own prompt.

The encoder-decoder path is the same loop with the start token as a one-token prompt (no prefill),
the encoder output's cross-attention keys/values computed once, outside the loop.
"""
import collections
import weakref

import tensorflow as tf

from kerasplm.generation.options import (DEFAULT_ALPHA, DEFAULT_BEAM_SIZE, DEFAULT_SEED, DEFAULT_STRATEGY,
                                         DEFAULT_TEMPERATURE, STRATEGIES, validate_options)
from kerasplm.generation.sampling import as_seed, make_chooser
from kerasplm.generation.screened_argmax import ScreenedArgmax
from kerasplm.generation.search import beam_search, greedy_search

__all__ = ["GenerationOutput", "STRATEGIES", "as_seed", "cached_fn", "causal_lm_search", "generate",
           "join_prompt_and_tokens", "make_generate_fn", "run_search", "validate_options"]
SCREEN_MIN_ROWS = 2  # screened greedy decoding from this many prompts per call on (see causal_lm_search)

GenerationOutput = collections.namedtuple("GenerationOutput", ["tokens", "lengths", "sequences", "scores"])
GenerationOutput.__doc__ = """Result of :func:`generate`.

tokens: int32 ``(batch, steps)`` generated tokens (a stop id included), then ``pad_id``.
lengths: int32 ``(batch,)`` number of generated tokens per row.
sequences: int32 ``(batch, width + steps)``: each row's prompt immediately followed by its generated
  tokens, then ``pad_id``.
scores: float32 ``(batch,)`` beam scores log P / lp (beam search), else None.
"""


def run_search(step_fn, state, start_ids, max_lengths, max_length, *, strategy=DEFAULT_STRATEGY, seed=None,
               temperature=DEFAULT_TEMPERATURE, top_k=None, top_p=None, beam_size=DEFAULT_BEAM_SIZE,
               alpha=DEFAULT_ALPHA, end_id=3, pad_id=0, choose=None, mask_pad=True):
    """The one search loop of kerasplm, for any ``step_fn`` (see :mod:`kerasplm.generation.search`).

    Args:
      step_fn, state: ``state`` has leading dimension ``batch`` (greedy/sample) or ``batch * beam_size``
        (beam, rows sentence-major).
      start_ids: int32 scalar or ``(batch,)``: each row's last prompt token (or [START]).
      max_lengths: int32 ``(batch,)`` per-row caps on generated tokens; ``max_length`` static buffer size.
      strategy: "greedy", "sample" (``seed``, ``temperature``, ``top_k``, ``top_p``: Python values or scalar
        tensors, see :func:`kerasplm.generation.sampling.make_sampler`) or "beam" (``beam_size``, ``alpha``:
        GNMT length penalty).
      end_id: stop id(s); ``pad_id`` is never generated.
      choose: a token chooser replacing the greedy/sample one; greedy/sample strategies only. ``mask_pad``:
        see :func:`greedy_search`.
    Returns:
      ``(ids int32 (batch, max_length + 1), scores float32 (batch,) or None, num_steps)``; column 0 of
      ``ids`` holds ``start_ids``.
    """
    if strategy == "beam":
        return beam_search(step_fn, state, max_lengths, max_length, beam_size, alpha, start_ids, end_id, pad_id)
    choose = choose or make_chooser(strategy, seed, temperature, top_k, top_p)
    ids, steps = greedy_search(step_fn, state, max_lengths, max_length, start_ids, end_id, pad_id, choose, mask_pad)
    return ids, None, steps


def causal_lm_search(model, prompt_ids, prompt_lengths, max_new_tokens, *, strategy=DEFAULT_STRATEGY,
                     beam_size=DEFAULT_BEAM_SIZE, max_lengths=None, screened_greedy=False, **options):
    """Prefill + search for a decoder-only model (see the module docstring); traceable, XLA-compilable.

    The one decoding path of decoder-only models: ``generate`` (in process) and the generator export's
    signatures (:mod:`kerasplm.models.gpt.export`) both run it.

    Args:
      prompt_ids: int32 ``(batch, width)`` right-padded prompts, static width.
      prompt_lengths: int32 ``(batch,)``, each in [1, width].
      max_new_tokens: static int (the buffer size).
      max_lengths: int32 ``(batch,)`` per-row caps <= max_new_tokens (default: max_new_tokens).
      strategy: as :func:`run_search`. With "sample", ``temperature`` / ``top_k`` / ``top_p`` / ``seed`` may
        be scalar tensors, e.g. a SavedModel signature's inputs, with a request's rules
        (:mod:`kerasplm.generation.options`: 0 = off): a tensor temperature <= 0 decodes greedily, through
        the greedy path below (a ``tf.cond`` around the two loops).
      screened_greedy: True: greedy decoding of ``SCREEN_MIN_ROWS`` or more prompts by a model with a float32
        tied output table (``model.output_table`` not None) picks each token from the hidden state with
        :class:`~kerasplm.generation.screened_argmax.ScreenedArgmax` (the float32 argmax, the output layer
        ~1.7× faster at 2–4 rows on CPU). The number of rows is the static batch size, or, when that is
        unknown when tracing (a SavedModel signature), the run-time one (a ``tf.cond``). It needs XLA: only
        under ``jit_compile=True`` (:func:`make_generate_fn` and the generator export set it so). False: full
        float32 logits every step.
      options: the keyword options of :func:`run_search`.
    Returns: as :func:`run_search`.
    """
    width = prompt_ids.shape[1]
    rows = beam_size if strategy == "beam" else 1
    # A negative pad_id (a vocabulary without a padding token, such as GPT-2's) is never looked up: padded
    # positions feed id 0 to the model; they lie past each row's length, so nothing attends to them.
    prompt_ids = tf.maximum(prompt_ids, 0)
    batch_ids = tf.repeat(prompt_ids, rows, axis=0) if rows > 1 else prompt_ids
    row_lengths = tf.repeat(prompt_lengths, rows, axis=0) if rows > 1 else prompt_lengths
    cache = model.init_cache(tf.shape(batch_ids)[0], width + max_new_tokens - 1)
    if width > 1:
        _, _, cache = model.call_with_cache(batch_ids[:, :-1], cache, 0)
    start_ids = tf.gather(prompt_ids, prompt_lengths - 1, batch_dims=1)
    if max_lengths is None:
        max_lengths = tf.fill(tf.shape(prompt_lengths), max_new_tokens)

    def logits_step(ids, step, cache):
        ids = tf.maximum(ids, 0)  # finished rows feed pad_id back
        logits, _, cache = model.call_with_cache(ids[:, tf.newaxis], cache, row_lengths - 1 + step)
        return logits[:, 0], cache

    def hidden_step(ids, step, cache):  # -> hidden states: the screened chooser needs no logits
        hidden, cache = model.hidden_with_cache(tf.maximum(ids, 0)[:, tf.newaxis], cache, row_lengths - 1 + step)
        return hidden[:, 0], cache

    def search(strategy, **overrides):
        return run_search(overrides.pop("step_fn", logits_step), cache, start_ids, max_lengths, max_new_tokens,
                          strategy=strategy, beam_size=beam_size, **{**options, **overrides})

    def screened():
        screen = ScreenedArgmax(table, exclude_id=options.get("pad_id", 0))
        return search("greedy", step_fn=hidden_step, choose=lambda hidden, step: screen(hidden), mask_pad=False)

    def greedy():
        if not (screened_greedy and table is not None and options.get("choose") is None):
            return search("greedy")
        # One row: XLA:CPU's float32 matrix-vector product already reads the table near the bandwidth limit and
        # the screen costs more than it saves (benchmarks/RESULTS.md, issue 13); from two rows on it wins.
        if prompt_ids.shape[0] is not None:
            return screened() if prompt_ids.shape[0] >= SCREEN_MIN_ROWS else search("greedy")
        return _cond(tf.shape(prompt_ids)[0] >= SCREEN_MIN_ROWS, screened, lambda: search("greedy"))

    table = getattr(model, "output_table", None)
    if strategy == "greedy":
        return greedy()
    if strategy == "sample" and tf.is_tensor(options.get("temperature")):
        return _cond(options["temperature"] > 0.0, lambda: search("sample"), greedy)
    return search(strategy)


def _cond(pred, true_fn, false_fn):
    """``tf.cond`` over two greedy/sample searches: ``(ids, None, num_steps)``."""
    ids, steps = tf.cond(pred, lambda: _ids_and_steps(true_fn()), lambda: _ids_and_steps(false_fn()))
    return ids, None, steps


def _ids_and_steps(result):
    ids, _, steps = result
    return ids, steps


def join_prompt_and_tokens(prompt_ids, prompt_lengths, tokens, pad_id=0):
    """``sequences[b] = prompt[b, :len_b] + tokens[b] + padding``: int32 ``(batch, width + steps)``."""
    width, steps = tf.shape(prompt_ids)[1], tf.shape(tokens)[1]
    columns = tf.range(width + steps)[tf.newaxis]                               # (1, W + S)
    in_prompt = columns < prompt_lengths[:, tf.newaxis]
    pad = tf.fill(tf.shape(tokens)[:1], pad_id)[:, tf.newaxis]
    prompt = tf.concat([prompt_ids, tf.tile(pad, [1, steps])], axis=1)
    generated = tf.concat([tokens, pad], axis=1)                                # (B, S + 1): last = pad
    index = tf.clip_by_value(columns - prompt_lengths[:, tf.newaxis], 0, steps)  # past the tokens: pad
    return tf.where(in_prompt, prompt, tf.gather(generated, index, batch_dims=1))


def _check_prompts(prompt_ids, prompt_lengths, pad_id):
    prompt_ids = tf.convert_to_tensor(prompt_ids)
    if prompt_ids.shape.rank != 2 or not prompt_ids.dtype.is_integer or prompt_ids.shape[1] == 0:
        raise ValueError(f"prompt_ids must be integer token ids of shape (batch, width >= 1), got "
                         f"{prompt_ids.dtype.name} {prompt_ids.shape}")
    prompt_ids = tf.cast(prompt_ids, tf.int32)
    if prompt_lengths is None:
        prompt_lengths = tf.reduce_sum(tf.cast(tf.not_equal(prompt_ids, pad_id), tf.int32), axis=1)
    prompt_lengths = tf.cast(tf.convert_to_tensor(prompt_lengths), tf.int32)
    if prompt_lengths.shape != prompt_ids.shape[:1]:
        raise ValueError(f"prompt_lengths must have shape {prompt_ids.shape[:1]}, got {prompt_lengths.shape}")
    lengths = prompt_lengths.numpy()
    if lengths.size and (lengths.min() < 1 or lengths.max() > prompt_ids.shape[1]):
        raise ValueError(f"every prompt needs between 1 and {prompt_ids.shape[1]} tokens; got lengths "
                         f"{lengths.tolist()}")
    return prompt_ids, prompt_lengths


def make_generate_fn(model, *, max_new_tokens, strategy=DEFAULT_STRATEGY, temperature=DEFAULT_TEMPERATURE,
                     top_k=None, top_p=None, beam_size=DEFAULT_BEAM_SIZE, alpha=DEFAULT_ALPHA, stop_ids=(), pad_id=0,
                     jit_compile=True, screened_greedy=True):
    """A reusable compiled generator for a decoder-only model:
    ``fn(prompt_ids (batch, width), prompt_lengths=None, seed=0) -> GenerationOutput``.

    ``prompt_lengths`` defaults to the number of non-``pad_id`` tokens per row (prompts right-padded).
    ``fn.core(prompt_ids int32, prompt_lengths int32, seed int32 (2,))`` is the ``tf.function`` (XLA
    with ``jit_compile``); it is traced once per prompt shape (the seed is a tensor: new seeds reuse
    the trace) and returns the full buffers ``(ids (batch, max_new_tokens + 1), scores, num_steps)``.
    """
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    validate_options(strategy, temperature, top_k, top_p, beam_size, alpha, model.vocab_size)
    options = dict(strategy=strategy, temperature=temperature, top_k=top_k, top_p=top_p, beam_size=beam_size,
                   alpha=alpha, end_id=tuple(stop_ids) if hasattr(stop_ids, "__iter__") else (stop_ids,),
                   pad_id=pad_id, screened_greedy=screened_greedy and jit_compile)  # the screen needs XLA

    @tf.function(jit_compile=jit_compile)
    def core(prompt_ids, prompt_lengths, seed):
        width = prompt_ids.shape[1]
        if width + max_new_tokens - 1 > model.max_positions:
            raise ValueError(f"prompt width {width} + max_new_tokens {max_new_tokens} - 1 exceeds the model's "
                             f"max_positions={model.max_positions}")
        ids, scores, steps = causal_lm_search(model, prompt_ids, prompt_lengths, max_new_tokens, seed=seed,
                                              **options)
        return ids, (tf.zeros_like(prompt_lengths, tf.float32) if scores is None else scores), steps

    def generate_fn(prompt_ids, prompt_lengths=None, seed=DEFAULT_SEED):
        prompt_ids, prompt_lengths = _check_prompts(prompt_ids, prompt_lengths, pad_id)
        ids, scores, steps = core(prompt_ids, prompt_lengths, as_seed(seed))
        tokens = ids[:, 1:steps + 1]
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(tokens, pad_id), tf.int32), axis=1)
        sequences = join_prompt_and_tokens(prompt_ids, prompt_lengths, tokens, pad_id)
        return GenerationOutput(tokens, lengths, sequences, scores if strategy == "beam" else None)

    generate_fn.core = core
    return generate_fn


_FNS = weakref.WeakKeyDictionary()  # model -> {(kind, options): compiled function}


def cached_fn(model, kind, maker, **options):
    """One ``maker(model, **options)`` function per model and options (so seen shapes never retrace)."""
    fns = _FNS.setdefault(model, {})
    key = (kind, tuple(sorted(options.items())))
    if key not in fns:
        fns[key] = maker(model, **options)
    return fns[key]


def generate(model, prompt_ids, prompt_lengths=None, *, max_new_tokens, seed=DEFAULT_SEED, strategy=DEFAULT_STRATEGY,
             temperature=DEFAULT_TEMPERATURE, top_k=None, top_p=None, beam_size=DEFAULT_BEAM_SIZE,
             alpha=DEFAULT_ALPHA, stop_ids=(), pad_id=0, jit_compile=True, screened_greedy=True):
    """Generates continuations of right-padded prompts with a decoder-only model (``CausalLM``).

    Args:
      prompt_ids: int ``(batch, width)``, right-padded with ``pad_id``.
      prompt_lengths: int ``(batch,)``; default: non-pad tokens per row.
      max_new_tokens: tokens generated per row at most (a stop id included).
      seed: int or two ints (sampling only); the same seed gives the same tokens.
      strategy: "greedy", "sample" (temperature, top_k, top_p) or "beam" (beam_size, alpha); the options and
        their defaults are :mod:`kerasplm.generation.options`'.
      stop_ids: ids that end a row (kept in its output); ``pad_id`` is never generated.
      pad_id: the padding id of the prompts and outputs; a negative one (e.g. -1 for GPT-2's vocabulary,
        which has no padding token and whose id 0 is "!") lies outside the vocabulary, so every token can
        be generated.
      screened_greedy: see :func:`causal_lm_search` (greedy only; False reads the full float32 logits).
    Returns:
      :data:`GenerationOutput`. Compiled functions are reused per model and options.
    """
    fn = cached_fn(model, "causal_lm", make_generate_fn, max_new_tokens=max_new_tokens, strategy=strategy,
                   temperature=temperature, top_k=top_k, top_p=top_p, beam_size=beam_size, alpha=alpha,
                   stop_ids=tuple(stop_ids), pad_id=pad_id, jit_compile=jit_compile, screened_greedy=screened_greedy)
    return fn(prompt_ids, prompt_lengths, seed)
