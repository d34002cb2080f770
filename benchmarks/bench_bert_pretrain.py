"""BERT pretraining throughput: MLM + NSP training tokens/s, kerasplm vs keras-hub vs HuggingFace, interleaved.

Same configuration on every side (issue 11): L4 H256 A4 (``bert_mini``, vocabulary 30,522), sequence 128,
batch 16, 20 masked positions per sequence, AdamW, random weights, one synthetic batch fitted repeatedly
(throughput does not depend on the text). tokens/s = batch × sequence / seconds per step on every side.

- kerasplm: its Trainer step on ``BertPretrainer`` (MLM head on the masked positions only + NSP), with and
  without ``jit_compile``.
- keras-hub (benchmark extra, ``pip install -e ".[test,bench]"``): ``BertMaskedLM`` on a ``BertBackbone`` of
  the same sizes (MLM on the masked positions, no NSP head: it has none), ``compile(optimizer=AdamW,
  jit_compile=...)`` then ``train_on_batch``, with and without XLA.
- HuggingFace ``BertForMaskedLM`` (torch, CPU; full-sequence MLM logits, as its model computes them) with
  ``torch.optim.AdamW``.

All sides are built first, then take turns (``--rounds`` rounds of ``--steps`` steps each, order rotating),
so they share the machine's load; the median seconds per step is reported with the load average. Also the
fp32 matmul peak measured here (a bfloat16 one with ``--mixed-precision mixed_bfloat16``, which runs the
kerasplm and keras-hub sides under that Keras policy) and each side's achieved FLOP/s over it (the same model-FLOP count for
every side: 6 · encoder weights · tokens + attention + MLM head on the masked positions; HF's MLM head
actually runs on every position, so its figure credits it only with the work the others do).

    python -m benchmarks.bench_bert_pretrain [--rounds 5] [--steps 3] [--sides kerasplm ...] [--json out.json]

``runner_rows`` gives this comparison's rows to ``python -m benchmarks.run``.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from benchmarks.common import (installed_or_reason, interleaved, keras_hub_or_reason, load_average,  # noqa: E402
                               machine_info, pair_rows, side_in_own_process, trainer_step, write_results)
from benchmarks.mfu import training_flops_per_token, transformer_matmul_params  # noqa: E402

L, H, A, V, SEQ, BATCH, PRED = 4, 256, 4, 30522, 128, 16, 20
SIDES = ("kerasplm", "kerasplm_xla", "keras_hub", "keras_hub_xla", "huggingface")


def synthetic_batch(seed=0, batch=BATCH):
    rng = np.random.default_rng(seed)
    positions = np.sort(np.stack([rng.choice(np.arange(1, SEQ - 1), PRED, replace=False) for _ in range(batch)]), 1)
    return {"token_ids": rng.integers(5, V, size=(batch, SEQ)).astype(np.int32),
            "segment_ids": (np.arange(SEQ) >= SEQ // 2).astype(np.int32)[None].repeat(batch, 0),
            "padding_mask": np.ones((batch, SEQ), np.int32),
            "masked_positions": positions.astype(np.int32),
            "masked_ids": rng.integers(5, V, size=(batch, PRED)).astype(np.int32),
            "masked_weights": np.ones((batch, PRED), np.float32),
            "next_sentence_label": rng.integers(0, 2, size=batch).astype(np.int32)}


def model_flops_per_step():
    """Training FLOPs ≈ 3 × forward; forward ≈ 2 · (encoder matmul weights) · tokens + attention + MLM head."""
    encoder = L * (4 * H * H + 2 * H * 4 * H)
    forward = 2 * encoder * BATCH * SEQ + 2 * 2 * L * BATCH * SEQ * SEQ * H + 2 * BATCH * PRED * (H * H + H * V)
    return 3 * forward


def kerasplm_step(jit_compile):
    import tensorflow as tf

    from kerasplm.models.bert.backbone import BertBackbone
    from kerasplm.models.bert.pretrainer import BertPretrainer
    from kerasplm.models.bert.pretraining_job import BertPretrainingOptions, _optimizer
    from kerasplm.training import Trainer

    batch = {k: tf.constant(v) for k, v in synthetic_batch().items()}
    options = BertPretrainingOptions(corpus=__file__, schedule_steps=10_000)
    trainer = Trainer(model=lambda: BertPretrainer(BertBackbone.from_preset("bert_mini")),
                      optimizer=lambda: _optimizer(options, 10_000), compute_loss=BertPretrainer.trainer_loss,
                      jit_compile=jit_compile, verbose=0)
    return trainer_step(trainer, batch, "mlm")


def keras_hub_step(jit_compile):
    import keras
    import tensorflow as tf

    keras_hub, reason = keras_hub_or_reason()
    if keras_hub is None:
        raise ImportError(reason)
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(vocabulary_size=V, num_layers=L, num_heads=A, hidden_dim=H,
                                             intermediate_dim=4 * H, dropout=0.1, max_sequence_length=512)
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    optimizer = keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01, epsilon=1e-6)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[], jit_compile=jit_compile)
    b = synthetic_batch()
    x = {"token_ids": tf.constant(b["token_ids"]), "segment_ids": tf.constant(b["segment_ids"]),
         "padding_mask": tf.constant(b["padding_mask"]), "mask_positions": tf.constant(b["masked_positions"])}
    y, weights = tf.constant(b["masked_ids"]), tf.constant(b["masked_weights"])

    def step():
        model.train_on_batch(x, y, sample_weight=weights)

    return step, {"parameters": model.count_params(), "jit_compile": jit_compile,
                  "keras_hub": keras_hub.__version__}


def huggingface_step(threads=None):
    import torch
    import transformers

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=A,
                                     intermediate_size=4 * H)
    model = transformers.BertForMaskedLM(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)
    b = synthetic_batch()
    labels = np.full((BATCH, SEQ), -100, np.int64)
    np.put_along_axis(labels, b["masked_positions"].astype(np.int64), b["masked_ids"].astype(np.int64), 1)
    inputs = {"input_ids": torch.tensor(b["token_ids"]).long(), "token_type_ids": torch.tensor(b["segment_ids"]).long(),
              "attention_mask": torch.tensor(b["padding_mask"]).long(), "labels": torch.tensor(labels)}

    def step():
        optimizer.zero_grad()
        model(**inputs).loss.backward()
        optimizer.step()

    return step, {"torch": torch.__version__, "transformers": transformers.__version__,
                  "threads": torch.get_num_threads(), "parameters": sum(p.numel() for p in model.parameters())}


def matmul_peak(size=1024, repeats=20, dtype="float32"):
    import time

    import tensorflow as tf

    a = tf.cast(tf.random.normal([size, size]), dtype)
    f = tf.function(lambda x: tf.matmul(x, x))
    f(a).numpy()
    t0 = time.perf_counter()
    for _ in range(repeats):
        f(a).numpy()
    return 2 * size ** 3 * repeats / (time.perf_counter() - t0)


def build_sides(names, threads=None):
    """{name: step} for the sides that can run here, and {name: info or {"skipped": reason}}."""
    builders = {"kerasplm": lambda: kerasplm_step(False), "kerasplm_xla": lambda: kerasplm_step(True),
                "keras_hub": lambda: keras_hub_step(False), "keras_hub_xla": lambda: keras_hub_step(True),
                "huggingface": lambda: huggingface_step(threads)}
    steps, info = {}, {}
    for name in names:
        try:
            steps[name], info[name] = builders[name]()
        except ImportError as e:
            info[name] = {"skipped": f"not installed ({e})"}
            print(f"{name}: skipped, not installed ({e})", flush=True)
    return steps, info


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps per side per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--mixed-precision", choices=["mixed_bfloat16"],
                        help="Keras dtype policy of the kerasplm and keras-hub sides (HF stays float32); the "
                             "peak is then a bfloat16 matmul's")
    parser.add_argument("--json")
    return parser


def measure(args):
    """Runs the sides of ``args`` (from ``build_parser``) interleaved; returns the results dict."""
    results = {"machine": machine_info(), "load_average_start": load_average(),
               "config": {"layers": L, "hidden": H, "heads": A, "vocab": V, "seq": SEQ, "batch": BATCH,
                          "predictions": PRED, "keras_dtype_policy": args.mixed_precision or "float32"}}
    if args.mixed_precision:
        import keras
        keras.mixed_precision.set_global_policy(args.mixed_precision)
    peak_dtype = "bfloat16" if args.mixed_precision else "float32"
    steps, info = build_sides(args.sides, args.threads)
    results["matmul_peak_flops"] = peak = matmul_peak(dtype=peak_dtype)
    timings = interleaved(steps, args.rounds, args.steps, args.warmup)
    results["matmul_peak_flops_after"] = peak_after = matmul_peak(dtype=peak_dtype)
    results["load_average_end"] = load_average()
    flops = model_flops_per_step()
    for name in args.sides:
        results[name] = info[name]
        if name in timings:
            t = timings[name]
            results[name].update(t, tokens_per_second=BATCH * SEQ / t["seconds_per_step"], flops_per_step=flops,
                                 flops_per_second=flops / t["seconds_per_step"],
                                 fraction_of_matmul_peak=flops / t["seconds_per_step"] / ((peak + peak_after) / 2))
    measured = {n: results[n]["tokens_per_second"] for n in args.sides if "tokens_per_second" in results[n]}
    others = {n: v for n, v in measured.items() if not n.startswith("kerasplm")}
    ours = {n: v for n, v in measured.items() if n.startswith("kerasplm")}
    if others and ours:
        fastest = max(others, key=others.get)
        results["ratio_best_kerasplm_over_fastest_other"] = {
            "kerasplm": max(ours, key=ours.get), "other": fastest, "ratio": max(ours.values()) / others[fastest]}
    return results


def runner_rows(argv=()):
    """``benchmarks.run``'s rows: kerasplm against keras-hub ``BertMaskedLM`` without and with XLA (same
    setting on both sides), and the faster kerasplm side against HF ``BertForMaskedLM`` measured alone in a process
    of its own; training tokens/s. Sides whose library is missing are not built; their rows are skipped with the
    reason."""
    args = build_parser().parse_args(argv)
    _, hub_reason = keras_hub_or_reason()
    hf_reason = installed_or_reason("transformers", "torch")
    # HF runs after the TensorFlow sides, alone in a process of its own (see side_in_own_process).
    args.sides = ["kerasplm", "kerasplm_xla"] + (["keras_hub", "keras_hub_xla"] if not hub_reason else [])
    pairs = [("no XLA vs keras-hub", "kerasplm", "keras_hub"),
             ("XLA vs keras-hub XLA", "kerasplm_xla", "keras_hub_xla"),
             ("vs HF BertForMaskedLM (own process)", ("kerasplm", "kerasplm_xla"), "huggingface")]
    results = {} if hub_reason and hf_reason else measure(args)
    results.update({s: {"skipped": hub_reason} for s in ("keras_hub", "keras_hub_xla") if hub_reason})
    results["huggingface"] = {"skipped": hf_reason} if hf_reason else \
        side_in_own_process("benchmarks.bench_bert_pretrain", list(argv), "huggingface")
    # Model FLOPs per token: the encoder's matmuls and attention, plus the MLM head (dense H x H, then the
    # tied H x V output) on the PRED masked positions of every SEQ.
    n = transformer_matmul_params(L, H, 4 * H) + PRED / SEQ * (H * H + H * V)
    flops = training_flops_per_token(n, L, SEQ, H)
    config = {"layers": L, "hidden": H, "heads": A, "vocab": V, "seq": SEQ, "batch": BATCH, "predictions": PRED,
              "rounds": args.rounds, "steps": args.steps}
    return pair_rows(results, pairs, "tokens_per_second", config, flops_per_unit=flops)


def memory_rows(argv=()):
    """``benchmarks.run``'s BERT-base row (absolute, no anchor): the kerasplm pretraining step of ``bert_base``
    (L12 H768 A12, vocabulary 30,522) at sequence 128 and batch ``--batch`` (32), ``--steps`` steps after one
    untimed step; training tokens/s, and the runner's peak RSS column holds this process's peak memory (the
    target: within 8 GB)."""
    import statistics
    import time

    import tensorflow as tf

    from kerasplm.models.bert.pretraining_job import BertPretrainingOptions, _optimizer
    from kerasplm.models.bert.backbone import BertBackbone
    from kerasplm.models.bert.pretrainer import BertPretrainer
    from kerasplm.training import Trainer

    parser = argparse.ArgumentParser(description="BERT-base pretraining step: tokens/s and memory")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--jit", action="store_true", help="jit_compile the step")
    args = parser.parse_args(argv)
    batch = {k: tf.constant(v) for k, v in synthetic_batch(batch=args.batch).items()}
    options = BertPretrainingOptions(corpus=__file__, schedule_steps=10_000)
    trainer = Trainer(model=lambda: BertPretrainer(BertBackbone.from_preset("bert_base")),
                      optimizer=lambda: _optimizer(options, 10_000), compute_loss=BertPretrainer.trainer_loss,
                      jit_compile=args.jit, verbose=0)
    step, info = trainer_step(trainer, batch, "mlm")
    step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    layers, hidden = 12, 768
    n = transformer_matmul_params(layers, hidden, 4 * hidden) + PRED / SEQ * (hidden * hidden + hidden * V)
    return [{"name": f"bert_base seq {SEQ} batch {args.batch}", "kerasplm": args.batch * SEQ / statistics.median(times),
             "anchor": None, "config": {"preset": "bert_base", "seq": SEQ, "batch": args.batch, "steps": args.steps,
                                        "predictions": PRED, **info},
             "training_flops_per_unit": training_flops_per_token(n, layers, SEQ, hidden)}]


def main(argv=None):
    args = build_parser().parse_args(argv)
    write_results(measure(args), args.json)


if __name__ == "__main__":
    main()
