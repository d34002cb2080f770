"""Model-agnostic token search over a ``step_fn`` callback: greedy / sampling (one loop, a pluggable
token chooser, :mod:`kerasplm.generation.sampling`) and beam search; one ``tf.while_loop`` each.

A step function scores the next token of ``n`` hypotheses at once::

    step_fn(ids, step, state) -> (logits, new_state)
      ids:    int32 (n,)   the last token of every hypothesis (at step 0: the start token, i.e. the
              last prompt token; the model places it at its own position, e.g. prompt_len - 1 + step)
      step:   int32 scalar loop step (0 = the start token)
      state:  nested structure of tensors whose leading dimension is n (e.g. a key/value cache)
      logits: float (n, vocab_size), unnormalised scores of the next token

``start_id`` may be one id for every row or an int32 ``(batch,)`` tensor (one per row/sentence).
``end_id`` is one stop id or a sequence of them (a row finishes when it emits any; an id that never
occurs, e.g. -1 or an empty sequence, means "never stop before the length cap").

Beam search reorders ``state`` along its first axis when hypotheses are re-ranked, so everything per
hypothesis must live in ``state``; per-sentence constants (encoder keys/values tiled over the beams)
belong in the closure. Both searches keep every shape static (buffers of ``max_length + 1`` positions),
so they compile with XLA; the loop condition ends the loop as soon as every sentence is finished.

The padding id never gets generated (its logit is set to -inf before the softmax). Sequences are
``[START] y_1 ... y_m`` with ``y_m = [END]`` unless the sentence hit its length cap, followed by padding.
"""
import tensorflow as tf

NEG_INF = float("-inf")


def length_penalty(length, alpha):
    """GNMT length penalty (Wu et al., 2016, eq. 14): lp(Y) = ((5 + |Y|) / 6)^alpha."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def _write_column(buffer, values, index):
    """``buffer[..., index] = values`` for an int buffer ``(..., width)`` that is 0 at ``index``."""
    onehot = tf.one_hot(index, tf.shape(buffer)[-1], dtype=buffer.dtype)
    return buffer + values[..., tf.newaxis] * onehot


def _start_ids(start_id, batch_size):
    return tf.broadcast_to(tf.cast(start_id, tf.int32), [batch_size])


def is_stop(token, end_id):
    """bool, shape of ``token``: whether each token is one of the stop ids ``end_id`` (int or sequence)."""
    stop_ids = end_id if tf.is_tensor(end_id) else tf.constant(end_id, tf.int32)
    stop_ids = tf.reshape(tf.cast(stop_ids, tf.int32), [-1])
    if stop_ids.shape[0] == 0:
        return tf.zeros_like(token, tf.bool)
    return tf.reduce_any(tf.equal(token[..., tf.newaxis], stop_ids), axis=-1)


def argmax_token(logits, step):
    """The greedy token chooser: ``argmax`` over the vocabulary (``step`` unused)."""
    return tf.argmax(logits, axis=-1, output_type=tf.int32)


def _keep_shape(x, like):
    x.set_shape(like.shape)
    return x


def _mask_pad(logits, pad_id):
    """float32 logits with the padding id's set to -inf (it is never generated)."""
    logits = tf.cast(logits, tf.float32)
    is_pad = tf.one_hot(pad_id, tf.shape(logits)[-1], on_value=True, off_value=False)
    return tf.where(is_pad, NEG_INF, logits)


def _log_probs(logits, pad_id):
    """log softmax over the vocabulary with the padding id excluded."""
    return tf.nn.log_softmax(_mask_pad(logits, pad_id), axis=-1)


