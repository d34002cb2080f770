"""How fast XLA:CPU reads the weights of a decoding step's products: the six FFN blocks of the generation benchmark's
GPT-2 layout (H512, 4H = 2048), at 1 or more rows, in an XLA-compiled loop like the engine's.

Each pass is ``x -> relu(x W1 [+ b1]) W2 [+ b2] + x`` through six blocks of random float32 weights (50 MB): the bytes a
batch-1 decoding step's FFN products read. Variants:

* ``bias``: the Dense layers' form, ``x W + b``. XLA:CPU fuses the add into the product (a ``dot_add_fusion``).
* ``no_bias``: the same products without the bias adds (the residual add stays).
* ``plain``: the bare products, nothing fused to them.

GB/s = weight bytes per pass / median seconds per pass. The figures answer one question: is a slow product at
batch 1 the memory's limit or the kernel's? Compare them with ``bench_generate.read_bandwidth`` (a full read of
1 GiB), which this script prints too (benchmarks/RESULTS.md, issue 31, 2026-12-03).

    python benchmarks/bench_xla_gemv.py [--rows 1 2] [--passes 96] [--rounds 8]
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

HIDDEN, BLOCKS = 512, 6
VARIANTS = ("bias", "no_bias", "plain")


def make_blocks(seed=0):
    """Six blocks of random float32 FFN weights (``w1``, ``b1``, ``w2``, ``b2``) and the bytes of their matrices."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)

    def weight(*shape):
        return tf.Variable(rng.normal(0, 0.02, shape).astype(np.float32))

    blocks = [dict(w1=weight(HIDDEN, 4 * HIDDEN), b1=weight(4 * HIDDEN), w2=weight(4 * HIDDEN, HIDDEN),
                   b2=weight(HIDDEN)) for _ in range(BLOCKS)]
    return blocks, BLOCKS * 2 * 4 * HIDDEN * HIDDEN * 4


def make_pass_loop(variant, blocks, passes):
    """An XLA-compiled ``x -> x after `passes` passes`` through ``blocks`` (see the module docstring)."""
    import tensorflow as tf

    def one_pass(x):
        for b in blocks:
            if variant == "bias":
                x = x + (tf.nn.relu(x @ b["w1"] + b["b1"]) @ b["w2"] + b["b2"])
            elif variant == "no_bias":
                x = x + tf.nn.relu(x @ b["w1"]) @ b["w2"]
            else:
                x = (x @ b["w1"]) @ b["w2"]
        return x * 0.5   # keeps the values bounded over the passes

    @tf.function(jit_compile=True)
    def loop(x):
        return tf.while_loop(lambda i, x: i < passes, lambda i, x: (i + 1, one_pass(x)), (0, x))[1]

    return loop


def measure(rows, passes, rounds, variants=VARIANTS):
    """{variant: {"ms_per_pass", "gb_per_s"}} at ``rows`` rows, the variants taking turns ``rounds`` times
    (:func:`benchmarks.common.interleaved`; the first call of each compiles it)."""
    import tensorflow as tf

    from benchmarks.common import interleaved

    x = tf.random.normal([rows, HIDDEN], seed=0) * 0.01
    blocks, weight_bytes = make_blocks()
    loops = {variant: make_pass_loop(variant, blocks, passes) for variant in variants}
    timings = interleaved({v: (lambda loop=loop: loop(x).numpy()) for v, loop in loops.items()}, rounds, 1, quiet=True)
    result = {}
    for variant, timing in timings.items():
        per_pass = timing["seconds_per_step"] / passes
        result[variant] = {"ms_per_pass": round(1e3 * per_pass, 3), "gb_per_s": round(weight_bytes / per_pass / 1e9, 1)}
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--passes", type=int, default=96, help="passes per compiled loop (a call)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--bandwidth-gib", type=float, default=1.0, help="0: skip the read-bandwidth reference")
    args = parser.parse_args(argv)
    if args.bandwidth_gib > 0:
        from benchmarks.bench_generate import read_bandwidth

        best, _ = read_bandwidth(args.bandwidth_gib)
        print(f"read bandwidth: {best / 1e9:.1f} GB/s", flush=True)
    results = {}
    for rows in args.rows:
        results[rows] = measure(rows, args.passes, args.rounds)
        for variant, figures in results[rows].items():
            print(f"rows {rows}, {variant}: {figures['ms_per_pass']:.3f} ms per pass, {figures['gb_per_s']:.1f} GB/s",
                  flush=True)
    return results


if __name__ == "__main__":
    main()
