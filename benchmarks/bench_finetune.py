"""BERT fine-tuning throughput (examples/s): kerasplm ``BertClassifier`` vs keras-hub ``BertTextClassifier``, interleaved.

Issue 12's evidence. Same model on both sides: MiniLM-L6-H384 shape (6 layers, hidden 384, 12 heads, FFN
1,536, vocabulary 30,522: all-MiniLM-L6-v2's architecture; ``--preset bert_mini`` for L4 H256), random weights,
2 classes, sequence length 128, batch 32, one synthetic batch (random tokens, random lengths 32-128 with the
rest padding) fitted repeatedly. Both sides: AdamW (lr 3e-5, weight decay 0.01, ε 1e-6), gradient clipped to
global norm 1, dropout 0.1.

- kerasplm: the Trainer step of ``kerasplm finetune bert-classifier`` (``BertClassifier.trainer_loss``, the job's
  own optimizer: ``kerasplm.jobs.finetuning.make_optimizer``), with and without ``jit_compile``.
- keras-hub (benchmark extra, ``pip install -e ".[test,bench]"``): ``BertTextClassifier`` on a ``BertBackbone``
  of the same sizes, ``compile(jit_compile=...)`` then ``train_on_batch``, with and without XLA.

The sides take turns (``--rounds`` × ``--steps``), so they share the machine's load; examples/s = batch /
median seconds per step.

    python -m benchmarks.bench_finetune [--rounds 5] [--steps 3] [--preset minilm|bert_mini] [--json out.json]

``runner_rows`` gives this comparison's rows to ``python -m benchmarks.run``.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from benchmarks.common import (interleaved, keras_hub_or_reason, load_average, machine_info, pair_rows,  # noqa: E402
                               trainer_step, write_results)
from benchmarks.mfu import training_flops_per_token, transformer_matmul_params  # noqa: E402

SHAPES = {"minilm": dict(num_layers=6, hidden_size=384, num_heads=12, intermediate_size=1536),
          "bert_mini": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024)}
V, CLASSES = 30522, 2
SIDES = ("kerasplm", "kerasplm_xla", "keras_hub", "keras_hub_xla")


def synthetic_batch(batch, seq, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(32, seq + 1, size=batch)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
    return {"token_ids": (rng.integers(5, V, size=(batch, seq)) * mask).astype(np.int32),
            "segment_ids": np.zeros((batch, seq), np.int32), "padding_mask": mask,
            "labels": rng.integers(0, CLASSES, size=batch).astype(np.int32)}


def kerasplm_step(shape, batch, jit_compile):
    import tensorflow as tf

    from kerasplm.models.bert.backbone import BertBackbone
    from kerasplm.models.bert.classifier import BertClassifier
    from kerasplm.models.bert.manifest import PAPER_PEAK_RATE, BertClassifierOptions
    from kerasplm.jobs.finetuning import fine_tuning_schedule, make_optimizer
    from kerasplm.training import Trainer

    inputs = {k: tf.constant(v) for k, v in batch.items() if k != "labels"}
    data = (inputs, tf.constant(batch["labels"]))
    o = BertClassifierOptions(learning_rate=PAPER_PEAK_RATE)   # keras-hub's side below uses the paper's 3e-5 too
    trainer = Trainer(model=lambda: BertClassifier(BertBackbone.from_preset("bert_mini", **shape), CLASSES),
                      optimizer=lambda: make_optimizer(o, fine_tuning_schedule(o, 10_000), shape["num_layers"]),
                      compute_loss=BertClassifier.trainer_loss, jit_compile=jit_compile, clip_norm=1.0, verbose=0)
    return trainer_step(trainer, data, "loss")


def keras_hub_step(shape, batch, jit_compile):
    import keras
    import tensorflow as tf

    keras_hub, reason = keras_hub_or_reason()
    if keras_hub is None:
        raise ImportError(reason)
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=V, num_layers=shape["num_layers"], num_heads=shape["num_heads"],
        hidden_dim=shape["hidden_size"], intermediate_dim=shape["intermediate_size"], dropout=0.1)
    model = keras_hub.models.BertTextClassifier(backbone, num_classes=CLASSES, preprocessor=None, dropout=0.1)
    optimizer = keras.optimizers.AdamW(learning_rate=3e-5, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["sparse_categorical_accuracy"], jit_compile=jit_compile)
    x = {k: tf.constant(v) for k, v in batch.items() if k != "labels"}
    y = tf.constant(batch["labels"])

    def step():
        model.train_on_batch(x, y)

    return step, {"parameters": model.count_params(), "jit_compile": jit_compile,
                  "keras_hub": keras_hub.__version__}


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(SHAPES), default="minilm")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps per side per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--json")
    return parser


def measure(args):
    """Runs the sides of ``args`` (from ``build_parser``) interleaved; returns the results dict."""
    shape, batch = SHAPES[args.preset], synthetic_batch(args.batch, args.seq)
    results = {"machine": machine_info(), "load_average_start": load_average(),
               "config": {"shape": args.preset, **shape, "vocab": V, "classes": CLASSES, "seq": args.seq,
                          "batch": args.batch}}
    builders = {"kerasplm": lambda: kerasplm_step(shape, batch, False),
                "kerasplm_xla": lambda: kerasplm_step(shape, batch, True),
                "keras_hub": lambda: keras_hub_step(shape, batch, False),
                "keras_hub_xla": lambda: keras_hub_step(shape, batch, True)}
    steps = {}
    for name in args.sides:
        try:
            steps[name], results[name] = builders[name]()
        except ImportError as e:
            results[name] = {"skipped": f"not installed ({e})"}
            print(f"{name}: skipped, not installed ({e})", flush=True)
    for name, t in interleaved(steps, args.rounds, args.steps, args.warmup).items():
        results[name].update(t, examples_per_second=args.batch / t["seconds_per_step"])
    results["load_average_end"] = load_average()
    measured = {n: results[n]["examples_per_second"] for n in args.sides if "examples_per_second" in results[n]}
    ours = {n: v for n, v in measured.items() if n.startswith("kerasplm")}
    others = {n: v for n, v in measured.items() if n.startswith("keras_hub")}
    if ours and others:
        best, fastest = max(ours, key=ours.get), max(others, key=others.get)
        results["ratio_best_kerasplm_over_fastest_keras_hub"] = {
            "kerasplm": best, "keras_hub": fastest, "ratio": ours[best] / others[fastest]}
    return results


def runner_rows(argv=()):
    """``benchmarks.run``'s rows: the kerasplm classifier step against keras-hub ``BertTextClassifier``,
    without and with XLA on both sides; examples/s. Without keras-hub nothing is built and both rows are
    skipped with the reason."""
    args = build_parser().parse_args(argv)
    _, reason = keras_hub_or_reason()
    results = {"keras_hub": {"skipped": reason}, "keras_hub_xla": {"skipped": reason}} if reason else measure(args)
    shape = SHAPES[args.preset]
    d, layers = shape["hidden_size"], shape["num_layers"]
    # Every position of the padded batch is computed: FLOPs per example = seq x FLOPs per token (the pooler
    # and the classes' head are O(d^2) per example, left out).
    flops = args.seq * training_flops_per_token(transformer_matmul_params(layers, d, shape["intermediate_size"]),
                                                layers, args.seq, d)
    config = {"shape": args.preset, **shape, "seq": args.seq, "batch": args.batch, "rounds": args.rounds,
              "steps": args.steps}
    return pair_rows(results, [("no XLA vs keras-hub", "kerasplm", "keras_hub"),
                               ("XLA vs keras-hub XLA", "kerasplm_xla", "keras_hub_xla")],
                     "examples_per_second", config, flops_per_unit=flops)


def main(argv=None):
    args = build_parser().parse_args(argv)
    write_results(measure(args), args.json)


if __name__ == "__main__":
    main()
