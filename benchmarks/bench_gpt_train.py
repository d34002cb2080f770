"""Causal-LM training throughput of GPT-2-shaped blocks: kerasplm vs keras-hub ``GPT2CausalLM`` and HF, interleaved.

Issue 13's training evidence. Same model on both sides: GPT-2 layout, L6 H512 A8 (FFN 2,048), vocabulary
50,257, 1,024 positions, random weights; sequence 256, batch 8 (``--layers/--hidden/--heads/--seq/--batch``
to change), one synthetic batch of random tokens fitted repeatedly; next-token cross-entropy over every
position, AdamW (β2 0.95, weight decay 0.1), gradient clipped to global norm 1, dropout 0.1.

- kerasplm: the Trainer step of ``kerasplm train gpt`` (``GPT.compute_loss_sums`` with the fused loss, the
  job's own optimizer ``kerasplm.models.gpt.job.adamw``), with and without ``jit_compile``.
- keras-hub (benchmark extra, ``pip install -e ".[test,bench]"``): ``GPT2CausalLM`` on a ``GPT2Backbone`` of
  the same sizes, ``compile(jit_compile=...)`` then ``train_on_batch``, with and without XLA.
- HuggingFace ``GPT2LMHeadModel`` (torch, CPU; ``labels`` = the tokens, shifted inside the model) with
  ``torch.optim.AdamW`` and ``clip_grad_norm_`` to 1.

training tokens/s = batch × sequence / median seconds per step; the sides take turns (``--rounds`` ×
``--steps``) so that they share the machine's load.

    python -m benchmarks.bench_gpt_train [--rounds 4] [--steps 2] [--json out.json]

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

V, POSITIONS = 50257, 1024
SIDES = ("kerasplm", "kerasplm_xla", "keras_hub", "keras_hub_xla", "huggingface")


def kerasplm_step(args, tokens, jit_compile):
    import tensorflow as tf

    from kerasplm.models.presets import get_preset
    from kerasplm.models.gpt.job import adamw, build_gpt, lm_loss
    from kerasplm.training import Trainer

    config = get_preset("gpt2", num_layers=args.layers, d_model=args.hidden, num_heads=args.heads,
                        dff=4 * args.hidden).validate()
    batch = tf.constant(tokens)
    trainer = Trainer(model=lambda: build_gpt(config, "gpt2_shaped"), optimizer=lambda: adamw(3e-4, 0.1),
                      compute_loss=lm_loss, clip_norm=1.0, jit_compile=jit_compile, verbose=0)
    return trainer_step(trainer, batch, "loss")


def keras_hub_step(args, tokens, jit_compile):
    import keras
    import tensorflow as tf

    keras_hub, reason = keras_hub_or_reason()
    if keras_hub is None:
        raise ImportError(reason)
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GPT2Backbone(vocabulary_size=V, num_layers=args.layers, num_heads=args.heads,
                                             hidden_dim=args.hidden, intermediate_dim=4 * args.hidden,
                                             dropout=0.1, max_sequence_length=POSITIONS)
    model = keras_hub.models.GPT2CausalLM(backbone, preprocessor=None)
    optimizer = keras.optimizers.AdamW(learning_rate=3e-4, weight_decay=0.1, beta_2=0.95, epsilon=1e-8,
                                       global_clipnorm=1.0)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=["sparse_categorical_accuracy"], jit_compile=jit_compile)
    x = {"token_ids": tf.constant(tokens[:, :-1]), "padding_mask": tf.ones_like(tokens[:, :-1], tf.bool)}
    y = tf.constant(tokens[:, 1:])

    def step():
        model.train_on_batch(x, y)

    return step, {"parameters": model.count_params(), "jit_compile": jit_compile,
                  "keras_hub": keras_hub.__version__}


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2, help="steps per side per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--json")
    return parser


def measure(args):
    """Runs the sides of ``args`` (from ``build_parser``) interleaved; returns the results dict."""
    tokens = np.random.default_rng(0).integers(1, V, size=(args.batch, args.seq + 1)).astype(np.int32)
    results = {"machine": machine_info(), "load_average_start": load_average(),
               "config": {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "vocab": V,
                          "seq": args.seq, "batch": args.batch}}
    builders = {"kerasplm": lambda: kerasplm_step(args, tokens, False),
                "kerasplm_xla": lambda: kerasplm_step(args, tokens, True),
                "keras_hub": lambda: keras_hub_step(args, tokens, False),
                "keras_hub_xla": lambda: keras_hub_step(args, tokens, True),
                "huggingface": lambda: huggingface_step(args, tokens)}
    steps = {}
    for name in args.sides:
        try:
            steps[name], results[name] = builders[name]()
        except ImportError as e:
            results[name] = {"skipped": f"not installed ({e})"}
            print(f"{name}: skipped, not installed ({e})", flush=True)
    for name, t in interleaved(steps, args.rounds, args.steps, args.warmup).items():
        results[name].update(t, tokens_per_second=args.batch * args.seq / t["seconds_per_step"])
    results["load_average_end"] = load_average()
    measured = {n: results[n]["tokens_per_second"] for n in args.sides if "tokens_per_second" in results[n]}
    ours = {n: v for n, v in measured.items() if n.startswith("kerasplm")}
    others = {n: v for n, v in measured.items() if not n.startswith("kerasplm")}
    if ours and others:
        best, fastest = max(ours, key=ours.get), max(others, key=others.get)
        results["ratio_best_kerasplm_over_fastest_other"] = {
            "kerasplm": best, "other": fastest, "ratio": ours[best] / others[fastest]}
    return results


def runner_rows(argv=()):
    """``benchmarks.run``'s rows: the kerasplm GPT step against keras-hub ``GPT2CausalLM``, without and with
    XLA on both sides, and the faster kerasplm side against HF ``GPT2LMHeadModel`` measured alone in a process of
    its own; training tokens/s. Sides whose library is missing are not built; their rows are skipped with the
    reason."""
    args = build_parser().parse_args(argv)
    _, hub_reason = keras_hub_or_reason()
    hf_reason = installed_or_reason("transformers", "torch")
    # HF runs after the TensorFlow sides, alone in a process of its own (see side_in_own_process).
    args.sides = ["kerasplm", "kerasplm_xla"] + (["keras_hub", "keras_hub_xla"] if not hub_reason else [])
    results = {} if hub_reason and hf_reason else measure(args)
    results.update({s: {"skipped": hub_reason} for s in ("keras_hub", "keras_hub_xla") if hub_reason})
    results["huggingface"] = {"skipped": hf_reason} if hf_reason else \
        side_in_own_process("benchmarks.bench_gpt_train", list(argv), "huggingface")
    # The tied token embedding is also the output projection: its H x V weights multiply every position.
    n = transformer_matmul_params(args.layers, args.hidden, 4 * args.hidden) + args.hidden * V
    flops = training_flops_per_token(n, args.layers, args.seq, args.hidden)
    config = {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "vocab": V, "seq": args.seq,
              "batch": args.batch, "rounds": args.rounds, "steps": args.steps}
    return pair_rows(results, [("no XLA vs keras-hub", "kerasplm", "keras_hub"),
                               ("XLA vs keras-hub XLA", "kerasplm_xla", "keras_hub_xla"),
                               ("vs HF GPT2LMHeadModel (own process)", ("kerasplm", "kerasplm_xla"), "huggingface")],
                     "tokens_per_second", config, flops_per_unit=flops)


def huggingface_step(args, tokens):
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=V, n_positions=POSITIONS, n_embd=args.hidden, n_layer=args.layers,
                                     n_head=args.heads, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    model = transformers.GPT2LMHeadModel(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    # HF shifts the labels inside the model: given the seq + 1 tokens it predicts the same seq tokens per row
    # as the other sides (running one position more).
    ids = torch.tensor(tokens).long()

    def step():
        optimizer.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step, {"torch": torch.__version__, "transformers": transformers.__version__,
                  "threads": torch.get_num_threads(), "parameters": sum(p.numel() for p in model.parameters())}


def main(argv=None):
    args = build_parser().parse_args(argv)
    write_results(measure(args), args.json)


if __name__ == "__main__":
    main()
