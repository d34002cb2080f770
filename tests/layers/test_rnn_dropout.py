"""The AWD-LSTM's regularizers: locked dropout shares its mask across time, embedding dropout drops whole words,
DropConnect drops recurrent weights once per call; each is the identity at inference. The LSTM against its
equations in numpy, padding carrying the state."""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.layers.rnn_dropout import EmbeddingDropout, LockedDropout, WeightDropLSTM


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def numpy_lstm(x, mask, kernel, recurrent, bias):
    """:func:`lstm_scan`'s equations (gates i, f, g, o); padding (mask 0) carries h and c."""
    units = recurrent.shape[0]
    h = np.zeros((x.shape[0], units), np.float32)
    c = np.zeros_like(h)
    outputs = []
    for t in range(x.shape[1]):
        z = x[:, t] @ kernel + bias + h @ recurrent
        i, f, g, o = (z[:, k * units:(k + 1) * units] for k in range(4))
        new_c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        new_h = sigmoid(o) * np.tanh(new_c)
        m = mask[:, t:t + 1]
        h, c = m * new_h + (1 - m) * h, m * new_c + (1 - m) * c
        outputs.append(h)
    return np.stack(outputs, 1), h, c


def test_locked_dropout_shares_one_mask_across_time():
    layer = LockedDropout(0.5, seed=3)
    x = tf.ones([4, 7, 32])
    y = layer(x, training=True).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0}
    np.testing.assert_array_equal(y, np.broadcast_to(y[:, :1], y.shape))          # the same at every step
    assert 0.3 < (y[:, 0] == 0).mean() < 0.7                                        # about half dropped
    assert not np.array_equal(y[0, 0], y[1, 0])                                     # a mask per sequence
    np.testing.assert_array_equal(layer(x, training=False), x)                      # inference: identity
    assert LockedDropout(0.5, seed=3)(x, training=True).numpy().tolist() == y.tolist()   # seeded


def test_embedding_dropout_drops_whole_words():
    table = tf.random.stateless_normal([50, 8], seed=[1, 2])
    dropped = EmbeddingDropout(0.3, seed=0)(table, training=True).numpy()
    rows_zero = np.all(dropped == 0, axis=1)
    np.testing.assert_allclose(dropped[~rows_zero], table.numpy()[~rows_zero] / 0.7, rtol=1e-5)
    assert 5 < rows_zero.sum() < 30
    word = int(np.flatnonzero(rows_zero)[0])
    looked_up = tf.gather(dropped, [[word, 3, word], [word, word, 1]]).numpy()
    assert np.all(looked_up[0, [0, 2]] == 0) and np.all(looked_up[1, :2] == 0)   # dropped wherever it occurs
    np.testing.assert_array_equal(EmbeddingDropout(0.3)(table, training=False), table)


def test_weight_dropped_lstm_is_the_lstm_equations_with_one_dropped_recurrent_kernel():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 6, 5)).astype(np.float32)
    mask = np.ones((3, 6), np.float32)
    mask[1, 4:] = 0   # a padded row
    layer = WeightDropLSTM(4, weight_dropout=0.5, seed=7)
    out, (h, c) = layer(tf.constant(x), padding_mask=tf.constant(mask), training=False)
    kernel, recurrent, bias = (w.numpy() for w in (layer.kernel, layer.recurrent_kernel, layer.bias))
    expected, eh, ec = numpy_lstm(x, mask, kernel, recurrent, bias)
    np.testing.assert_allclose(out, expected, atol=1e-5)                  # inference: U itself
    np.testing.assert_allclose(h, eh, atol=1e-5)
    np.testing.assert_allclose(h[1], out[1, 3], atol=1e-6)                # the padded row: the state at its last token
    # Training: the first mask the layer's seed draws, applied to U at every step (a twin layer draws it alone).
    twin = WeightDropLSTM(4, weight_dropout=0.5, seed=7)
    twin.build((None, None, 5))
    twin.recurrent_kernel.assign(recurrent)
    dropped = twin.recurrent_weights(training=True).numpy()
    assert set(np.unique(np.round(dropped / np.where(recurrent == 0, 1, recurrent), 5))) <= {0.0, 2.0}
    assert 0.3 < (dropped == 0).mean() < 0.7
    trained, _ = layer(tf.constant(x), padding_mask=tf.constant(mask), training=True)
    np.testing.assert_allclose(trained, numpy_lstm(x, mask, kernel, dropped, bias)[0], atol=1e-5)
    with pytest.raises(ValueError, match="weight_dropout must be in"):
        WeightDropLSTM(4, weight_dropout=1.0)
