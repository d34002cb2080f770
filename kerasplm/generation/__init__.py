"""Decoding over token ids: greedy, seeded sampling (temperature / top-k / top-p) and beam search, with a
fixed-size key/value cache, in one XLA-compilable ``tf.while_loop``.

``engine`` is the entry point (``generate`` for decoder-only models, ``run_search`` for any step
function) and documents the model protocol; ``options`` declares the decoding options (defaults,
validation, a request's 0 = off convention), ``search`` holds the model-agnostic loops, ``sampling`` the
token choosers (one sampler, for Python and tensor options), ``seq2seq`` the encoder-decoder (translator)
client of the engine (``Seq2SeqDecoder``: strings in, strings out, in process and in the SavedModel).
"""
from kerasplm.generation.engine import (GenerationOutput, causal_lm_search, generate,
                                        join_prompt_and_tokens, make_generate_fn, run_search)
from kerasplm.generation.options import request_checks, resolve_request, validate_options
from kerasplm.generation.sampling import filter_logits, make_sampler
from kerasplm.generation.search import beam_search, greedy_search, is_stop, length_penalty
from kerasplm.generation.seq2seq import (Seq2SeqDecoder, attention_for, beam_search_decode, cache_length,
                                         decode_buffer, greedy_decode, make_beam_search_fn,
                                         make_greedy_fn, make_translate_fn, seq2seq_search, sequence_log_probs,
                                         source_max_lengths, transformer_step_fn)

__all__ = [
    "GenerationOutput", "Seq2SeqDecoder", "attention_for", "beam_search", "beam_search_decode", "cache_length",
    "causal_lm_search", "decode_buffer", "filter_logits", "generate", "greedy_decode",
    "greedy_search", "is_stop", "join_prompt_and_tokens", "length_penalty",
    "make_beam_search_fn", "make_generate_fn", "make_greedy_fn", "make_sampler", "make_translate_fn",
    "request_checks", "resolve_request", "run_search", "seq2seq_search", "sequence_log_probs",
    "source_max_lengths", "transformer_step_fn", "validate_options",
]
