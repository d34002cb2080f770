"""Generation throughput of a GPT-2-shaped model, interleaved in one run: kerasplm's engine vs keras-hub
``GPT2CausalLM.generate`` vs HuggingFace ``generate`` (torch, CPU), and the memory-bandwidth limit.

Model: GPT-2 layout, L6 H512 A8, vocab 50257, 1024 positions, random weights. HF's model is built first and
saved with ``save_pretrained``; kerasplm loads it through ``kerasplm.models.gpt.convert`` and keras-hub through its
own HF converter (``GPT2CausalLM.from_preset(directory, preprocessor=None)``), so all three decode the same
model and their greedy tokens are compared as a sanity check (if keras-hub cannot read the directory it gets
random weights of the same shape, and says so). Prompts: ``--prompt`` random tokens, ``--new`` new tokens,
greedy, no stop id on any side (keras-hub: ``stop_token_ids=None``; HF: ``min_new_tokens``), so every row
generates all of them. keras-hub runs with its compile default (``jit_compile`` resolves to False on CPU) and,
as a second side, with ``jit_compile=True``. ``kerasplm`` picks greedy tokens with the screened argmax
(:mod:`kerasplm.generation.screened_argmax`); ``kerasplm_full_logits`` computes the full float32 logits every
step (``screened_greedy=False``), so the two show what the screen buys. new tokens/s = batch × new / median wall time of one call; the
sides take turns (``--rounds``) after one warm-up call each (tracing / XLA compilation, reported separately).

The bandwidth limit: every decoding step reads all the weights once (fp32; the tied token embedding in full
for the logits, one position row) plus the key/value cache, so tokens/s ≤ batch × read bandwidth / bytes per
step, with the read bandwidth measured here by summing a 1 GiB array (numpy and TensorFlow; the faster one).
The limit counts the float32 table; the screened side reads it as bfloat16 (half the bytes) plus ~128 float32
rows per prompt, so its own limit is higher.

    python benchmarks/bench_generate.py --json results.json [--batch 1 4] [--prompt 32] [--new 96]

``runner_rows`` gives this comparison's rows to ``python -m benchmarks.run``.
"""
import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from benchmarks.common import (interleaved, keras_hub_or_reason, library_or_reason, load_average,  # noqa: E402
                               machine_info)

SHAPE = dict(n_layer=6, n_embd=512, n_head=8, vocab_size=50257, n_positions=1024)
SIDES = ("kerasplm", "kerasplm_full_logits", "keras_hub", "keras_hub_xla", "huggingface")


def read_bandwidth(gib=1.0, repeats=3):
    """Bytes/s of a full read of an array far larger than the caches: best of numpy and tf.reduce_sum."""
    import tensorflow as tf

    x = np.ones(int(gib * 2 ** 30) // 4, np.float32)
    best = {}
    t = tf.constant(x)
    reduce = tf.function(tf.reduce_sum)
    for name, fn in (("numpy", lambda: float(x.sum())), ("tensorflow", lambda: float(reduce(t)))):
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        best[name] = x.nbytes / min(times)
    return max(best.values()), best


def bytes_per_step(batch, length):
    """fp32 bytes read per decoding step: every weight once (position table: one row) + the K/V cache."""
    L, H, V = SHAPE["n_layer"], SHAPE["n_embd"], SHAPE["vocab_size"]
    block = 12 * H * H + 13 * H                      # qkv + proj + 2 ffn matrices, their biases, 2 LayerNorms
    weights = L * block + V * H + H + 2 * H          # blocks + token table (tied logits) + 1 position row + ln_f
    cache = L * 2 * batch * length * H               # K and V, read up to the current position (upper bound)
    return 4 * (weights + cache)


def load_models(with_keras_hub=True):
    """One HF-initialized GPT-2 of ``SHAPE`` (seed 0) in each library: ``(hf, kerasplm, keras_hub, note)``.

    HF's model is saved with ``save_pretrained``; kerasplm loads it through ``kerasplm.models.gpt.convert`` and keras-hub
    through its own HF converter (``GPT2CausalLM.from_preset(directory, preprocessor=None)``). If keras-hub cannot
    read the directory it gets random weights of the same shape, and ``note`` says so. keras-hub's model is None
    where it is not installed or ``with_keras_hub`` is false (``note`` None then)."""
    import keras
    import torch
    import transformers

    from kerasplm.models.gpt.convert import load_gpt2

    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**SHAPE)).eval()
    keras_hub, _ = keras_hub_or_reason()
    hub = note = None
    with tempfile.TemporaryDirectory() as directory:
        hf.save_pretrained(directory)
        model = load_gpt2(directory)
        if keras_hub is not None and with_keras_hub:
            try:
                hub = keras_hub.models.GPT2CausalLM.from_preset(directory, preprocessor=None)
                note = "the HF model's, through keras-hub's converter"
            except Exception as e:  # noqa: BLE001 (any failure: fall back to random weights of the same shape)
                keras.utils.set_random_seed(0)
                backbone = keras_hub.models.GPT2Backbone(
                    vocabulary_size=SHAPE["vocab_size"], num_layers=SHAPE["n_layer"], num_heads=SHAPE["n_head"],
                    hidden_dim=SHAPE["n_embd"], intermediate_dim=4 * SHAPE["n_embd"],
                    max_sequence_length=SHAPE["n_positions"])
                hub = keras_hub.models.GPT2CausalLM(backbone, preprocessor=None)
                note = f"random (keras-hub could not read the HF directory: {e})"
    return hf, model, hub, note


