"""The linear-chain CRF against brute-force enumeration of every tag sequence; masking; XLA."""
import itertools

import numpy as np
import pytest
import tensorflow as tf

from kerasplm.layers.crf import CRF

K, T = 3, 4


@pytest.fixture(scope="module")
def crf_and_data():
    rng = np.random.default_rng(0)
    crf = CRF(K)
    crf.build()
    crf.transitions.assign(rng.normal(size=(K, K)).astype(np.float32))
    crf.start_transitions.assign(rng.normal(size=K).astype(np.float32))
    crf.end_transitions.assign(rng.normal(size=K).astype(np.float32))
    emissions = rng.normal(size=(3, T, K)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], bool)
    return crf, emissions, mask


def brute_force(crf, emissions, length):
    """Every tag sequence of ``length`` with its score s(y), in plain NumPy."""
    a, start, end = (w.numpy().astype(np.float64) for w in (crf.transitions, crf.start_transitions,
                                                             crf.end_transitions))
    e = emissions.astype(np.float64)
    scored = {}
    for tags in itertools.product(range(K), repeat=length):
        s = start[tags[0]] + end[tags[-1]] + sum(e[t, y] for t, y in enumerate(tags))
        scored[tags] = s + sum(a[tags[t - 1], tags[t]] for t in range(1, length))
    return scored


def test_log_partition_score_and_viterbi_equal_brute_force(crf_and_data):
    crf, emissions, mask = crf_and_data
    log_z = crf.log_partition(emissions, mask).numpy()
    tags, best = (x.numpy() for x in crf.viterbi_decode(emissions, mask))
    marginals = crf.marginals(emissions, mask).numpy()
    for row, length in enumerate(mask.sum(1)):
        scored = brute_force(crf, emissions[row], length)
        values = np.array(list(scored.values()))
        expected_log_z = np.log(np.exp(values - values.max()).sum()) + values.max()
        assert log_z[row] == pytest.approx(expected_log_z, rel=1e-5)
        argmax = max(scored, key=scored.get)
        assert tuple(tags[row, :length]) == argmax and (tags[row, length:] == 0).all()
        assert best[row] == pytest.approx(scored[argmax], rel=1e-5)
        # a sequence's score, and the marginal p(y_t = k) = Σ over sequences with y_t = k of p(y)
        some = tuple((np.arange(length) * 2 + row) % K)
        padded = np.zeros(T, np.int32)
        padded[:length] = some
        score = crf.sequence_score(emissions[row:row + 1], padded[None], mask[row:row + 1]).numpy()[0]
        assert score == pytest.approx(scored[some], rel=1e-5)
        probabilities = np.exp(values - expected_log_z)
        for t in range(length):
            expected = [probabilities[[y[t] == k for y in scored]].sum() for k in range(K)]
            np.testing.assert_allclose(marginals[row, t], expected, atol=1e-5)
        assert not marginals[row, length:].any()


def test_padding_changes_nothing_and_empty_rows_are_zero(crf_and_data):
    crf, emissions, mask = crf_and_data
    garbage = np.where(mask[..., None], emissions, 1e3).astype(np.float32)  # huge scores on padded positions
    tags = np.array([[0, 1, 2, 0], [2, 2, 0, 0], [1, 0, 0, 0]])
    for method in (crf.log_partition, lambda e, m: crf.log_likelihood(e, tags, m), lambda e, m: crf(e, m)):
        np.testing.assert_allclose(method(garbage, mask), method(emissions, mask), rtol=1e-6)
    # a row of length 2 scores as the same row cut to 2 positions
    np.testing.assert_allclose(crf.log_partition(emissions[1:2, :2]), crf.log_partition(emissions, mask)[1:2],
                               rtol=1e-6)
    none = np.zeros((1, T), bool)
    assert float(crf.log_partition(emissions[:1], none)[0]) == 0.0
    assert float(crf.log_likelihood(emissions[:1], tags[:1], none)[0]) == 0.0
    assert crf.viterbi_decode(emissions[:1], none)[0].numpy().tolist() == [[0] * T]
    # one position only (the recursions run zero steps)
    single = emissions[:, :1]
    np.testing.assert_allclose(crf.viterbi_decode(single)[0].numpy()[:, 0],
                               (single[:, 0] + crf.start_transitions.numpy() + crf.end_transitions.numpy()).argmax(-1))


def test_xla_and_gradients(crf_and_data):
    crf, emissions, mask = crf_and_data
    tags = crf(emissions, mask)
    compiled = tf.function(lambda e, m: (crf.log_partition(e, m), crf.viterbi_decode(e, m)[0]), jit_compile=True)
    log_z, xla_tags = compiled(tf.constant(emissions), tf.constant(mask))
    np.testing.assert_allclose(log_z, crf.log_partition(emissions, mask), rtol=1e-5)
    np.testing.assert_array_equal(xla_tags, tags)
    with tf.GradientTape() as tape:
        nll = -tf.reduce_sum(crf.log_likelihood(emissions, tags, mask))
    grads = tape.gradient(nll, crf.trainable_weights)
    assert all(g is not None and np.isfinite(g.numpy()).all() for g in grads)
    assert CRF.from_config(crf.get_config()).num_tags == K
    with pytest.raises(ValueError, match="num_tags"):
        CRF(0)
