"""Training throughput: kerasplm's Trainer vs the seed's ``train_step`` under ``tf.function``.

Every contender trains the ``transformer_seed`` preset (4 layers, d_model 128, 8 heads, dff 512, dropout
0.1) on the same random batches of 64 pairs, source and target length 40 (no padding, so every target
token counts), vocab 8000 on both sides, Adam + CustomSchedule. All contenders live in one process and
take turns (a few steps each, for several rounds) so that they share any machine noise. Each step is
timed on its own; tokens/s = 64 * 40 / median step time, which shrugs off the odd slow step.

    python benchmarks/bench_train.py [--rounds 10] [--precisions float32,mixed_bfloat16] [--jit false]

``runner_rows`` gives this comparison's rows to ``python -m benchmarks.run``.
"""
import argparse
import functools
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
from kerasplm.models.transformer import Transformer  # noqa: E402
from kerasplm.models import get_preset  # noqa: E402
from kerasplm.models.translator.job import translation_loss  # noqa: E402
from kerasplm.training import CustomSchedule, Trainer  # noqa: E402
from benchmarks.common import machine_info  # noqa: E402
from benchmarks.mfu import training_flops_per_token, transformer_matmul_params  # noqa: E402
from tests import seed_reference as seed  # noqa: E402

BATCH, LENGTH, VOCAB = 64, 40, 8000
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


def make_batches(n, rng):
    """n batches of (src (64, 40), tgt (64, 41)); tgt = [START] + 40 tokens, so 40 target tokens per row."""
    out = []
    for _ in range(n):
        src = rng.integers(4, VOCAB, size=(BATCH, LENGTH)).astype(np.int64)
        tgt = np.concatenate([np.full((BATCH, 1), 2), rng.integers(4, VOCAB, size=(BATCH, LENGTH))], 1).astype(np.int64)
        out.append((src, tgt))
    return out


def kerasplm_step(cfg, batches, precision, jit):
    """(step function taking a batch index, first-step seconds) for a Trainer under `precision`."""
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(precision)
    try:
        trainer = Trainer(lambda: Transformer.from_config_object(cfg),
                          lambda: keras.optimizers.Adam(CustomSchedule(128), beta_1=0.9, beta_2=0.98,
                                                        epsilon=1e-9),
                          functools.partial(translation_loss, real_tokens_only=not jit), jit_compile=jit,
                          verbose=0)
        ds = tf.data.Dataset.from_tensor_slices(([b[0] for b in batches], [b[1] for b in batches]))
        ds = ds.map(lambda s, t: ((s, t[:, :-1]), t[:, 1:]))
        trainer._ensure_ready(ds)
        dist = list(trainer.strategy.experimental_distribute_dataset(ds))
        start = time.perf_counter()
        trainer._train_fn(dist[0])
        first = time.perf_counter() - start
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return (lambda i: trainer._train_fn(dist[i % len(dist)])), first, trainer.jit_compile


def seed_step(cfg, batches):
    """The seed's own train_step with its input signature, under tf.function (no XLA)."""
    keras.utils.set_random_seed(0)
    ref = seed.Transformer(cfg.num_layers, cfg.d_model, cfg.num_heads, cfg.dff, VOCAB, VOCAB, VOCAB, VOCAB,
                           cfg.rate)
    opt = keras.optimizers.Adam(seed.CustomSchedule(128), beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    step = seed.make_train_step(ref, opt, keras.metrics.Mean(), keras.metrics.SparseCategoricalAccuracy())
    tensors = [(tf.constant(s), tf.constant(t)) for s, t in batches]
    start = time.perf_counter()
    step(*tensors[0])
    return (lambda i: step(*tensors[i % len(tensors)])), time.perf_counter() - start


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="turns per contender")
    parser.add_argument("--steps-per-turn", type=int, default=4)
    parser.add_argument("--precisions", default="float32,mixed_bfloat16",
                        help=f"comma-separated kerasplm contenders, from {', '.join(PRECISIONS)}")
    parser.add_argument("--jit", choices=["auto", "true", "false"], default="auto")
    parser.add_argument("--out", help="also write the results as JSON here")
    return parser


