"""BERT-whitening's fit against the seed's numpy code (003_*, "BERT-whitening"); its whitening property; the k < d
reduction keeps the top components; refusals; the sentence-corpus reader's one-line errors."""
import numpy as np
import pytest

from kerasplm.data.sentences import read_sentence_lines
from kerasplm.models.sentence_embedding.whitening import fit_whitening, whiten


def seed_compute_kernel_bias(vecs, n_components=None):
    """The seed's code, verbatim but for the optional cut (its second version keeps ``W[:, :n_components]``):

        mu = vecs.mean(axis=0, keepdims=True)
        cov = np.cov(vecs.T)
        u, s, vh = np.linalg.svd(cov)
        W = np.dot(u, np.diag(1 / np.sqrt(s)))
        return W[:, :n_components], -mu
    """
    mu = vecs.mean(axis=0, keepdims=True)
    cov = np.cov(vecs.T)
    u, s, vh = np.linalg.svd(cov)
    W = np.dot(u, np.diag(1 / np.sqrt(s)))
    return W[:, :n_components], -mu


def correlated(n, d, seed=0):
    """n vectors with distinct variances along random orthogonal directions, and an offset mean."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    scales = np.linspace(3.0, 0.5, d)
    return (rng.normal(size=(n, d)) * scales) @ q.T + rng.normal(size=(1, d)) * 4, q, scales


@pytest.mark.parametrize("dim", [None, 3])
def test_equals_the_seed_formula(dim):
    x, _, _ = correlated(200, 8)
    mu, w = fit_whitening(x.astype(np.float32), dim)
    seed_w, seed_bias = seed_compute_kernel_bias(x.astype(np.float32).astype(np.float64), dim)
    assert mu.shape == (1, 8) and w.shape == (8, dim or 8)
    np.testing.assert_allclose(mu, -seed_bias, rtol=1e-12)
    np.testing.assert_allclose(w, seed_w, rtol=1e-10, atol=1e-12)
    # the seed's transform y = (x + bias).dot(kernel) is whiten's
    np.testing.assert_allclose(whiten(x, mu, w), (x + seed_bias).dot(seed_w), rtol=1e-9, atol=1e-9)


def test_whitened_vectors_have_zero_mean_and_identity_covariance():
    x, _, _ = correlated(500, 6, seed=1)
    y = whiten(x, *fit_whitening(x))
    np.testing.assert_allclose(y.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(np.cov(y.T), np.eye(6), atol=1e-10)


def test_k_below_d_keeps_the_top_components():
    x, _, _ = correlated(2000, 6, seed=2)
    mu, w_full = fit_whitening(x)
    _, w = fit_whitening(x, dim=2)
    np.testing.assert_allclose(w, w_full[:, :2])
    y = whiten(x, mu, w)
    np.testing.assert_allclose(np.cov(y.T), np.eye(2), atol=1e-10)
    # W's columns are the covariance's two leading eigenvectors, scaled by 1/sqrt(eigenvalue)
    values, vectors = np.linalg.eigh(np.cov(x.T))               # ascending
    top_values, top_vectors = values[::-1][:2], vectors[:, ::-1][:, :2]
    np.testing.assert_allclose(np.abs(top_vectors.T @ (w * np.sqrt(top_values))), np.eye(2), atol=1e-8)
    # so the variance kept is the largest possible: the sum of the top two eigenvalues
    np.testing.assert_allclose(np.trace(np.linalg.pinv(w.T @ w)), top_values.sum(), rtol=1e-8)


@pytest.mark.parametrize("vectors, dim, message", [
    (np.zeros((1, 4)), None, "at least 2 vectors"),
    (np.ones((3, 4)) * np.array([[1.0], [np.nan], [2.0]]), None, "non-finite"),
    (np.random.default_rng(0).normal(size=(10, 4)), 5, r"dim must be an integer in \[1, 4\]"),
    (np.random.default_rng(0).normal(size=(10, 4)), 0, r"dim must be an integer in \[1, 4\]"),
    (np.random.default_rng(0).normal(size=(3, 4)), None, "span only 2 of their 4 dimensions; choose dim <= 2"),
    (np.random.default_rng(0).normal(size=(3, 4)), 2, None),
])
def test_refusals(vectors, dim, message):
    if message is None:
        assert fit_whitening(vectors, dim)[1].shape == (4, 2)
        return
    with pytest.raises(ValueError, match=message) as caught:
        fit_whitening(vectors, dim)
    assert "\n" not in str(caught.value)


def test_sentence_reader(tmp_path):
    good = tmp_path / "good.txt"
    good.write_bytes("first sentence\r\n\n  second  \n".encode("utf-8"))
    assert read_sentence_lines(good) == ["first sentence", "second"]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nalso fine\nbroken \xff here\n")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"\n  \n")
    for path, error, message in [(bad, ValueError, f"{bad}: line 3 is not valid UTF-8"),
                                 (empty, ValueError, f"{empty}: the corpus holds no sentence"),
                                 (tmp_path / "none.txt", FileNotFoundError, "corpus not found")]:
        with pytest.raises(error, match=message) as caught:
            read_sentence_lines(path)
        assert "\n" not in str(caught.value)
