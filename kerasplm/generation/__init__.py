"""Decoding over token ids: cached greedy and beam search in one XLA-compilable ``tf.while_loop``.

``search`` holds the model-agnostic loops (driven by a ``step_fn`` callback); ``seq2seq`` wires them to
the encoder-decoder ``Transformer`` (key/value cache, cross-attention keys/values computed once).
"""
from kerasplm.generation.search import beam_search, greedy_search, length_penalty
from kerasplm.generation.seq2seq import (attention_for, beam_search_decode, cache_length, greedy_decode,
                                         greedy_decode_uncached, make_beam_search_fn, make_greedy_fn,
                                         sequence_log_probs, source_max_lengths, transformer_step_fn)

__all__ = [
    "attention_for", "beam_search", "beam_search_decode", "cache_length", "greedy_decode",
    "greedy_decode_uncached", "greedy_search", "length_penalty", "make_beam_search_fn", "make_greedy_fn",
    "sequence_log_probs", "source_max_lengths", "transformer_step_fn",
]
