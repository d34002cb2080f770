"""Token choosers for :func:`kerasplm.generation.search.greedy_search`: greedy and seeded sampling.

A chooser is ``fn(logits float32 (n, vocab), step int32 scalar) -> token int32 (n,)``. Sampling draws
from softmax(logits / temperature) restricted to

* top-k: the k most probable tokens (Fan et al., 2018);
* top-p (nucleus, Holtzman et al., 2020): the smallest set of most probable tokens whose total
  probability is >= p, i.e. token i (in decreasing order) is kept iff the tokens before it sum to < p
  (computed without a sort: :func:`nucleus_mask`). With both, top-p applies to the renormalised top-k
  distribution.

Randomness is stateless and counter-based: row r's uniform at loop step t is a hash of ``(seed, t, r)``
(:func:`counter_uniforms`: SplitMix64's finalizer in uint64 arithmetic), so the same seed gives the same
tokens (on the same device and batch), in eager, graph or XLA code, with nothing to reset. Integer arithmetic
is exact everywhere; TensorFlow's own stateless Philox kernels are not used for this because XLA's Philox
gives other numbers than the CPU kernel for the same seed (a jit-compiled export would sample other tokens).
A draw inverts the cumulative distribution: token = the first i with F(i) > u · F(V), u ~ Uniform(0, 1),
F = cumsum(softmax(logits)); tokens of probability 0 (-inf logits) are never drawn. It needs one random
number per row: ``tf.random.stateless_categorical`` (or the Gumbel-max trick) draws one per vocabulary
entry, which took ~1.3 ms per step for 8,000 entries under XLA on CPU against ~0.1 ms for this.

The options may be Python values (checked by :func:`kerasplm.generation.options.validate_sampling`; the
filters are then chosen when the function is traced) or scalar tensors, e.g. the inputs of a SavedModel
signature (:mod:`kerasplm.models.gpt.export`), resolved at run time with a request's rules
(:mod:`kerasplm.generation.options`): ``top_k`` 0 (or >= the vocabulary) and ``top_p`` 0 or 1 mean no filter.
A tensor ``top_k`` keeps the k most probable tokens in the same order, padded with -inf logits back to the
whole vocabulary (a static shape for any k): the padding has probability 0, so the nucleus and the draw are
those of the unpadded ``(n, k)`` values (up to the rounding of the softmax's sum). A tensor temperature must
be > 0: a request's temperature 0 (greedy) is resolved by the engine around the search loop, so that it
takes the engine's greedy path (:func:`kerasplm.generation.engine.causal_lm_search`).
"""
import tensorflow as tf

from kerasplm.generation.options import DEFAULT_TEMPERATURE, validate_sampling
from kerasplm.generation.search import argmax_token

NEG_INF = float("-inf")

__all__ = ["as_seed", "counter_uniforms", "filter_logits", "inverse_cdf_sample", "make_chooser", "make_sampler",
           "nucleus_mask", "row_seeds", "top_k_padded", "validate_sampling"]


def as_seed(seed):
    """An int32 ``(2,)`` seed tensor from an int or a scalar tensor (``[0, seed]``), or from two ints / a
    ``(2,)`` tensor; an int32 ``(n, 2)`` tensor is one seed per row (see :func:`row_seeds`)."""
    if isinstance(seed, int):
        return tf.constant([0, seed], tf.int32)
    seed = tf.cast(tf.convert_to_tensor(seed), tf.int32)
    if seed.shape.rank == 0:
        return tf.stack([0, seed])
    if seed.shape.rank == 2 and seed.shape[1] == 2:
        return seed
    if seed.shape != (2,):
        raise ValueError(f"seed must be an int, two ints or one pair per row, got shape {seed.shape}")
    return seed


