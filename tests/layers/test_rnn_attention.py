"""Additive (Bahdanau) and Luong dot/general attention with the seed's masked softmax, against numpy formulas
(kerasplm/layers/rnn_attention.py). The seed's own code is re-implemented in tests/models/rnn_seq2seq/test_model.py."""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.layers import AdditiveAttention, masked_softmax

RNG = np.random.default_rng(0)
Q = RNG.normal(size=(2, 3, 6)).astype(np.float32)     # (B, Tq, Dq)
K = RNG.normal(size=(2, 5, 6)).astype(np.float32)     # (B, S, Dk)
V = RNG.normal(size=(2, 5, 4)).astype(np.float32)     # (B, S, Dv)
MASK = np.array([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], np.float32)   # row 0: 3 valid source positions


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_masked_softmax_gives_masked_positions_zero_weight():
    scores = RNG.normal(size=(2, 3, 5)).astype(np.float32) * 10
    weights = masked_softmax(tf.constant(scores), tf.constant(MASK[:, None, :])).numpy()
    np.testing.assert_array_equal(weights[0, :, 3:], 0.0)
    np.testing.assert_allclose(weights[0, :, :3], _softmax(scores[0, :, :3]), rtol=1e-6)
    np.testing.assert_allclose(weights[1], _softmax(scores[1]), rtol=1e-6)
    # A row with nothing to attend to gets uniform weights, as the seed's (-1e6 everywhere).
    np.testing.assert_allclose(masked_softmax(tf.constant(scores[:1, :1]), tf.ones([1, 1, 5])).numpy(), 0.2)


@pytest.mark.parametrize("score", ["additive", "dot", "general"])
def test_scores_context_and_weights_match_the_formulas(score):
    layer = AdditiveAttention(7, score=score)
    context, weights = layer(tf.constant(Q), tf.constant(K), tf.constant(V), padding_mask=tf.constant(MASK))
    if score == "additive":   # w_vᵀ tanh(W_q q + W_k k)
        wq, wk, wv = layer.W_q.kernel.numpy(), layer.W_k.kernel.numpy(), layer.w_v.kernel.numpy()
        expected = (np.tanh((Q @ wq)[:, :, None, :] + (K @ wk)[:, None, :, :]) @ wv)[..., 0]
    elif score == "dot":      # qᵀ k
        expected = Q @ K.transpose(0, 2, 1)
    else:                     # qᵀ W_a k
        expected = Q @ (K @ layer.W_a.kernel.numpy()).transpose(0, 2, 1)
    expected = np.where(MASK[:, None, :] > 0, -1e6, expected)
    np.testing.assert_allclose(weights.numpy(), _softmax(expected), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(context.numpy(), _softmax(expected) @ V, rtol=1e-5, atol=1e-5)
    assert weights.shape == (2, 3, 5) and context.shape == (2, 3, 4)
    # attend() on keys projected once gives the same as call().
    again = layer.attend(tf.constant(Q), layer.project_keys(tf.constant(K)), tf.constant(V), tf.constant(MASK))
    np.testing.assert_allclose(again[0].numpy(), context.numpy(), rtol=1e-6)


def test_weight_count_config_round_trip_and_errors():
    layer = AdditiveAttention(7)
    layer(tf.constant(Q), tf.constant(K), tf.constant(V))
    assert layer.count_params() == 6 * 7 + 6 * 7 + 7   # W_q, W_k, w_v (no biases, as the seed's)
    clone = AdditiveAttention.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    with pytest.raises(ValueError, match="attention score must be one of additive, dot, general, got 'cosine'"):
        AdditiveAttention(4, score="cosine")
    with pytest.raises(ValueError, match="dot attention needs queries and keys of one width, got 6 and 4"):
        AdditiveAttention(4, score="dot")(tf.constant(Q), tf.constant(V), tf.constant(V))
