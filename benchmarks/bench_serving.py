"""Serving latency of an exported translator: one sentence per request, p50 / p99 over N requests.

Paths measured, each after a warm-up:
  * in-process: ``tf.saved_model.load(version_dir).signatures["serving_default"](inputs=[sentence])``;
  * REST: ``kerasplm serve`` (``kerasplm.serving.ModelServer``) on loopback, ``urllib`` POST
    ``{"instances": [sentence]}`` to ``/v1/models/translator:predict`` (JSON + HTTP overhead included);
for two exports of the same model: ``jit_compile=False`` (the default, TF Serving-compatible as is) and
``jit_compile=True`` (XLA-compiled decoding loop; TF Serving needs ``--xla_cpu_compilation_enabled``).

``--max-request`` measures instead the largest request ``kerasplm serve`` accepts (``--max-batch-size``
rows, default 1024 sentences from the bundled sample) through a real ``kerasplm serve`` subprocess:
latency, and the server's resident memory (``VmRSS``) and peak (``VmHWM``) from ``/proc``, before, after
one and after a second maximum-size request; once per ``--batch-chunk-size`` given (the default 64
rows per signature call, and the batch size itself = one call for the whole request, as before chunking).

Model: the run directory given with ``--run`` (a trained translator), else a ``transformer_seed`` model with
random weights and WordPiece vocabularies learned from the bundled Tatoeba sample. The request sentence is
fixed, so every request generates the same tokens (the count is reported).

    python benchmarks/bench_serving.py [--run runs/translator] [--requests 200] --out results.json
    python benchmarks/bench_serving.py --max-request [--chunk-sizes 64 1024] --out max_request.json

``--batch-sizes 1 8 32`` adds the signature's throughput at those request sizes; ``runner_rows`` gives this
benchmark's rows to ``python -m benchmarks.run``.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.common import machine_info  # noqa: E402
from kerasplm.models.translator import export_translator  # noqa: E402
from kerasplm.serving import ModelServer  # noqa: E402

SENTENCE = "¿Puedo tomar prestado este libro?"


def build_translator(run):
    from kerasplm.models.translator.job import Translator, load_translator

    if run:
        return load_translator(run), f"run {run}"
    from kerasplm.data import read_parallel_tsv, sample_path
    from kerasplm.models.transformer.model import Transformer
    from kerasplm.runs import attach_run_info
    from kerasplm.text import TranslatorPreprocessor, WordPieceTokenizer, build_wordpiece_vocab

    src, tgt = read_parallel_tsv(sample_path("spa-eng-train.tsv"), src_col=1, tgt_col=0)
    src_tok = WordPieceTokenizer(build_wordpiece_vocab(src, vocab_size=8000))
    tgt_tok = WordPieceTokenizer(build_wordpiece_vocab(tgt, vocab_size=8000))
    keras.utils.set_random_seed(0)
    model = Transformer.from_preset("transformer_seed", src_tok.vocab_size, tgt_tok.vocab_size)
    attach_run_info(model, "", {"family": "transformer_translator", "preset": "transformer_seed"}, 0)
    preprocessor = TranslatorPreprocessor(src_tok, tgt_tok, max_source_length=model.max_source_length)
    return Translator(model, preprocessor), "transformer_seed, random weights"


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
    server = ModelServer(os.path.dirname(path), "translator", rest_api_port=0, grpc_port=None, quiet=True).start()
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


def batch_throughput(path, batch_sizes, repeats):
    """Sentences/s of the in-process ``serving_default`` signature against the request's batch size: each
    request holds ``batch`` sentences of the bundled sample (the first ones, the same every call); median of
    ``repeats`` calls after one untimed call per size (tracing that shape)."""
    from kerasplm.data import read_parallel_tsv, sample_path

    sources, _ = read_parallel_tsv(sample_path("spa-eng-train.tsv"), src_col=1, tgt_col=0)
    fn = tf.saved_model.load(path).signatures["serving_default"]
    rows = []
    for batch in batch_sizes:
        inputs = tf.constant(sources[:batch])
        fn(inputs=inputs)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn(inputs=inputs)["translation"].numpy()
            times.append(time.perf_counter() - start)
        seconds = float(np.median(times))
        rows.append({"batch": batch, "seconds_per_request": round(seconds, 4),
                     "sentences_per_s": round(batch / seconds, 2)})
    return rows


def _proc_memory_mb(pid):
    """Resident memory now and its peak so far (MiB) of process ``pid``, from /proc/<pid>/status."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {key: round(int(fields[name].split()[0]) / 1024, 1) for key, name in (("rss_mb", "VmRSS"),
                                                                                ("peak_mb", "VmHWM"))}


def _start_cli_server(base, chunk_size, max_batch_size, log_path):
    """A real ``kerasplm serve`` subprocess on 127.0.0.1 (OS-chosen port); returns (process, URL)."""
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kerasplm.cli", "serve", "--model-base-path", base, "--model-name", "translator",
         "--rest_api_port", "0", "--port", "off", "--quiet", "--max-batch-size", str(max_batch_size),
         "--batch-chunk-size", str(chunk_size)],
        stdout=subprocess.DEVNULL, stderr=log, cwd=repo, env={**os.environ, "PYTHONPATH": repo})
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        with open(log_path, "rb") as f:
            match = re.search(rb"Serving (http://127\.0\.0\.1:\d+)/", f.read())
        if match:
            return proc, match.group(1).decode() + "/v1/models/translator:predict"
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"kerasplm serve did not start; see {log_path}")


def _post(url, payload, timeout=900):
    data = json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, body = response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        status, body = e.code, json.loads(e.read())
    return status, body, time.perf_counter() - start


