"""BERT-whitening (Su et al. 2021, "Whitening Sentence Representations for Better Semantics and Faster Retrieval",
arXiv 2103.15316): one linear map that gives sentence vectors zero mean and identity covariance, optionally keeping
only the k directions of largest variance (the paper's dimension reduction).

With the corpus' vectors ``x_i`` (rows of X, ``[n, d]``)::

    mu    = mean_i x_i                                   [1, d]
    Sigma = cov(X)   (unbiased, n - 1, as np.cov)        [d, d]
    U, s, _ = svd(Sigma)       # Sigma = U diag(s) U^T, s descending
    W     = U diag(1 / sqrt(s))[:, :k]                   [d, k]
    y     = (x - mu) W                                   [k]

so that ``cov(Y) = W^T Sigma W = I_k``. Fitting is numpy (float64); the embedder export applies ``mu`` and ``W``
in graph (:mod:`kerasplm.models.sentence_embedding.embedder_export`).
"""
import numpy as np

__all__ = ["fit_whitening", "whiten"]


def fit_whitening(embeddings, dim=None):
    """``(mu [1, d], W [d, k])`` (float64) of ``embeddings`` ``[n, d]``; ``dim`` = k (default d).

    Raises ValueError (one line) for fewer than 2 vectors, non-finite values, a ``dim`` outside ``[1, d]``, or a
    ``dim`` that keeps a direction of zero variance (the vectors span fewer than k dimensions: fewer sentences than
    dimensions, or a direction in which every vector agrees), which no scaling can whiten.
    """
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be a matrix [n, d], got shape {x.shape}")
    n, d = x.shape
    if n < 2:
        raise ValueError(f"whitening needs at least 2 vectors to estimate a covariance, got {n}")
    if not np.all(np.isfinite(x)):
        raise ValueError("embeddings hold non-finite values (inf or NaN)")
    k = d if dim is None else dim
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= d:
        raise ValueError(f"dim must be an integer in [1, {d}] (the embedding size), got {dim!r}")
    mu = x.mean(axis=0, keepdims=True)
    cov = np.cov(x.T).reshape(d, d)
    u, s, _ = np.linalg.svd(cov)
    # Rank as np.linalg.matrix_rank counts it, at float32's precision: the vectors come out of a float32 model,
    # so variance below this is rounding noise (an exact LayerNorm hyperplane shows up as ~1e-14 of the largest).
    tolerance = s[0] * max(n, d) * np.finfo(np.float32).eps
    rank = int(np.sum(s > tolerance))
    if k > rank:
        raise ValueError(f"dim={k} keeps directions of zero variance: the {n} vectors span only {rank} of their {d} "
                         f"dimensions; choose dim <= {rank} or fit on more (varied) sentences")
    w = u[:, :k] / np.sqrt(s[:k])      # = (U diag(1/sqrt(s)))[:, :k], without the d x d diagonal
    return mu, w


def whiten(embeddings, mu, w):
    """``(x - mu) W``: ``[n, d]`` -> ``[n, k]`` (numpy; the export does the same in graph)."""
    return (np.asarray(embeddings) - mu) @ w
