"""Request batching in ``kerasplm serve``: 32 concurrent clients sending one sentence per request, with and
without ``--enable_batching``, for a translator export and a classifier export.

Each side is a real ``kerasplm serve`` subprocess (REST only, both models from one ``model_config_list``);
the clients are threads of this process, each sending ``--requests-per-client`` requests one after the
other (one sentence each, ``{"instances": [sentence]}``) after a warm-up.  Reported per model and side:
throughput (requests per second over the whole run), p50 / p99 latency, and for the batching side the
server's own batching metrics (signature calls made, mean rows per call).  Answers are compared across the
sides: strings (translations, labels) must be equal, numbers (probabilities) may differ in the last bits
(a merged call pads to a longer row and runs at another batch size); the largest difference is reported.

Models: ``--translator-run`` (a trained translator run), else a ``transformer_seed`` model with random
weights (as in ``bench_serving.py``); ``--classifier-run`` (a ``kerasplm finetune bert-classifier`` run),
else a random BERT (``--bert-layers`` x ``--bert-hidden``) fine-tuned for one step on toy labels.  The
batching parameters are written to a TF Serving text-format file (``--max-batch-size``,
``--batch-timeout-micros``, ``--num-batch-threads``).

    python benchmarks/bench_batching.py [--clients 32] [--requests-per-client 8] --out batching.json
    python benchmarks/bench_batching.py --smoke      # tiny models and counts: checks the script runs
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.common import load_average, machine_info  # noqa: E402

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def sentences(n):
    """``n`` distinct Spanish sentences from the bundled Tatoeba sample (one per client)."""
    from kerasplm.data import read_parallel_tsv, sample_path

    sources, _ = read_parallel_tsv(sample_path("spa-eng-train.tsv"), src_col=1, tgt_col=0)
    return list(dict.fromkeys(sources))[:n]


def export_translator_model(run, base, smoke):
    from benchmarks.bench_serving import build_translator  # the serving benchmark's translator (run or random weights)
    from kerasplm.models.translator import export_translator

    translator, desc = build_translator(run)
    export_translator(translator, base, max_beam_size=2 if smoke else 4)
    return desc


def export_classifier_model(run, base, root, layers, hidden, smoke):
    """A classifier export from ``run``, else from a random BERT fine-tuned one step on toy labels."""
    from kerasplm.export.classifier import export_classifier

    if run:
        export_classifier(run, base)
        return f"run {run}"
    from kerasplm.models.bert.convert import convert_bert_to_run, save_tf_bert
    from kerasplm.models.bert.classifier_job import finetune_bert_classifier
    from kerasplm.models.bert.backbone import BertBackbone
    from kerasplm.text import write_vocab

    texts = sentences(400)
    words = sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})
    vocab = BERT_SPECIALS + words
    if smoke:
        layers, hidden = 1, 32
    source = os.path.join(root, "bert_google")
    keras.utils.set_random_seed(0)
    save_tf_bert(BertBackbone(vocab_size=len(vocab), num_layers=layers, hidden_size=hidden,
                              num_heads=max(1, hidden // 64), intermediate_size=4 * hidden, max_positions=64), source)
    write_vocab(vocab, os.path.join(source, "vocab.txt"))
    init = convert_bert_to_run(source, os.path.join(root, "bert_run")).path
    train = os.path.join(root, "train.tsv")
    with open(train, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for i, text in enumerate(texts[:64]):
            f.write(f"{text}\t{['negative', 'positive'][i % 2]}\n")
    out = os.path.join(root, "classifier_run")
    finetune_bert_classifier(out, log=lambda *a: None, steps=1, train=train, init=init, batch_size=8,
                             max_length=64, verbose=0, seed=0)
    export_classifier(out, base)
    return f"random BERT {layers}x{hidden}, one fine-tuning step"


def start_server(config, batching_file, log_path):
    """A ``kerasplm serve`` subprocess (REST on a free port); returns (process, base URL)."""
    args = [sys.executable, "-m", "kerasplm.cli", "serve", "--model_config_file", config, "--rest_api_port", "0",
            "--port", "off", "--quiet"]
    if batching_file:
        args += ["--enable_batching", "--batching_parameters_file", batching_file]
    log = open(log_path, "wb")
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": REPO})
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        with open(log_path, "rb") as f:
            text = f.read()
        match = re.search(rb"Serving (http://127\.0\.0\.1:\d+)/", text)
        if match:
            return proc, match.group(1).decode()
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"kerasplm serve did not start; see {log_path}")


def post(url, payload, timeout=600):
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def batching_metrics(url):
    """``(signature calls, rows per call)`` from the server's batching metrics (None without batching)."""
    with urllib.request.urlopen(f"{url}/monitoring/prometheus/metrics", timeout=60) as response:
        text = response.read().decode()
    calls = re.search(r"^:tensorflow:serving:batching_session:wrapped_run_count (\S+)$", text, re.M)
    rows = re.search(r"^:tensorflow:serving:batching_session:processed_batch_size_sum (\S+)$", text, re.M)
    batches = re.search(r"^:tensorflow:serving:batching_session:processed_batch_size_count (\S+)$", text, re.M)
    if not calls:
        return None
    return float(calls.group(1)), float(rows.group(1)), float(batches.group(1))