def bench_max_request(base, chunk_sizes, max_batch_size, tmp):
    """Latency and server memory of maximum-size requests through ``kerasplm serve``."""
    from kerasplm.data import read_parallel_tsv, sample_path

    sources, _ = read_parallel_tsv(sample_path("spa-eng-train.tsv"), src_col=1, tgt_col=0)
    batch = sources[:max_batch_size]
    rows = []
    for chunk_size in chunk_sizes:
        proc, url = _start_cli_server(base, chunk_size, max_batch_size, os.path.join(tmp, f"serve_{chunk_size}.log"))
        try:
            status, _, _ = _post(url, {"instances": [SENTENCE]})  # warm-up: traces the signature once
            assert status == 200
            row = {"batch_chunk_size": chunk_size, "rows": len(batch), "idle": _proc_memory_mb(proc.pid)}
            for attempt in ("first", "second"):
                status, body, seconds = _post(url, {"instances": batch})
                assert status == 200 and len(body["predictions"]) == len(batch), (status, str(body)[:300])
                row[attempt] = {"seconds": round(seconds, 2), **_proc_memory_mb(proc.pid)}
            status, body, seconds = _post(url, {"instances": ["hola"] * 20000})
            row["over_limit"] = {"status": status, "seconds": round(seconds, 3), "error": body.get("error")}
            proc.send_signal(signal.SIGTERM)
            row["exit_status"] = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", help="translator run directory (default: random transformer_seed model)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--max-beam-size", type=int, default=8, help="beam branches in the export (default 8)")
    parser.add_argument("--no-jit", action="store_true", help="skip the jit_compile=True export")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--max-request", action="store_true",
                        help="measure maximum-size requests through a kerasplm serve subprocess instead")
    parser.add_argument("--max-batch-size", type=int, default=1024, help="rows of the maximum request (default 1024)")
    parser.add_argument("--chunk-sizes", type=int, nargs="+", default=[64, 1024],
                        help="--batch-chunk-size values to compare (default 64 and 1024 = one call)")
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=[],
                        help="also the in-process throughput (sentences/s) of requests of these many sentences")
    parser.add_argument("--batch-repeats", type=int, default=3, help="timed calls per --batch-sizes entry")
    return parser


def measure_exports(args, translator, model_desc):
    """Latency rows of the exports (and the --batch-sizes throughput of the first export); the results dict."""
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
            if args.batch_sizes and "batches" not in results:
                results["batches"] = batch_throughput(path, args.batch_sizes, args.batch_repeats)
    return results


def runner_rows(argv=()):
    """``benchmarks.run``'s rows (absolute: kerasplm serving has no anchor): p50 latency of one sentence through
    the SavedModel signature and through ``kerasplm serve`` (REST), and the signature's sentences/s at each
    --batch-sizes entry (default 1, 8, 32), for the jit_compile=False export."""
    args = build_parser().parse_args(["--no-jit", "--batch-sizes", "1", "8", "32", *argv])
    translator, model_desc = build_translator(args.run)
    results = measure_exports(args, translator, model_desc)
    config = {"model": model_desc, "requests": args.requests, "warmup": args.warmup, "export": "jit_compile=False"}
    rows = [{"name": f"{r['path']} p50", "kerasplm": r["p50_ms"], "anchor": None, "unit": "ms",
             "config": {**config, "p99_ms": r["p99_ms"]}} for r in results["rows"]]
    rows += [{"name": f"signature, batch {b['batch']}", "kerasplm": b["sentences_per_s"], "anchor": None,
              "unit": "sentences/s", "config": {**config, "batch": b["batch"], "repeats": args.batch_repeats}}
             for b in results.get("batches", [])]
    return rows


def main(argv=None):
    args = build_parser().parse_args(argv)
    translator, model_desc = build_translator(args.run)
    if args.max_request:
        return max_request_main(args, translator, model_desc)
    results = measure_exports(args, translator, model_desc)

    print(f"\nServing latency, one sentence per request ({model_desc}; {args.requests} requests after "
          f"{args.warmup} warm-up; {results['machine']['cpus_usable']} CPUs, TF {tf.__version__})\n")
    print("| export | path | p50 ms | p99 ms | mean ms |")
    print("|---|---|---:|---:|---:|")
    for row in results["rows"]:
        print(f"| {row['export']} | {row['path']} | {row['p50_ms']} | {row['p99_ms']} | {row['mean_ms']} |")
    for name, info in results["exports"].items():
        print(f"\n{name}: export {info['export_s']} s, first call {info['first_call_s']} s, "
              f"{info['generated_tokens']} generated tokens per request")
    for row in results.get("batches", []):
        print(f"signature, {row['batch']} sentences per request: {row['sentences_per_s']} sentences/s")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2, ensure_ascii=False)
    return 0


def max_request_main(args, translator, model_desc):
    results = {"model": model_desc, "machine": machine_info(), "max_batch_size": args.max_batch_size}
    with tempfile.TemporaryDirectory(prefix="bench_serving_") as tmp:
        base = os.path.join(tmp, "translator")
        export_translator(translator, base, max_beam_size=args.max_beam_size)
        results["rows"] = bench_max_request(base, args.chunk_sizes, args.max_batch_size, tmp)
    print(f"\nMaximum-size request ({args.max_batch_size} sentences, {model_desc}; "
          f"{results['machine']['cpus_usable']} CPUs, TF {tf.__version__})\n")
    print("| rows per call | 1st request s | 2nd request s | RSS idle MiB | RSS after 1st | after 2nd | peak MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in results["rows"]:
        print(f"| {row['batch_chunk_size']} | {row['first']['seconds']} | {row['second']['seconds']} | "
              f"{row['idle']['rss_mb']} | {row['first']['rss_mb']} | {row['second']['rss_mb']} | "
              f"{row['second']['peak_mb']} |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