def greedy_search(step_fn, state, max_lengths, max_length, start_id=2, end_id=3, pad_id=0, choose=argmax_token,
                  mask_pad=True):
    """Greedy decoding y_{t+1} = argmax_y P(y | y_0..y_t), or sampling with another ``choose``, until a
    stop id or the length cap.

    Args:
      step_fn, state: see the module docstring; ``state`` has leading dimension ``batch``.
      max_lengths: int32 ``(batch,)`` per-sentence caps on generated tokens (<= max_length).
      max_length: static Python int, the buffer size (positions 1..max_length).
      start_id, end_id: see the module docstring.
      choose: ``fn(logits float32 (batch, vocab), step) -> token int32 (batch,)``, the token chooser
        (:func:`argmax_token`, or a sampler of :mod:`kerasplm.generation.sampling`); the padding id's
        logit is -inf.
      mask_pad: False when ``step_fn`` returns something other than logits (e.g. hidden states) and ``choose``
        keeps the padding id out itself (:class:`kerasplm.generation.screened_argmax.ScreenedArgmax`).
    Returns:
      ``(ids int32 (batch, max_length + 1), num_steps int32 scalar)``: column 0 holds the start ids,
      columns past ``num_steps`` are 0.
    """
    batch_size = tf.shape(max_lengths)[0]
    last = _start_ids(start_id, batch_size)
    ids = _write_column(tf.zeros((batch_size, max_length + 1), tf.int32), last, 0)
    finished = tf.zeros((batch_size,), tf.bool)

    def cond(step, ids, last, finished, state):
        return tf.logical_and(step < max_length, tf.logical_not(tf.reduce_all(finished)))

    def body(step, ids, last, finished, state):
        logits, state = step_fn(last, step, state)
        token = choose(_mask_pad(logits, pad_id) if mask_pad else logits, step)
        token = tf.where(finished, tf.constant(pad_id, tf.int32), token)
        ids = _write_column(ids, token, step + 1)
        finished = finished | is_stop(token, end_id) | (step + 1 >= max_lengths)
        return step + 1, ids, token, finished, state

    step, ids, _, _, _ = tf.while_loop(cond, body, (tf.constant(0), ids, last, finished, state),
                                      maximum_iterations=max_length)
    return ids, step