def row_seeds(seeds):
    """int32 ``(n, 2)`` per-row seeds (``[0, seed]``) from int ``(n,)`` seeds.

    With per-row seeds a row's draws depend on its own seed only, not on its position in the batch or on the
    other rows: what a batch-safe SavedModel signature needs, since TF Serving's batching may merge several
    requests into one call. Row r's draw at step t is :func:`counter_uniforms` of its own seed ``[0, seed_r]``, the
    draw of a one-row call seeded ``seed_r``: a prompt decodes the same alone, in a batch or in process."""
    seeds = tf.cast(seeds, tf.int32)
    return tf.stack([tf.zeros_like(seeds), seeds], axis=1)


_GOLDEN = 0x9E3779B97F4A7C15      # 2^64 / golden ratio: SplitMix64's increment
_MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def _u64(x):
    return tf.cast(tf.cast(x, tf.int64), tf.uint64)


def _splitmix64(z):
    """SplitMix64's finalizer (Steele, Lea & Flood 2014): a bijection of uint64 whose outputs pass BigCrush."""
    for shift, multiplier in ((30, _MIX[0]), (27, _MIX[1])):
        z = tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, tf.constant(shift, tf.uint64)))
        z = z * tf.constant(multiplier, tf.uint64)
    return tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, tf.constant(31, tf.uint64)))


def counter_uniforms(seed, step, rows):
    """float32 ``(rows,)`` uniforms in [0, 1) for loop step ``step``, the same in eager, graph and XLA code.

    ``seed``: one ``(2,)`` seed, row r taking counter r of the step's stream, or ``(rows, 2)`` per-row seeds
    (:func:`row_seeds`), each row taking counter 0 of its own stream, which is what a one-row call with that
    seed draws. The number is ``splitmix64(splitmix64(key + t·G) + r·G)`` with ``key = s0·G + s1`` and G the
    golden-ratio constant, its top 24 bits scaled to [0, 1) (float32's resolution near 1)."""
    golden = tf.constant(_GOLDEN, tf.uint64)
    seed = tf.convert_to_tensor(seed)
    if seed.shape.rank == 1:
        keys, counters = _u64(seed[0]) * golden + _u64(seed[1]), _u64(tf.range(rows))
    else:
        keys, counters = _u64(seed[:, 0]) * golden + _u64(seed[:, 1]), tf.zeros([rows], tf.uint64)
    z = _splitmix64(_splitmix64(keys + _u64(step) * golden) + counters * golden)
    return tf.cast(tf.bitwise.right_shift(z, tf.constant(40, tf.uint64)), tf.float32) * (1.0 / (1 << 24))


def nucleus_mask(probs, top_p, iterations=32):
    """bool ``(n, V)``: the top-p nucleus of each row of ``probs``, without sorting.

    The nucleus is {i : p_i >= τ} for the largest threshold τ whose tokens hold at least ``top_p`` of
    the mass, M(τ) = Σ_{p_j >= τ} p_j >= top_p; τ is found by bisection (M only falls as τ grows),
    keeping M(lo) >= top_p > M(hi). Why not sort and cumsum: a full sort of the vocabulary per step
    took ~1 s per step for 64 × 8,000 under XLA on CPU. After 32 halvings the bracket is 2^-31 · max p
    wide, so only a probability within that of the boundary could be included wrongly. Tokens tied
    with the smallest nucleus probability are all kept.
    """
    lo = tf.zeros_like(probs[:, :1])
    hi = 2.0 * tf.reduce_max(probs, axis=-1, keepdims=True)

    def body(i, lo, hi):
        mid = 0.5 * (lo + hi)
        mass = tf.reduce_sum(tf.where(probs >= mid, probs, 0.0), axis=-1, keepdims=True)
        enough = mass >= top_p
        return i + 1, tf.where(enough, mid, lo), tf.where(enough, hi, mid)

    _, lo, _ = tf.while_loop(lambda i, lo, hi: i < iterations, body, (tf.constant(0), lo, hi),
                             maximum_iterations=iterations)
    return probs >= lo