def run_clients(url, model, texts, requests_per_client):
    """Every client (one per text) sends its sentence ``requests_per_client`` times, all clients at once."""
    endpoint = f"{url}/v1/models/{model}:predict"
    latencies, answers, errors = [], {}, []
    lock = threading.Lock()
    barrier = threading.Barrier(len(texts))

    def client(text):
        barrier.wait()
        for _ in range(requests_per_client):
            start = time.perf_counter()
            try:
                out = post(endpoint, {"instances": [text]})["predictions"][0]
            except (urllib.error.URLError, OSError, KeyError) as e:
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                latencies.append(time.perf_counter() - start)
                answers[text] = out

    threads = [threading.Thread(target=client, args=(t,)) for t in texts]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    ms = np.array(latencies) * 1000.0
    return {"requests": len(latencies), "errors": len(errors), "wall_s": round(wall, 2),
            "throughput_rps": round(len(latencies) / wall, 2),
            "p50_ms": round(float(np.percentile(ms, 50)), 1) if len(ms) else None,
            "p99_ms": round(float(np.percentile(ms, 99)), 1) if len(ms) else None}, answers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--translator-run", help="translator run directory (default: random transformer_seed)")
    parser.add_argument("--classifier-run", help="bert-classifier run directory (default: random BERT, one step)")
    parser.add_argument("--bert-layers", type=int, default=4)
    parser.add_argument("--bert-hidden", type=int, default=256)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests-per-client", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2, help="requests per client before measuring")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--batch-timeout-micros", type=int, default=5000)
    parser.add_argument("--num-batch-threads", type=int, default=1)
    parser.add_argument("--models", nargs="+", default=["translator", "classifier"])
    parser.add_argument("--smoke", action="store_true", help="tiny models, 4 clients, 1 request each")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.clients, args.requests_per_client, args.warmup = 4, 1, 1

    results = {"machine": machine_info(), "load_average_before": load_average(), "clients": args.clients,
               "requests_per_client": args.requests_per_client,
               "batching_parameters": {"max_batch_size": args.max_batch_size,
                                       "batch_timeout_micros": args.batch_timeout_micros,
                                       "num_batch_threads": args.num_batch_threads},
               "models": {}, "rows": []}
    texts = sentences(args.clients)
    with tempfile.TemporaryDirectory(prefix="bench_batching_") as tmp:
        entries = []
        for model in args.models:
            base = os.path.join(tmp, model)
            if model == "translator":
                results["models"][model] = export_translator_model(args.translator_run, base, args.smoke)
            else:
                results["models"][model] = export_classifier_model(args.classifier_run, base, tmp, args.bert_layers,
                                                                   args.bert_hidden, args.smoke)
            entries.append(f'  config {{ name: "{model}" base_path: "{model}" }}')
        config = os.path.join(tmp, "models.config")
        with open(config, "w") as f:
            f.write("model_config_list {\n" + "\n".join(entries) + "\n}\n")
        batching_file = os.path.join(tmp, "batching.config")
        with open(batching_file, "w") as f:
            f.write(f"max_batch_size {{ value: {args.max_batch_size} }}\n"
                    f"batch_timeout_micros {{ value: {args.batch_timeout_micros} }}\n"
                    f"num_batch_threads {{ value: {args.num_batch_threads} }}\n"
                    f"max_enqueued_batches {{ value: {max(10, 4 * args.clients)} }}\n")
        answers = {}
        for side, file in (("unbatched", None), ("batching", batching_file)):
            proc, url = start_server(config, file, os.path.join(tmp, f"serve_{side}.log"))
            try:
                for model in args.models:
                    if args.warmup:
                        run_clients(url, model, texts, args.warmup)
                    before = batching_metrics(url)
                    row, answers[(side, model)] = run_clients(url, model, texts, args.requests_per_client)
                    after = batching_metrics(url)
                    if after is not None:
                        calls = after[0] - (before[0] if before else 0)
                        rows = after[1] - (before[1] if before else 0)
                        batches = after[2] - (before[2] if before else 0)
                        row.update(signature_calls=int(calls), mean_rows_per_call=round(rows / max(batches, 1), 2))
                    row.update(model=model, side=side)
                    results["rows"].append(row)
                    print(json.dumps(row), flush=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    proc.kill()
        for model in args.models:  # batching must not change an answer (floats: beyond the last bits)
            results.setdefault("answers", {})[model] = compare(answers[("unbatched", model)],
                                                               answers[("batching", model)])
    results["load_average_after"] = load_average()

    print(f"\nRequest batching, {args.clients} concurrent clients x {args.requests_per_client} requests, one sentence "
          f"each ({results['machine']['cpus_usable']} CPUs, TF {tf.__version__})\n")
    print("| model | side | req/s | p50 ms | p99 ms | calls | rows/call |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in results["rows"]:
        print(f"| {row['model']} | {row['side']} | {row['throughput_rps']} | {row['p50_ms']} | {row['p99_ms']} | "
              f"{row.get('signature_calls', row['requests'])} | {row.get('mean_rows_per_call', 1)} |")
    print("\nanswers with and without batching:", json.dumps(results["answers"]))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2, ensure_ascii=False)
    return 0 if all(a["strings_equal"] and a["max_abs_diff"] < 1e-4 for a in results["answers"].values()) else 1


def _leaves(value):
    if isinstance(value, dict):
        for key in sorted(value):
            yield from _leaves(value[key])
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def compare(unbatched: dict, batched: dict) -> dict:
    """Strings (translations, labels) must be equal; numbers (probabilities) may differ in the last bits: a
    merged call pads to a longer row and runs at another batch size, which reorders float operations."""
    strings_equal, diff = set(unbatched) == set(batched), 0.0
    for text in set(unbatched) & set(batched):
        a, b = list(_leaves(unbatched[text])), list(_leaves(batched[text]))
        if len(a) != len(b):
            strings_equal = False
            continue
        for x, y in zip(a, b):
            if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                diff = max(diff, abs(x - y))
            elif x != y:
                strings_equal = False
    return {"strings_equal": strings_equal, "max_abs_diff": diff}


if __name__ == "__main__":
    sys.exit(main())
