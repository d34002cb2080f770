"""Each building block against its formula and the seed's semantics."""
import math

import numpy as np
import pytest
import tensorflow as tf

from kerasplm.layers import (DecoderLayer, EncoderLayer, MultiHeadAttention, create_look_ahead_mask,
                             create_masks, create_padding_mask, point_wise_feed_forward_network,
                             positional_encoding, scaled_dot_product_attention)


def test_positional_encoding_matches_formula():
    pe = positional_encoding(50, 16).numpy()
    assert pe.shape == (1, 50, 16) and pe.dtype == np.float32
    for pos in (0, 1, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert pe[0, pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[0, pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)


def test_positional_encoding_rejects_bad_sizes():
    with pytest.raises(ValueError, match="position > 0"):
        positional_encoding(0, 16)


def test_padding_mask_marks_zeros_like_the_seed():
    x = tf.constant([[7, 6, 0, 0, 1], [1, 2, 3, 0, 0], [0, 0, 0, 4, 5]])
    mask = create_padding_mask(x)
    assert mask.shape == (3, 1, 1, 5)
    np.testing.assert_array_equal(mask[:, 0, 0].numpy(), [[0, 0, 1, 1, 0], [0, 0, 0, 1, 1], [1, 1, 1, 0, 0]])


def test_look_ahead_mask_is_strictly_upper_triangular():
    np.testing.assert_array_equal(create_look_ahead_mask(3).numpy(), [[0, 1, 1], [0, 0, 1], [0, 0, 0]])


def test_combined_mask_is_union_of_look_ahead_and_target_padding():
    inp = tf.constant([[5, 6, 0]])
    tar = tf.constant([[2, 4, 0]])
    enc, combined, dec = create_masks(inp, tar)
    np.testing.assert_array_equal(enc.numpy(), dec.numpy())
    np.testing.assert_array_equal(combined[0, 0].numpy(), [[0, 1, 1], [0, 0, 1], [0, 0, 1]])


def test_scaled_dot_product_attention_seed_toy_example():
    # The seed's toy example: the query matches the second key, so the output is the second value.
    k = tf.constant([[10, 0, 0], [0, 10, 0], [0, 0, 10], [0, 0, 10]], dtype=tf.float32)
    v = tf.constant([[1, 0], [10, 0], [100, 5], [1000, 6]], dtype=tf.float32)
    out, w = scaled_dot_product_attention(tf.constant([[0, 10, 0]], tf.float32), k, v, None)
    np.testing.assert_allclose(w.numpy(), [[0, 1, 0, 0]], atol=1e-6)
    np.testing.assert_allclose(out.numpy(), [[10, 0]], atol=1e-4)
    # A query matching the 3rd and 4th keys averages their values.
    out, w = scaled_dot_product_attention(tf.constant([[0, 0, 10]], tf.float32), k, v, None)
    np.testing.assert_allclose(w.numpy(), [[0, 0, 0.5, 0.5]], atol=1e-6)
    np.testing.assert_allclose(out.numpy(), [[550, 5.5]], atol=1e-3)


def test_scaled_dot_product_attention_matches_numpy_formula():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=s).astype(np.float32) for s in [(2, 3, 4), (2, 5, 4), (2, 5, 6)])
    logits = q @ k.transpose(0, 2, 1) / 2.0
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    out, w = scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(w.numpy(), weights, rtol=1e-5)
    np.testing.assert_allclose(out.numpy(), weights @ v, rtol=1e-5, atol=1e-6)


def test_padded_keys_get_zero_weight():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(2, 4, 3, 8)).astype(np.float32)
    k = rng.normal(size=(2, 4, 5, 8)).astype(np.float32)
    seq = tf.constant([[3, 4, 5, 0, 0], [3, 0, 0, 0, 0]])
    _, w = scaled_dot_product_attention(q, k, k, create_padding_mask(seq))
    assert np.all(w.numpy()[0, :, :, 3:] == 0) and np.all(w.numpy()[1, :, :, 1:] == 0)
    np.testing.assert_allclose(w.numpy().sum(-1), 1.0, rtol=1e-6)


