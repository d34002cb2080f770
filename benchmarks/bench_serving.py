"""Serving latency of an exported translator: one sentence per request, p50 / p99 over N requests.

Paths measured, each after a warm-up:
  * in-process: ``tf.saved_model.load(version_dir).signatures["serving_default"](inputs=[sentence])``;
  * REST: ``kerasplm serve`` (``kerasplm.serving.ModelServer``) on loopback, ``urllib`` POST
    ``{"instances": [sentence]}`` to ``/v1/models/translator:predict`` (JSON + HTTP overhead included);
for two exports of the same model: ``jit_compile=False`` (the default, TF Serving-compatible as is) and
``jit_compile=True`` (XLA-compiled decoding loop; TF Serving needs ``--xla_cpu_compilation_enabled``).

Model: the run directory given with ``--run`` (a trained translator), else a ``transformer_seed`` model with
random weights and WordPiece vocabularies learned from the bundled Tatoeba sample. The request sentence is
fixed, so every request generates the same tokens (the count is reported).

    python benchmarks/bench_serving.py [--run runs/translator] [--requests 200] --out results.json
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.common import machine_info  # noqa: E402
from kerasplm.export import export_translator  # noqa: E402
from kerasplm.serving import ModelServer  # noqa: E402

SENTENCE = "¿Puedo tomar prestado este libro?"


def build_translator(run):
    from kerasplm.tasks.translation import Translator, load_translator

    if run:
        return load_translator(run), f"run {run}"
    from kerasplm.data import read_parallel_tsv, sample_path
    from kerasplm.models.transformer import Transformer
    from kerasplm.text import WordPieceTokenizer, build_wordpiece_vocab

    src, tgt = read_parallel_tsv(sample_path("spa-eng-train.tsv"), src_col=1, tgt_col=0)
    src_tok = WordPieceTokenizer(build_wordpiece_vocab(src, vocab_size=8000))
    tgt_tok = WordPieceTokenizer(build_wordpiece_vocab(tgt, vocab_size=8000))
    keras.utils.set_random_seed(0)
    model = Transformer.from_preset("transformer_seed", src_tok.vocab_size, tgt_tok.vocab_size)
    config = {"family": "transformer_translator", "preset": "transformer_seed"}
    return Translator(model, src_tok, tgt_tok, config=config, step=0), "transformer_seed, random weights"


def percentiles(times):
    ms = np.array(times) * 1000.0
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "mean_ms": round(float(ms.mean()), 2)}


def measure(fn, requests, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(requests):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return percentiles(times)


def bench_export(path, requests, warmup):
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    inputs = tf.constant([SENTENCE])
    t0 = time.perf_counter()
    translation = fn(inputs=inputs)["translation"].numpy()[0].decode()
    first_call = time.perf_counter() - t0
    tokens = int(loaded.signatures["translate_with_attention"](inputs=inputs)["target_length"][0])
    rows = [{"path": "in-process signature", **measure(lambda: fn(inputs=inputs), requests, warmup)}]
    server = ModelServer(os.path.dirname(path), "translator", port=0, quiet=True).start()
    try:
        url = f"{server.url}/v1/models/translator:predict"
        body = json.dumps({"instances": [SENTENCE]}).encode()

        def post():
            request = urllib.request.Request(url, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as response:
                out = json.loads(response.read())
            assert out["predictions"] == [translation], out
        rows.append({"path": "kerasplm serve (REST, loopback)", **measure(post, requests, warmup)})
    finally:
        server.stop()
    return rows, {"first_call_s": round(first_call, 2), "generated_tokens": tokens, "translation": translation}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", help="translator run directory (default: random transformer_seed model)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--max-beam-size", type=int, default=8, help="beam branches in the export (default 8)")
    parser.add_argument("--no-jit", action="store_true", help="skip the jit_compile=True export")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)

    translator, model_desc = build_translator(args.run)
    results = {"model": model_desc, "sentence": SENTENCE, "requests": args.requests, "warmup": args.warmup,
               "machine": machine_info(), "rows": [], "exports": {}}
    with tempfile.TemporaryDirectory(prefix="bench_serving_") as tmp:
        for jit in (False,) if args.no_jit else (False, True):
            base = os.path.join(tmp, f"jit_{int(jit)}", "translator")
            t0 = time.perf_counter()
            path = export_translator(translator, base, jit_compile=jit, max_beam_size=args.max_beam_size)
            export_s = time.perf_counter() - t0
            rows, info = bench_export(path, args.requests, args.warmup)
            results["exports"][f"jit_compile={jit}"] = {"export_s": round(export_s, 1), **info}
            for row in rows:
                results["rows"].append({"export": f"jit_compile={jit}", **row})

    print(f"\nServing latency, one sentence per request ({model_desc}; {args.requests} requests after "
          f"{args.warmup} warm-up; {results['machine']['cpus_usable']} CPUs, TF {tf.__version__})\n")
    print("| export | path | p50 ms | p99 ms | mean ms |")
    print("|---|---|---:|---:|---:|")
    for row in results["rows"]:
        print(f"| {row['export']} | {row['path']} | {row['p50_ms']} | {row['p99_ms']} | {row['mean_ms']} |")
    for name, info in results["exports"].items():
        print(f"\n{name}: export {info['export_s']} s, first call {info['first_call_s']} s, "
              f"{info['generated_tokens']} generated tokens per request")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
