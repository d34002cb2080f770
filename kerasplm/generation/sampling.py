"""Token choosers for :func:`kerasplm.generation.search.greedy_search`: greedy and seeded sampling.

A chooser is ``fn(logits float32 (n, vocab), step int32 scalar) -> token int32 (n,)``. Sampling draws
from softmax(logits / temperature) restricted to

* top-k: the k most probable tokens (Fan et al., 2018);
* top-p (nucleus, Holtzman et al., 2020): the smallest set of most probable tokens whose total
  probability is >= p, i.e. token i (in decreasing order) is kept iff the tokens before it sum to < p.
  With both, top-p applies to the renormalised top-k distribution.

Randomness is stateless: the draw at loop step t uses ``stateless_fold_in(seed, t)``, so the same seed
gives the same tokens (on the same device and batch), in graph, eager or XLA, with nothing to reset.
A draw inverts the cumulative distribution: token = the first i with F(i) > u · F(V), u ~ Uniform(0, 1),
F = cumsum(softmax(logits)); tokens of probability 0 (-inf logits) are never drawn. It needs one random
number per row: ``tf.random.stateless_categorical`` (or the Gumbel-max trick) draws one per vocabulary
entry, which took ~1.3 ms per step for 8,000 entries under XLA on CPU against ~0.1 ms for this.
Every random op names Philox (see :mod:`kerasplm.layers.dropout` for why).
"""
import tensorflow as tf

from kerasplm.generation.search import argmax_token

NEG_INF = float("-inf")


def validate_sampling(temperature=1.0, top_k=None, top_p=None):
    """Raises ValueError naming the bad option."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p}")


def filter_logits(logits, top_k=None, top_p=None):
    """Sorted, filtered logits: ``(values (n, k'), token ids (n, k'))`` in decreasing order, values -inf
    outside the top-k / nucleus (k' = top_k, or the vocabulary size)."""
    k = min(top_k or logits.shape[-1], logits.shape[-1])
    values, token_ids = tf.math.top_k(logits, k=k)
    if top_p is not None and top_p < 1.0:
        probs = tf.nn.softmax(values, axis=-1)
        before = tf.math.cumsum(probs, axis=-1, exclusive=True)
        values = tf.where(before < top_p, values, NEG_INF)
    return values, token_ids


def inverse_cdf_sample(logits, seed):
    """One sample per row from softmax(logits) (``-inf`` logits are never drawn): int32 ``(n,)``."""
    cdf = tf.math.cumsum(tf.nn.softmax(logits, axis=-1), axis=-1)                      # (n, V)
    u = tf.random.stateless_uniform(tf.shape(cdf)[:1], seed=seed, alg="philox") * cdf[:, -1]
    return tf.reduce_sum(tf.cast(cdf <= u[:, tf.newaxis], tf.int32), axis=-1)


def make_sampler(seed, temperature=1.0, top_k=None, top_p=None):
    """A seeded sampling chooser. ``seed``: int32 ``(2,)`` tensor (or two ints)."""
    validate_sampling(temperature, top_k, top_p)
    seed = tf.cast(seed, tf.int32)

    def choose(logits, step):
        logits = logits / temperature
        step_seed = tf.random.experimental.stateless_fold_in(seed, step, alg="philox")
        if top_k is None and (top_p is None or top_p >= 1.0):
            return inverse_cdf_sample(logits, step_seed)
        values, token_ids = filter_logits(logits, top_k, top_p)
        return tf.gather(token_ids, inverse_cdf_sample(values, step_seed), batch_dims=1)

    return choose


def make_chooser(strategy, seed=None, temperature=1.0, top_k=None, top_p=None):
    """``"greedy"`` -> argmax; ``"sample"`` -> :func:`make_sampler` (``seed`` required)."""
    if strategy == "greedy":
        return argmax_token
    if strategy == "sample":
        if seed is None:
            raise ValueError("sampling needs a seed (an int, or two ints)")
        return make_sampler(seed, temperature, top_k, top_p)
    raise ValueError(f"unknown strategy {strategy!r}; expected 'greedy', 'sample' or 'beam'")