def beam_search(step_fn, state, max_lengths, max_length, beam_size=4, alpha=0.6, start_id=2, end_id=3, pad_id=0):
    """Beam search with GNMT length penalty and separate alive / finished hypothesis sets.

    score(Y) = log P(Y | X) / lp(Y),  lp(Y) = ((5 + |Y|) / 6)^alpha,  |Y| = generated tokens incl. [END].

    Each step expands the K alive hypotheses to their 2K best continuations (by log P). A continuation
    ending in [END] joins the finished set when it ranks among the best K (so K=1 is exactly greedy);
    at a sentence's length cap every continuation finishes. The K best other continuations stay alive.
    The finished set keeps the K best scores seen. A sentence is done when K hypotheses have finished,
    when it reaches its cap, or when no alive hypothesis can beat the best finished one even at full
    length: log P_alive / lp(cap) < best finished score (log P only falls as Y grows and lp grows with
    |Y| for alpha >= 0). The loop ends when every sentence is done.

    Args:
      step_fn, state: see the module docstring; ``state`` has leading dimension ``batch * beam_size``
        (sentence-major: rows b*K .. b*K+K-1 are the beams of sentence b).
      max_lengths: int32 ``(batch,)`` per-sentence caps on generated tokens (<= max_length).
      max_length: static Python int, the buffer size.
      beam_size: K; the vocabulary must have at least 2K tokens.
      alpha: length-penalty exponent, >= 0 (0 = plain log-probability).
      start_id, end_id: see the module docstring (``start_id`` per sentence, shared by its beams).
    Returns:
      ``(ids int32 (batch, max_length + 1), scores float32 (batch,), num_steps int32 scalar)``: the best
      finished hypothesis of each sentence and its score log P / lp.
    """
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0 (the early-stopping bound assumes it), got {alpha}")
    k = beam_size
    batch_size = tf.shape(max_lengths)[0]
    width = max_length + 1
    starts = tf.tile(_start_ids(start_id, batch_size)[:, tf.newaxis], [1, k])
    alive_seq = _write_column(tf.zeros((batch_size, k, width), tf.int32), starts, 0)
    # Only beam 0 is alive at first, so the first expansion yields K distinct hypotheses.
    alive_logp = tf.tile(tf.constant([[0.0] + [NEG_INF] * (k - 1)]), [batch_size, 1])
    fin_seq = tf.zeros((batch_size, k, width), tf.int32)
    fin_score = tf.fill([batch_size, k], NEG_INF)
    num_fin = tf.zeros((batch_size,), tf.int32)
    done = tf.zeros((batch_size,), tf.bool)
    cap_lp = length_penalty(max_lengths, alpha)
    topk_in_rank = tf.range(2 * k) < k  # (2K,) continuation ranks allowed to finish with [END]
    loop_vars = (tf.constant(0), alive_seq, alive_logp, fin_seq, fin_score, num_fin, done, state)

    def cond(step, alive_seq, alive_logp, fin_seq, fin_score, num_fin, done, state):
        return tf.logical_and(step < max_length, tf.logical_not(tf.reduce_all(done)))

    def body(step, alive_seq, alive_logp, fin_seq, fin_score, num_fin, done, state):
        last = tf.reshape(tf.gather(alive_seq, step, axis=2), [-1])
        logits, state = step_fn(last, step, state)
        logp = _log_probs(logits, pad_id)
        vocab_size = tf.shape(logp)[-1]
        cand = tf.reshape(alive_logp[:, :, tf.newaxis] + tf.reshape(logp, [batch_size, k, -1]),
                          [batch_size, -1])                                  # (B, K·V)
        top_logp, top_idx = tf.math.top_k(cand, 2 * k)                       # (B, 2K)
        beam_idx, token = top_idx // vocab_size, top_idx % vocab_size
        seqs = _write_column(tf.gather(alive_seq, beam_idx, batch_dims=1), token, step + 1)

        live = top_logp > NEG_INF
        is_end = is_stop(token, end_id)
        at_cap = (step + 1 >= max_lengths)[:, tf.newaxis]
        finishing = live & ((is_end & topk_in_rank) | at_cap)
        cand_score = tf.where(finishing, top_logp / length_penalty(step + 1, alpha), NEG_INF)

        # Alive set: the K best continuations that did not end.
        new_alive_logp, pos = tf.math.top_k(tf.where(is_end | at_cap, NEG_INF, top_logp), k)
        new_alive_seq = tf.gather(seqs, pos, batch_dims=1)
        rows = tf.reshape(tf.gather(beam_idx, pos, batch_dims=1) + tf.range(batch_size)[:, tf.newaxis] * k, [-1])
        state = tf.nest.map_structure(lambda s: tf.gather(s, rows), state)

        # Finished set: the K best of the old finished set and the continuations that finished now.
        fin_score, pos = tf.math.top_k(tf.concat([fin_score, cand_score], axis=1), k)
        fin_seq = tf.gather(tf.concat([fin_seq, seqs], axis=1), pos, batch_dims=1)
        num_fin += tf.reduce_sum(tf.cast(finishing, tf.int32), axis=1)

        best_alive = new_alive_logp[:, 0]
        cannot_improve = best_alive / cap_lp < fin_score[:, 0]
        done = done | at_cap[:, 0] | (num_fin >= k) | cannot_improve | tf.equal(best_alive, NEG_INF)
        new_alive_logp = tf.where(done[:, tf.newaxis], NEG_INF, new_alive_logp)  # freeze done sentences
        out = (step + 1, new_alive_seq, new_alive_logp, fin_seq, fin_score, num_fin, done, state)
        return tf.nest.map_structure(_keep_shape, out, loop_vars)  # keep static shapes through gathers

    step, _, _, fin_seq, fin_score, _, _, _ = tf.while_loop(cond, body, loop_vars, maximum_iterations=max_length)
    return fin_seq[:, 0], fin_score[:, 0], step
