"""Training throughput: kerasplm's Trainer vs the seed's ``train_step`` under ``tf.function``.

Both train the ``transformer_seed`` preset (4 layers, d_model 128, 8 heads, dff 512) on the same random
batches of 64 pairs, source and target length 40 (no padding, so every target token counts), vocab 8000
both sides, Adam + CustomSchedule, in one process, alternating rounds to share any machine noise.

    python benchmarks/bench_train.py [--seconds 60] [--rounds 2] [--out results.json]
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kerasplm  # noqa: E402,F401
from kerasplm.models import Transformer, get_preset  # noqa: E402
from kerasplm.tasks.translation import translation_loss  # noqa: E402
from kerasplm.training import CustomSchedule, Trainer  # noqa: E402
from benchmarks.common import machine_info  # noqa: E402
from tests import seed_reference as seed  # noqa: E402

BATCH, LENGTH, VOCAB = 64, 40, 8000


def make_batches(n, rng):
    """n batches of (src (64, 40), tgt (64, 41)); tgt = [START] + 40 tokens, so 40 target tokens per row."""
    out = []
    for _ in range(n):
        src = rng.integers(4, VOCAB, size=(BATCH, LENGTH)).astype(np.int64)
        tgt = np.concatenate([np.full((BATCH, 1), 2), rng.integers(4, VOCAB, size=(BATCH, LENGTH))], 1).astype(np.int64)
        out.append((src, tgt))
    return out


def time_steps(run_step, batches, seconds):
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        run_step(batches[steps % len(batches)])
        steps += 1
    return steps * BATCH * LENGTH / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="timed seconds per round per contender")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jit", choices=["auto", "true", "false"], default="auto")
    parser.add_argument("--mixed-precision", choices=["mixed_bfloat16"], help="policy for kerasplm's model")
    parser.add_argument("--out")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    batches = make_batches(8, rng)
    cfg = get_preset("transformer_seed", input_vocab_size=VOCAB, target_vocab_size=VOCAB)

    # kerasplm: Trainer step (strategy.run + XLA-compiled forward/backward), masked loss.
    keras.utils.set_random_seed(0)
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy(args.mixed_precision)
    jit = {"auto": "auto", "true": True, "false": False}[args.jit]
    trainer = Trainer(lambda: Transformer.from_config_object(cfg),
                      lambda: keras.optimizers.Adam(CustomSchedule(128), beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                      translation_loss, jit_compile=jit, verbose=0)
    ds = tf.data.Dataset.from_tensor_slices(([b[0] for b in batches], [b[1] for b in batches]))
    ds = ds.map(lambda s, t: ((s, t[:, :-1]), t[:, 1:]))
    trainer._ensure_ready(ds)
    dist = list(trainer.strategy.experimental_distribute_dataset(ds))

    our_batches = dist
    keras.mixed_precision.set_global_policy("float32")
    # Seed: its own train_step with its input signature, under tf.function (no XLA).
    keras.utils.set_random_seed(0)
    ref = seed.Transformer(cfg.num_layers, cfg.d_model, cfg.num_heads, cfg.dff, VOCAB, VOCAB, VOCAB, VOCAB, cfg.rate)
    opt = keras.optimizers.Adam(seed.CustomSchedule(128), beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    seed_step = seed.make_train_step(ref, opt, keras.metrics.Mean(), keras.metrics.SparseCategoricalAccuracy())
    seed_batches = [(tf.constant(s), tf.constant(t)) for s, t in batches]

    t0 = time.perf_counter(); trainer._train_fn(our_batches[0]); ours_compile = time.perf_counter() - t0
    t0 = time.perf_counter(); seed_step(*seed_batches[0]); seed_compile = time.perf_counter() - t0
    results = {"ours": [], "seed": []}
    for _ in range(args.rounds):
        results["seed"].append(time_steps(lambda b: seed_step(*b), seed_batches, args.seconds))
        results["ours"].append(time_steps(lambda b: trainer._train_fn(b), our_batches, args.seconds))
    seed_tps, ours_tps = max(results["seed"]), max(results["ours"])
    info = {**machine_info(), "jit_compile": trainer.jit_compile, "mixed_precision": args.mixed_precision,
            "batch": BATCH, "length": LENGTH,
            "vocab": VOCAB, "seconds_per_round": args.seconds, "rounds": args.rounds,
            "seed_tokens_per_s": seed_tps, "kerasplm_tokens_per_s": ours_tps, "ratio": ours_tps / seed_tps,
            "first_step_seconds": {"seed": seed_compile, "kerasplm": ours_compile}, "all_rounds": results}
    print("| contender | target tokens/s | × seed | first step (s) |\n|---|---:|---:|---:|")
    print(f"| seed train_step, tf.function | {seed_tps:,.0f} | 1.00 | {seed_compile:.1f} |")
    print(f"| kerasplm Trainer (jit_compile={trainer.jit_compile}, {args.mixed_precision or 'float32'}) | {ours_tps:,.0f} | {ours_tps / seed_tps:.2f} | "
          f"{ours_compile:.1f} |")
    print(json.dumps({k: v for k, v in info.items() if k != "all_rounds"}))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(info, f, indent=2)


if __name__ == "__main__":
    main()
