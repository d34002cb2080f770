"""The model-agnostic search loops on synthetic step functions (known distributions)."""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.generation import beam_search, greedy_search, length_penalty

START, END, PAD = 2, 3, 0


def bigram_step_fn(table):
    """A "model" whose next-token distribution depends on the last token only: log P = table[last]."""
    log_table = tf.math.log(tf.constant(table, tf.float32))

    def step_fn(ids, step, state):
        return tf.gather(log_table, ids), state

    return step_fn


# Vocabulary: 0 pad, 1 "a", 2 start, 3 end, 4 "b", 5 "c". Greedy takes "a" (0.5) first and then gets
# stuck with flat continuations; "b" (0.4) is followed by [END] with probability 0.9.
TABLE = np.full((6, 6), 1e-3)
TABLE[START, [1, 4, 5]] = [0.5, 0.4, 0.097]
TABLE[1, [1, 4, 3, 5]] = [0.3, 0.29, 0.28, 0.127]
TABLE[4, [3, 1, 5]] = [0.9, 0.05, 0.047]
TABLE[5, [3, 1, 4]] = [0.2, 0.4, 0.397]
TABLE[3] = TABLE[1]


def total_log_prob(ids):
    """log P of [START] y_1 .. [END] under TABLE, the pad id excluded from the softmax as in decoding."""
    table = TABLE.copy()
    table[:, PAD] = 0
    table /= table.sum(axis=1, keepdims=True)
    ids = [int(i) for i in ids]
    out = 0.0
    for prev, nxt in zip(ids, ids[1:]):
        if nxt == PAD:
            break
        out += np.log(table[prev, nxt])
    return out


def test_length_penalty_is_gnmt():
    np.testing.assert_allclose(length_penalty(tf.constant([1, 7]), 0.6).numpy(),
                               [1.0, (12 / 6) ** 0.6], rtol=1e-6)
    assert float(length_penalty(10, 0.0)) == 1.0


@pytest.mark.parametrize("jit_compile", [False, True])
def test_beam_search_beats_greedy_on_constructed_case(jit_compile):
    step_fn = bigram_step_fn(TABLE)
    max_lengths = tf.constant([6], tf.int32)

    @tf.function(jit_compile=jit_compile)
    def run():
        greedy, _ = greedy_search(step_fn, (), max_lengths, 6)
        beam, score, _ = beam_search(step_fn, (), max_lengths, 6, beam_size=2, alpha=0.0)
        return greedy, beam, score

    greedy, beam, score = run()
    assert greedy.numpy()[0].tolist() == [START, 1, 1, 1, 1, 1, 1]  # never ends: hits the cap
    assert beam.numpy()[0].tolist() == [START, 4, END, 0, 0, 0, 0]
    beam_lp, greedy_lp = total_log_prob(beam.numpy()[0]), total_log_prob(greedy.numpy()[0])
    assert beam_lp > greedy_lp + 1.0
    np.testing.assert_allclose(score.numpy()[0], beam_lp, rtol=1e-5)


def test_beam_size_one_is_greedy_with_length_penalty():
    step_fn = bigram_step_fn(TABLE)
    max_lengths = tf.constant([6, 3], tf.int32)
    greedy, g_steps = greedy_search(step_fn, (), max_lengths, 6)
    beam, _, b_steps = beam_search(step_fn, (), max_lengths, 6, beam_size=1, alpha=1.0)
    np.testing.assert_array_equal(beam.numpy(), greedy.numpy())
    assert int(b_steps) == int(g_steps)


def countdown_step_fn(vocab_size=6):
    """Row i emits token 5 until position n_i, then [END]; ``state`` holds n_i (reordered with beams)."""
    def step_fn(ids, step, n):
        token = tf.where(step + 1 >= n, END, 5)
        return tf.one_hot(token, vocab_size) * 10.0, n

    return step_fn


def test_greedy_stops_at_end_pads_after_it_and_ends_the_loop_early():
    n = tf.constant([2, 4, 1], tf.int32)
    ids, steps = greedy_search(countdown_step_fn(), n, tf.fill([3], 10), 10)
    assert int(steps) == 4  # the loop ran until the last sentence ended, not to the cap of 10
    assert ids.numpy()[:, :6].tolist() == [[START, 5, END, 0, 0, 0],
                                           [START, 5, 5, 5, END, 0],
                                           [START, END, 0, 0, 0, 0]]
    assert not ids.numpy()[:, 6:].any()


def test_beam_stops_when_all_sentences_finished():
    n = tf.constant([2, 4], tf.int32)
    state = tf.repeat(n, 3)  # beam_size 3, sentence-major rows
    ids, scores, steps = beam_search(countdown_step_fn(), state, tf.fill([2], 10), 10, beam_size=3)
    assert ids.numpy()[0, :4].tolist() == [START, 5, END, 0]
    assert ids.numpy()[1, :6].tolist() == [START, 5, 5, 5, END, 0]
    assert int(steps) < 10


def test_per_sentence_length_cap():
    step_fn = bigram_step_fn(TABLE)  # greedy never emits [END] here
    ids, steps = greedy_search(step_fn, (), tf.constant([2, 5, 1], tf.int32), 8)
    lengths = (ids.numpy()[:, 1:] != PAD).sum(axis=1)
    assert lengths.tolist() == [2, 5, 1] and int(steps) == 5
    ids, _, _ = beam_search(step_fn, (), tf.constant([2, 5, 1], tf.int32), 8, beam_size=2, alpha=0.6)
    assert ((ids.numpy()[:, 1:] != PAD).sum(axis=1) <= [2, 5, 1]).all()


def test_negative_alpha_is_rejected():
    with pytest.raises(ValueError, match="alpha"):
        beam_search(bigram_step_fn(TABLE), (), tf.constant([3]), 3, alpha=-0.5)