def keras_hub_inputs(prompts, new):
    """keras-hub ``GPT2CausalLM.generate``'s inputs for ``new`` tokens after ``prompts`` (int32 ``(batch, prompt)``):
    the prompts padded with room for them, and a padding mask over the prompt positions."""
    batch, prompt = prompts.shape
    return {"token_ids": np.pad(prompts, [(0, 0), (0, new)]),
            "padding_mask": np.arange(prompt + new)[None].repeat(batch, 0) < prompt}


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--bandwidth-gib", type=float, default=1.0,
                        help="size of the array read to measure the bandwidth limit (0: skip it, and its memory)")
    parser.add_argument("--json", "--out", dest="json")
    return parser


def measure(args):
    """Generates as ``args`` (from ``build_parser``) says; returns the results dict (one entry per batch size
    in ``rows``)."""

    import tensorflow as tf
    import torch
    import transformers

    from kerasplm.generation import make_generate_fn

    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"machine": machine_info(), "load_average_start": load_average(), "shape": SHAPE,
              "prompt": args.prompt, "new_tokens": args.new, "torch_threads": torch.get_num_threads(),
              "transformers": transformers.__version__, "torch": torch.__version__, "rows": []}
    bandwidth = None
    if args.bandwidth_gib > 0:
        bandwidth, by_library = read_bandwidth(args.bandwidth_gib)
        result["read_bandwidth_bytes_per_s"] = {"best": bandwidth, **by_library}
        print(f"read bandwidth: {bandwidth / 1e9:.2f} GB/s "
              f"({', '.join(f'{k} {v / 1e9:.2f}' for k, v in by_library.items())})", flush=True)
    hf, model, hub, hub_note = load_models({"keras_hub", "keras_hub_xla"} & set(args.sides))
    keras_hub, reason = keras_hub_or_reason()
    result["keras_hub"] = keras_hub.__version__ if keras_hub is not None else reason
    if hub_note:
        result["keras_hub_weights"] = hub_note
    if keras_hub is None:
        print(f"keras_hub: skipped, {reason}", flush=True)
    hub_xla = None
    if hub is not None:
        hub.compile(sampler="greedy")
        result["keras_hub_default_jit_compile"] = bool(hub.jit_compile)
        if "keras_hub_xla" in args.sides:
            hub_xla = keras_hub.models.GPT2CausalLM(hub.backbone, preprocessor=None)
            hub_xla.compile(sampler="greedy", jit_compile=True)

    rng = np.random.default_rng(0)
    total = args.prompt + args.new
    for batch in args.batch:
        prompts = rng.integers(1, SHAPE["vocab_size"], size=(batch, args.prompt)).astype(np.int32)
        outputs = {}
        sides = {}
        for name, screened in (("kerasplm", True), ("kerasplm_full_logits", False)):
            if name in args.sides:
                fn = make_generate_fn(model, max_new_tokens=args.new, stop_ids=(), jit_compile=True,
                                      screened_greedy=screened)
                sides[name] = lambda fn=fn, name=name: outputs.__setitem__(name, fn(prompts).tokens.numpy())
        hub_inputs = keras_hub_inputs(prompts, args.new)
        for name, m in (("keras_hub", hub if "keras_hub" in args.sides else None), ("keras_hub_xla", hub_xla)):
            if m is not None:
                sides[name] = (lambda m=m, name=name: outputs.__setitem__(
                    name, m.generate(dict(hub_inputs), stop_token_ids=None)["token_ids"][:, args.prompt:]))
        if "huggingface" in args.sides:
            ids = torch.tensor(prompts, dtype=torch.long)

            def hf_generate():
                with torch.no_grad():
                    out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new,
                                      min_new_tokens=args.new, do_sample=False, pad_token_id=0)
                outputs["huggingface"] = out[:, args.prompt:].numpy()
            sides["huggingface"] = hf_generate
        timings = interleaved(sides, args.rounds, 1, warmup=1)
        limit = batch * bandwidth / bytes_per_step(batch, total) if bandwidth else None
        row = {"batch": batch, "bandwidth_limit_tokens_per_s": limit and round(limit, 1),
               "bytes_per_step": bytes_per_step(batch, total), "load_average": load_average()}
        for name, t in timings.items():
            rate = batch * args.new / t["seconds_per_step"]
            shape_ok = outputs[name].shape == (batch, args.new)
            row[name] = {"tokens_per_s": round(rate, 1), "warmup_s": t["first_step_s"],
                         "call_seconds": t["rounds"], "fraction_of_bandwidth_limit": limit and round(rate / limit, 3),
                         "generated_shape_ok": bool(shape_ok)}
            if name != "huggingface" and "huggingface" in outputs:
                row[name]["greedy_tokens_equal_hf"] = round(float(np.mean(outputs[name] == outputs["huggingface"])), 3)
            if name != "kerasplm" and "kerasplm" in outputs:
                row[name]["greedy_tokens_equal_kerasplm"] = round(float(np.mean(outputs[name] == outputs["kerasplm"])), 3)
        if "kerasplm" in timings:
            for name in timings:
                if name != "kerasplm":
                    row[f"kerasplm_over_{name}"] = round(row["kerasplm"]["tokens_per_s"] / row[name]["tokens_per_s"], 2)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
    result["load_average_end"] = load_average()
    result["tensorflow"] = tf.__version__
    return result


