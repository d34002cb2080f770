"""Cached decoding of the RNN translator (the decoder state is the cache) against naive decoding that re-runs the
whole teacher-forced model on every prefix, on random weights: greedy and beam search, a GRU with additive attention
and a bidirectional two-layer LSTM with Luong's general score."""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.generation import beam_search_decode, greedy_decode
from kerasplm.generation.engine import run_search
from kerasplm.generation.seq2seq import source_max_lengths
from kerasplm.models.rnn_seq2seq import RNNSeq2Seq
from kerasplm.models import get_preset
from tests.reference_loops import greedy_decode_uncached

# Three sources of different lengths; with 12 target tokens and random weights some rows end early.
SRC = tf.constant([[2, 5, 6, 7, 3, 0, 0], [2, 9, 3, 0, 0, 0, 0], [2, 4, 8, 4, 8, 4, 3]])
T = 10
# (Without attention the step is the same loop: tests/models/rnn_seq2seq/test_model.py checks its cached steps.)
VARIANTS = {"additive": {},
            "lstm_bi_2": dict(cell="lstm", bidirectional=True, num_layers=2, attention="general")}


@pytest.fixture(scope="module", params=list(VARIANTS))
def model(request):
    tf.keras.utils.set_random_seed(11)
    config = get_preset("gru_bahdanau_tiny", input_vocab_size=12, target_vocab_size=12, max_target_length=T,
                        **VARIANTS[request.param])
    return RNNSeq2Seq.from_config_object(config)


def naive_beam_search(model, src_ids, beam_size, alpha=0.6):
    """The engine's beam search over a step that re-runs the model on the whole prefix (no state kept): its
    'cache' is the prefix itself, (batch · beam, T + 1) token ids."""
    rows = tf.repeat(src_ids, beam_size, axis=0)

    def step_fn(ids, step, prefix):
        prefix = tf.tensor_scatter_nd_update(
            prefix, tf.stack([tf.range(tf.shape(ids)[0]), tf.fill(tf.shape(ids), step)], axis=1), ids)
        logits, _ = model((rows, prefix[:, :step + 1]), training=False)
        return logits[:, -1], prefix

    max_lengths = source_max_lengths(src_ids, T)
    ids, scores, steps = run_search(step_fn, tf.zeros([rows.shape[0], T + 1], tf.int32), 2, max_lengths, T,
                                    strategy="beam", beam_size=beam_size, alpha=alpha, end_id=3, pad_id=0)
    return ids[:, :steps + 1], scores


def test_cached_greedy_equals_uncached(model):
    cached = greedy_decode(model, SRC, max_length=T).numpy()
    np.testing.assert_array_equal(cached, greedy_decode_uncached(model, SRC, max_length=T).numpy())
    assert cached.shape[1] > 2


def test_cached_beam_equals_naive_beam(model):
    ids, scores = beam_search_decode(model, SRC, beam_size=3, max_length=T)
    naive_ids, naive_scores = naive_beam_search(model, SRC, 3)
    np.testing.assert_array_equal(ids.numpy(), naive_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), naive_scores.numpy(), rtol=1e-5)
