"""Model FLOPs utilisation (MFU): the training FLOPs a row achieves over the machine's measured matmul peak.

    MFU = (training FLOPs per token × tokens per second) / (dense matmul FLOP/s measured in the same process)

The FLOP count is the model's (what the architecture needs per token), not what an implementation happens to
execute, so two sides training the same model at the same tokens/s have the same MFU whatever tricks they use.
"""
import time

__all__ = ["training_flops_per_token", "transformer_matmul_params", "measured_matmul_peak", "best_matmul_peak",
           "cpu_has_bfloat16", "peak_dtypes", "mfu"]


def training_flops_per_token(n_params, n_layers, seq_len, d_model):
    """Training FLOPs per token of a Transformer: ``6·N + 12·L·T·d``.

    - ``6·N``: every weight that multiplies a token costs 2 FLOPs (a multiply and an add) in the forward pass
      and twice that in the backward pass (gradients of the activations and of the weights), so 3 × 2 = 6 FLOPs
      per weight per token (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1: C ≈ 6N).
      ``N`` is the non-embedding parameter count: a token lookup multiplies nothing. An output projection that
      computes logits for every token (a tied embedding used as the softmax matrix) does multiply, so callers
      add its ``d·V`` weights to ``N`` (scaled by the fraction of positions it runs on).
    - ``12·L·T·d``: attention. Per layer and token, the scores ``q·kᵀ`` over ``T`` positions and the weighted
      sum of the values each take ``T·d`` multiply-adds, 4·T·d FLOPs forward, 12·T·d with the backward pass
      (Chowdhery et al. 2022, "PaLM", appendix B: 6N + 12·L·H·Q·T with H·Q = d). Full ``T×T`` attention is
      counted, also under a causal mask, as PaLM does.

    ``n_params``: N as above; ``n_layers``: L, attention layers a token passes through; ``seq_len``: T, the
    positions each attention layer attends over; ``d_model``: d, the attention width (heads × head size).
    Returns FLOPs (a float).
    """
    for name, value in (("n_params", n_params), ("n_layers", n_layers), ("seq_len", seq_len), ("d_model", d_model)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    return 6.0 * n_params + 12.0 * n_layers * seq_len * d_model


def transformer_matmul_params(n_layers, d_model, dff, cross_attention_layers=0):
    """Non-embedding weights of ``n_layers`` Transformer blocks: per block 4·d² (Q, K, V, output projections)
    + 2·d·dff (the feed-forward network's two matrices), plus 4·d² per block with cross-attention (an
    encoder-decoder's decoder). Biases and LayerNorm scales (O(d) per block) are left out, as in Kaplan et al.'s
    N ≈ 2·d·L·(2·d_attn + d_ff)."""
    return n_layers * (4 * d_model * d_model + 2 * d_model * dff) + cross_attention_layers * 4 * d_model * d_model


def cpu_has_bfloat16(cpuinfo="/proc/cpuinfo"):
    """True when the CPU multiplies bfloat16 natively (the ``avx512_bf16`` or ``amx_bf16`` flag); False when it
    does not or the flags cannot be read (not Linux)."""
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return bool({"avx512_bf16", "amx_bf16"} & set(flags))


def peak_dtypes():
    """The dtypes whose matmul peak is measured here: float32, and bfloat16 where the CPU has it."""
    return ("float32", "bfloat16") if cpu_has_bfloat16() else ("float32",)


def _tensorflow_matmul(size, dtype):
    import tensorflow as tf

    a = tf.cast(tf.random.stateless_normal([size, size], seed=[0, 0]), dtype)
    f = tf.function(lambda x: tf.matmul(x, x))
    return lambda: f(a).numpy()


def measured_matmul_peak(dtype="float32", size=1024, repeats=10, matmul=None, clock=time.perf_counter):
    """Dense matmul FLOP/s measured here: ``repeats`` products of two ``size × size`` matrices of ``dtype``
    (2·size³ FLOPs each) over their wall time, after one untimed product (tracing, thread pools).

    ``matmul``: a function ``(size, dtype) -> zero-argument callable`` running one product and waiting for it;
    default a TensorFlow ``tf.function`` matmul (what the kerasplm sides run on). ``clock``: the timer
    (``time.perf_counter``). The best possible throughput of the machine's matmul library on this size, so an
    MFU below 1 also counts the time spent outside matmuls (memory-bound ops, the optimizer, Python).
    """
    if size < 1 or repeats < 1:
        raise ValueError(f"size and repeats must be >= 1, got size={size}, repeats={repeats}")
    run = (matmul or _tensorflow_matmul)(size, dtype)
    run()
    start = clock()
    for _ in range(repeats):
        run()
    elapsed = clock() - start
    return 2.0 * size ** 3 * repeats / max(elapsed, 1e-12)


# Square sizes the peak is measured at: 1024 alone under-measured this 2-core machine (181 GFLOP/s against the 197
# that BERT-base's larger products reached, an MFU of 105%); the best of both sizes is the peak.
PEAK_SIZES = (1024, 2048)


def best_matmul_peak(dtype="float32", sizes=PEAK_SIZES, repeats=(10, 3), matmul=None, clock=time.perf_counter):
    """The best :func:`measured_matmul_peak` over ``sizes`` (``repeats[i]`` products at ``sizes[i]``): small
    products leave the matmul library's blocking and threads short of the machine's peak, so one size can
    under-measure it and give an MFU above 1."""
    return max(measured_matmul_peak(dtype, size=size, repeats=n, matmul=matmul, clock=clock)
               for size, n in zip(sizes, repeats))


def mfu(flops_per_unit, units_per_second, peak_flops_per_second):
    """Achieved training FLOP/s (``flops_per_unit × units_per_second``) over the peak; None when any is missing."""
    if not flops_per_unit or not units_per_second or not peak_flops_per_second:
        return None
    return flops_per_unit * units_per_second / peak_flops_per_second
