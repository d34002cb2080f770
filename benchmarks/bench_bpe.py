"""GPT-2 byte-level BPE throughput: kerasplm's in-graph ``BytePairTokenizer`` vs Hugging Face and plain Python.

A byte-level BPE of ``--vocab-size`` tokens is trained with Hugging Face ``tokenizers`` on WikiText-2's
validation split (no network; GPT-2's own files need a download), then ``--lines`` lines of its test split
are tokenized by:

* kerasplm ``BytePairTokenizer.tokenize`` (a ``tf.function``), in batches of ``--batch`` lines and one
  line at a time;
* ``transformers.GPT2TokenizerFast`` (Rust ``tokenizers``; in transformers 5 ``GPT2Tokenizer`` is the same
  class), whole list at once and one line at a time;
* GPT-2's algorithm in plain Python (``tests/text/bpe_vocab.py::gpt2_reference_ids``, what the slow
  ``GPT2Tokenizer`` of transformers 4 ran, without its cache).

All three must give the same ids (checked). tokens/s = tokens produced / wall time, median of
``--repeats`` after one warm-up call (tracing).

    python benchmarks/bench_bpe.py --out bpe.json [--lines 2000] [--vocab-size 8000] [--batch 256]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tensorflow as tf  # noqa: E402

from benchmarks.common import machine_info  # noqa: E402
from kerasplm.text.bpe import BytePairTokenizer  # noqa: E402
from tests.text.bpe_vocab import gpt2_reference_ids, read_merge_ranks, train_gpt2_vocab  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "wikitext2")


def read_lines(name, limit=None):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    return lines[:limit] if limit else lines


def timed(fn, repeats):
    """(result of the warm-up call, its seconds, median seconds of ``repeats`` further calls)."""
    start = time.perf_counter()
    result = fn()
    warmup = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return result, warmup, statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--lines", type=int, default=2000, help="lines of WikiText-2 test to tokenize")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=256, help="lines per tokenize call (kerasplm)")
    parser.add_argument("--single-lines", type=int, default=200, help="lines timed one call each")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import transformers  # noqa: PLC0415

    directory = train_gpt2_vocab(tempfile.mkdtemp(prefix="bench_bpe_"), vocab_size=args.vocab_size,
                                 texts=read_lines("wiki.valid.tokens"))
    lines = read_lines("wiki.test.tokens", args.lines)
    ours = BytePairTokenizer(os.path.join(directory, "vocab.json"), os.path.join(directory, "merges.txt"))
    hf = transformers.GPT2TokenizerFast.from_pretrained(directory)
    batches = [tf.constant(lines[i:i + args.batch]) for i in range(0, len(lines), args.batch)]
    single = [tf.constant([line]) for line in lines[:args.single_lines]]
    with open(os.path.join(directory, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    ranks = read_merge_ranks(os.path.join(directory, "merges.txt"))

    runs = {
        f"kerasplm tokenize, batches of {args.batch}": (
            lines, lambda: [row for b in batches for row in ours.tokenize(b).to_list()]),
        "kerasplm tokenize, one line per call": (
            lines[:args.single_lines], lambda: [ours.tokenize(t).to_list()[0] for t in single]),
        "transformers GPT2TokenizerFast, all lines in one call": (lines, lambda: hf(lines)["input_ids"]),
        "transformers GPT2TokenizerFast, one line per call": (
            lines[:args.single_lines], lambda: [hf(line)["input_ids"] for line in lines[:args.single_lines]]),
        "GPT-2's algorithm in plain Python (no cache)": (
            lines, lambda: [gpt2_reference_ids(line, vocab, ranks) for line in lines]),
    }
    expected = hf(lines)["input_ids"]
    results = {"machine": machine_info(), "vocab_size": len(vocab), "lines": len(lines),
               "characters": sum(map(len, lines)), "rows": []}
    for name, (texts, fn) in runs.items():
        ids, warmup, seconds = timed(fn, args.repeats)
        assert ids == expected[:len(texts)], f"{name}: ids differ from transformers'"
        tokens = sum(map(len, ids))
        row = {"name": name, "lines": len(texts), "tokens": tokens, "warmup_s": round(warmup, 3),
               "seconds": round(seconds, 4), "tokens_per_s": round(tokens / seconds)}
        results["rows"].append(row)
        print(f"{name:55s} {len(texts):5d} lines {tokens:7d} tokens {seconds:8.3f} s {tokens / seconds:10.0f} tok/s "
              f"(warm-up {warmup:.2f} s)", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