def top_k_padded(logits, k):
    """The ``k`` (a scalar tensor) largest logits in decreasing order and their ids, padded with -inf (id 0)
    back to ``(n, V)``: a static shape for any k, and the same draw as the unpadded ``(n, k)`` values (-inf
    entries have probability 0: the nucleus and the inverse-CDF draw never pick them)."""
    values, ids = tf.math.top_k(logits, k=k)
    padding = [[0, 0], [0, tf.shape(logits)[-1] - k]]
    values = tf.ensure_shape(tf.pad(values, padding, constant_values=NEG_INF), logits.shape)
    return values, tf.ensure_shape(tf.pad(ids, padding), logits.shape)


def filter_logits(logits, top_k=None, top_p=None):
    """``(values, token_ids)``: with ``top_k``, the k largest logits (decreasing) and their ids, else the
    logits themselves and None; values are -inf outside the nucleus of softmax(values) when ``top_p``.

    Tensor options (see the module docstring) are applied at run time: ``token_ids`` is then never None
    (``(n, V)``, the identity when no top-k filter applies).
    """
    token_ids = None
    if tf.is_tensor(top_k):
        vocab = tf.shape(logits)[-1]
        # min(top_k, vocab): the same k where the branch runs, and a k that fits when a constant top_k >= vocab
        # reaches the (untaken) branch's shape inference.
        logits, token_ids = tf.cond((top_k > 0) & (top_k < vocab),
                                    lambda: top_k_padded(logits, tf.minimum(top_k, vocab)),
                                    lambda: (logits, tf.broadcast_to(tf.range(vocab), tf.shape(logits))))
    elif top_k is not None and top_k < logits.shape[-1]:
        logits, token_ids = tf.math.top_k(logits, k=top_k)
    if tf.is_tensor(top_p):
        logits = tf.cond((top_p > 0.0) & (top_p < 1.0),
                         lambda: tf.where(nucleus_mask(tf.nn.softmax(logits, axis=-1), top_p), logits, NEG_INF),
                         lambda: logits)
    elif top_p is not None and top_p < 1.0:
        logits = tf.where(nucleus_mask(tf.nn.softmax(logits, axis=-1), top_p), logits, NEG_INF)
    return logits, token_ids


def inverse_cdf_sample(logits, seed, step=None):
    """One sample per row from softmax(logits) (``-inf`` logits are never drawn): int32 ``(n,)``.

    ``seed``: a ``(2,)`` seed or per-row ``(n, 2)`` seeds, drawn at loop ``step`` (None: 0) by
    :func:`counter_uniforms`."""
    cdf = tf.math.cumsum(tf.nn.softmax(logits, axis=-1), axis=-1)                      # (n, V)
    u = counter_uniforms(seed, 0 if step is None else step, tf.shape(cdf)[0])
    u = u * cdf[:, -1]
    return tf.reduce_sum(tf.cast(cdf <= u[:, tf.newaxis], tf.int32), axis=-1)


def make_sampler(seed, temperature=DEFAULT_TEMPERATURE, top_k=None, top_p=None):
    """The seeded sampling chooser of kerasplm (in process and in exports).

    ``seed``: an int or a scalar tensor (``[0, seed]``), or two ints / an int32 ``(2,)`` tensor, or int32
    ``(n, 2)`` per-row seeds (:func:`row_seeds`). ``temperature``, ``top_k``, ``top_p``: Python values or scalar tensors (see the module docstring).
    """
    validate_sampling(temperature, top_k, top_p)
    seed = as_seed(seed)

    def choose(logits, step):
        logits = logits / temperature
        values, token_ids = filter_logits(logits, top_k, top_p)
        sample = inverse_cdf_sample(values, seed, step)
        return sample if token_ids is None else tf.gather(token_ids, sample, batch_dims=1)

    return choose


def make_chooser(strategy, seed=None, temperature=DEFAULT_TEMPERATURE, top_k=None, top_p=None):
    """``"greedy"`` -> argmax; ``"sample"`` -> :func:`make_sampler` (``seed`` required)."""
    if strategy == "greedy":
        return argmax_token
    if strategy == "sample":
        if seed is None:
            raise ValueError("sampling needs a seed (an int, or two ints)")
        return make_sampler(seed, temperature, top_k, top_p)
    raise ValueError(f"unknown strategy {strategy!r}; expected 'greedy', 'sample' or 'beam'")