def test_multi_head_attention_shapes_and_no_future_attention():
    mha = MultiHeadAttention(d_model=32, num_heads=4)
    y = tf.random.uniform((2, 6, 32))
    out, attn = mha(y, k=y, q=y, attention_mask=create_look_ahead_mask(6))
    assert out.shape == (2, 6, 32) and attn.shape == (2, 4, 6, 6)
    assert np.all(np.triu(attn.numpy(), k=1) == 0)
    # Changing a future token does not change earlier outputs.
    y2 = tf.concat([y[:, :4], tf.random.uniform((2, 2, 32))], axis=1)
    out2, _ = mha(y2, k=y2, q=y2, attention_mask=create_look_ahead_mask(6))
    np.testing.assert_allclose(out[:, :4].numpy(), out2[:, :4].numpy(), atol=1e-6)


def test_multi_head_attention_equals_per_head_formula():
    mha = MultiHeadAttention(d_model=8, num_heads=2)
    x = tf.random.uniform((1, 3, 8), seed=3)
    out, _ = mha(x, x, x)
    wq, bq = mha.wq.kernel.numpy(), mha.wq.bias.numpy()
    wk, bk = mha.wk.kernel.numpy(), mha.wk.bias.numpy()
    wv, bv = mha.wv.kernel.numpy(), mha.wv.bias.numpy()
    xn = x.numpy()[0]
    heads = []
    for h in range(2):
        sl = slice(4 * h, 4 * h + 4)
        q, k, v = (xn @ wq + bq)[:, sl], (xn @ wk + bk)[:, sl], (xn @ wv + bv)[:, sl]
        logit = q @ k.T / 2.0
        w = np.exp(logit) / np.exp(logit).sum(-1, keepdims=True)
        heads.append(w @ v)
    expected = np.concatenate(heads, -1) @ mha.dense.kernel.numpy() + mha.dense.bias.numpy()
    np.testing.assert_allclose(out.numpy()[0], expected, rtol=1e-4, atol=1e-5)


def test_multi_head_attention_rejects_indivisible_width():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(d_model=30, num_heads=4)


def test_feed_forward_is_relu_mlp():
    ffn = point_wise_feed_forward_network(8, 16)
    x = tf.random.uniform((2, 3, 8))
    out = ffn(x)
    d1, d2 = ffn.layers
    expected = np.maximum(x.numpy() @ d1.kernel.numpy() + d1.bias.numpy(), 0) @ d2.kernel.numpy() + d2.bias.numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_encoder_layer_is_post_ln_and_respects_padding():
    layer = EncoderLayer(16, 4, 32, rate=0.1)
    x = tf.random.uniform((1, 5, 16))
    seq = tf.constant([[4, 5, 6, 0, 0]])
    out = layer(x, training=False, padding_mask=create_padding_mask(seq))
    # Post-LN: every position is layer-normalized (zero mean, unit variance before gamma/beta = 1/0).
    np.testing.assert_allclose(out.numpy().mean(-1), 0, atol=1e-5)
    # Padded positions' contents do not affect real positions.
    x2 = tf.concat([x[:, :3], tf.random.uniform((1, 2, 16))], axis=1)
    out2 = layer(x2, training=False, padding_mask=create_padding_mask(seq))
    np.testing.assert_allclose(out[:, :3].numpy(), out2[:, :3].numpy(), atol=1e-5)
    # Dropout is active only in training.
    np.testing.assert_allclose(layer(x, training=False).numpy(), layer(x, training=False).numpy())
    assert not np.allclose(layer(x, training=True).numpy(), layer(x, training=False).numpy())


def test_decoder_layer_shapes_and_causality():
    layer = DecoderLayer(16, 4, 32)
    x = tf.random.uniform((2, 4, 16))
    enc = tf.random.uniform((2, 6, 16))
    out, w1, w2 = layer(x, enc, training=False, look_ahead_mask=create_look_ahead_mask(4))
    assert out.shape == (2, 4, 16) and w1.shape == (2, 4, 4, 4) and w2.shape == (2, 4, 4, 6)
    assert np.all(np.triu(w1.numpy(), k=1) == 0)


def test_layers_config_round_trip():
    for layer in (EncoderLayer(16, 4, 32, rate=0.2), DecoderLayer(16, 2, 8, rate=0.0), MultiHeadAttention(16, 2)):
        clone = type(layer).from_config(layer.get_config())
        assert clone.get_config() == layer.get_config()
