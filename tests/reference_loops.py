"""Reference decoding loops, for tests only: the whole model re-run on the whole sequence for every new token (eager,
no cache), against which the engine's cached, XLA-compiled decoding is checked token for token."""
import tensorflow as tf

from kerasplm.generation.engine import _check_prompts
from kerasplm.generation.seq2seq import (DEFAULT_OFFSET, DEFAULT_RATIO, _as_source, _log_probs, cache_length,
                                         source_max_lengths)


def generate_uncached(model, prompt_ids, prompt_lengths=None, *, max_new_tokens, stop_ids=(), pad_id=0):
    """Reference greedy generation that re-runs ``model(token_ids)`` on the whole sequence for every
    token (eager, no cache); same stopping rule and outputs as ``generate(..., strategy="greedy")``."""
    prompt_ids, prompt_lengths = _check_prompts(prompt_ids, prompt_lengths, pad_id)
    rows = []
    for ids, length in zip(prompt_ids.numpy().tolist(), prompt_lengths.numpy().tolist()):
        seq, out = ids[:length], []
        for _ in range(max_new_tokens):
            logits = model(tf.constant([seq], tf.int32), training=False)[0, -1].numpy()
            if pad_id >= 0:
                logits[pad_id] = -float("inf")
            token = int(logits.argmax())
            seq, out = seq + [token], out + [token]
            if token in stop_ids:
                break
        rows.append(out)
    width = max(len(r) for r in rows)
    return tf.constant([r + [pad_id] * (width - len(r)) for r in rows], tf.int32)


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