def runner_rows(argv=()):
    """``benchmarks.run``'s rows: for each batch size, kerasplm's engine (screened greedy, XLA) against
    keras-hub ``GPT2CausalLM.generate`` (its default compile, and XLA) and HF ``generate``; new tokens/s. The
    whole comparison needs transformers and torch (the HF model is the weights' source); keras-hub rows are
    skipped with the reason where it is missing."""
    args = build_parser().parse_args(argv)
    _, hub_reason = keras_hub_or_reason()
    _, hf_reason = library_or_reason("transformers", "transformers")
    if not hf_reason:
        _, hf_reason = library_or_reason("torch", "torch")
    anchors = {"keras_hub": "vs keras-hub", "keras_hub_xla": "vs keras-hub XLA", "huggingface": "vs HF"}
    config = {"shape": SHAPE, "prompt": args.prompt, "new": args.new, "rounds": args.rounds}
    if hf_reason:
        return [{"name": f"batch {b} {label}", "skipped": hf_reason, "config": config}
                for b in args.batch for label in anchors.values()]
    args.sides = ["kerasplm", "huggingface"] + ([] if hub_reason else ["keras_hub", "keras_hub_xla"])
    result = measure(args)
    rows = []
    for row in result["rows"]:
        for side, label in anchors.items():
            out = {"name": f"batch {row['batch']} {label}", "anchor_side": side,
                   "config": {**config, "batch": row["batch"]}}
            if side not in row:
                out["skipped"] = hub_reason or f"{side} did not run"
            else:
                out.update(kerasplm=row["kerasplm"]["tokens_per_s"], anchor=row[side]["tokens_per_s"],
                           kerasplm_side="kerasplm, screened greedy, XLA")
            rows.append(out)
    return rows


def main(argv=None):
    args = build_parser().parse_args(argv)
    result = measure(args)
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