def measure(args, parser=None):
    """Times the seed and every kerasplm precision of ``args`` (from ``build_parser``) in turns; returns
    (info dict, the precisions run)."""
    precisions = args.precisions.split(",")
    unknown = sorted(set(precisions) - set(PRECISIONS))
    if unknown:
        (parser or build_parser()).error(f"unknown precision(s) {unknown}; choose from {PRECISIONS}")
    jit = {"auto": "auto", "true": True, "false": False}[args.jit]
    batches = make_batches(8, np.random.default_rng(0))
    cfg = get_preset("transformer_seed", input_vocab_size=VOCAB, target_vocab_size=VOCAB)

    steps, first_step, jit_used = {}, {}, None
    steps["seed"], first_step["seed"] = seed_step(cfg, batches)
    for precision in precisions:
        steps[precision], first_step[precision], jit_used = kerasplm_step(cfg, batches, precision, jit)
    for step in steps.values():  # one more untimed step each: allocator and thread pools warm
        step(1)

    times = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            for i in range(args.steps_per_turn):
                start = time.perf_counter()
                step(i)
                times[name].append(time.perf_counter() - start)
    tokens_per_s = {name: BATCH * LENGTH / float(np.median(t)) for name, t in times.items()}
    ratio = {name: tokens_per_s[name] / tokens_per_s["seed"] for name in steps}
    info = {**machine_info(), "batch": BATCH, "length": LENGTH, "vocab": VOCAB, "rounds": args.rounds,
            "steps_per_turn": args.steps_per_turn, "jit_compile": jit_used, "tokens_per_s": tokens_per_s,
            "ratio_to_seed": ratio, "first_step_seconds": first_step,
            "step_seconds": {k: [round(x, 5) for x in v] for k, v in times.items()}}
    return info, precisions


def training_flops_per_target_token(cfg):
    """Model training FLOPs per target token of ``cfg`` when source and target have LENGTH tokens each: the
    encoder's weights (once per source token = once per target token), the decoder's with cross-attention,
    the output projection (d x V, every target position), and attention over LENGTH positions in the encoder's
    self-attention, the decoder's self-attention and its cross-attention (3 x num_layers attention layers)."""
    n = (transformer_matmul_params(cfg.num_layers, cfg.d_model, cfg.dff)
         + transformer_matmul_params(cfg.num_layers, cfg.d_model, cfg.dff, cross_attention_layers=cfg.num_layers)
         + cfg.d_model * cfg.target_vocab_size)
    return training_flops_per_token(n, 3 * cfg.num_layers, LENGTH, cfg.d_model)


def runner_rows(argv=()):
    """``benchmarks.run``'s rows: each kerasplm precision's Trainer step against the seed's ``train_step``
    (float32, tf.function); target tokens/s."""
    args = build_parser().parse_args(argv)
    info, precisions = measure(args)
    cfg = get_preset("transformer_seed", input_vocab_size=VOCAB, target_vocab_size=VOCAB)
    config = {"preset": "transformer_seed", "batch": BATCH, "length": LENGTH, "vocab": VOCAB, "rounds": args.rounds,
              "steps_per_turn": args.steps_per_turn, "jit_compile": info["jit_compile"]}
    return [{"name": f"{p} vs seed", "kerasplm": info["tokens_per_s"][p], "anchor": info["tokens_per_s"]["seed"],
             "kerasplm_side": f"Trainer, {p}", "anchor_side": "seed train_step, float32", "config": config,
             "dtype": "bfloat16" if "bfloat16" in p else "float32",
             "training_flops_per_unit": training_flops_per_target_token(cfg)} for p in precisions]


def main():
    parser = build_parser()
    args = parser.parse_args()
    info, _ = measure(args, parser)
    times, first_step = info["step_seconds"], info["first_step_seconds"]
    print("| contender | target tokens/s | × seed | median step (ms) | first step (s) |")
    print("|---|---:|---:|---:|---:|")
    for name in times:
        label = "seed train_step, tf.function" if name == "seed" else (
            f"kerasplm Trainer, {name}, jit_compile={info['jit_compile']}")
        print(f"| {label} | {info['tokens_per_s'][name]:,.0f} | {info['ratio_to_seed'][name]:.2f} | "
              f"{1000 * np.median(times[name]):.0f} | {first_step[name]:.1f} |")
    print(json.dumps({k: v for k, v in info.items() if k != "step_seconds"}))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(info, f, indent=2)


if __name__ == "__main__":
    main()
