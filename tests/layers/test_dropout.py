import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.layers import Dropout
from kerasplm.layers.dropout import inverted_dropout


def test_eager_graph_and_xla_draw_the_same_masks():
    x = tf.random.stateless_normal([4, 7, 17], seed=[1, 2])        # 476 entries: 238 words of two draws
    masks = []
    for mode in ("eager", "graph", "xla"):
        layer = Dropout(0.3, seed=5)
        call = lambda: layer(x, training=True)  # noqa: E731
        if mode != "eager":
            call = tf.function(call, jit_compile=mode == "xla")
        masks.append([call().numpy() for _ in range(3)])            # the seed state advances identically too
    for other in masks[1:]:
        np.testing.assert_array_equal(np.array(masks[0]), np.array(other))


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_rate_resolved_to_16_bits_and_unbiased(rate):
    """Dropped with probability t / 2^16, t = round(rate * 2^16); kept entries scaled so that E[y] = x; the two
    draws of one 32-bit word are independent (adjacent entries agree as often as independent draws do)."""
    x = tf.fill([1 << 20], 2.0)
    y = inverted_dropout(x, rate, tf.constant([3, 4], tf.int32)).numpy()
    t = round(rate * 65536)
    p = t / 65536
    assert set(np.unique(y)) == {0.0, np.float32(2.0 * 65536 / (65536 - t))}
    dropped = y == 0
    sigma = np.sqrt(p * (1 - p) / y.size)
    assert abs(dropped.mean() - p) < 5 * sigma
    assert abs(y.mean() - 2.0) < 5 * 2.0 * sigma / (1 - p)
    same = (dropped[0::2] == dropped[1::2]).mean()                  # the two halves of each word
    expected = p * p + (1 - p) * (1 - p)
    assert abs(same - expected) < 5 * np.sqrt(expected * (1 - expected) / (y.size // 2))


def test_gradient_is_the_mask_times_the_scale():
    x = tf.random.stateless_normal([3, 5], seed=[1, 1])
    seed = tf.constant([7, 8], tf.int32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = inverted_dropout(x, 0.5, seed)
    grad = tape.gradient(y, x).numpy()
    kept = y.numpy() != 0
    np.testing.assert_allclose(grad, np.where(kept, 2.0, 0.0), rtol=1e-6)
    assert inverted_dropout(x, 1e-6, seed) is x                     # below 2^-17: nothing to drop


def test_xla_dropout_is_inverted_dropout_and_deterministic():
    x = tf.fill([64, 40, 128], 3.0)
    rate = 0.25

    def run(seed):
        layer = Dropout(rate, seed=seed)
        step = tf.function(lambda: layer(x, training=True), jit_compile=True)
        return step().numpy(), step().numpy()

    first, second = run(7)
    assert set(np.unique(first)) == {0.0, np.float32(3.0 / (1 - rate))}    # 0.25 is exact in 16 bits
    dropped = (first == 0).mean()
    assert abs(dropped - rate) < 0.01  # 327,680 draws: the standard error is ~0.0008
    assert not np.array_equal(first, second)  # a fresh mask per call
    again_first, again_second = run(7)
    np.testing.assert_array_equal(first, again_first)  # same seed, same masks
    np.testing.assert_array_equal(second, again_second)


def test_inference_and_zero_rate_are_identity():
    x = tf.random.stateless_normal([2, 3, 4], seed=[3, 4])
    np.testing.assert_array_equal(Dropout(0.5)(x, training=False).numpy(), x.numpy())
    np.testing.assert_array_equal(Dropout(0.0)(x, training=True).numpy(), x.numpy())


def test_config_round_trip():
    layer = keras.layers.deserialize(keras.layers.serialize(Dropout(0.2, seed=3, name="drop")))
    assert isinstance(layer, Dropout) and (layer.rate, layer.seed, layer.name) == (0.2, 3, "drop")
