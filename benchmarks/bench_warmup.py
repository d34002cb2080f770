"""First-request latency after a version loads, with and without TF Serving's warmup records.

One export of a translator (``--run``, else ``transformer_seed`` with random weights, as ``bench_serving.py``), served
twice by a real ``kerasplm serve`` process per repetition: as exported (``assets.extra/tf_serving_warmup_requests``
replayed while the version loads) and as a copy without the warmup file. Per start: the time until the server
answers (load + warmup), the first and the second ``serving_default`` request (one sentence, REST) and the first
``translate`` request with beam size 4. The two variants alternate, ``--repeats`` times each, in one process run.

    python benchmarks/bench_warmup.py [--run runs/translator] [--repeats 3] --out warmup.json
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from benchmarks.bench_serving import SENTENCE, build_translator  # noqa: E402
from benchmarks.common import machine_info  # noqa: E402
from kerasplm.models.translator import export_translator  # noqa: E402

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _post(url, payload):
    data = json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        body = json.loads(response.read())
    return body, time.perf_counter() - start


def serve_once(base, log_path):
    """Start ``kerasplm serve`` on ``base``; the seconds until it serves, and the latencies of its first requests."""
    started = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kerasplm.cli", "serve", "--model-base-path", base, "--model-name", "translator",
             "--rest_api_port", "0", "--port", "off", "--quiet"],
            stdout=subprocess.DEVNULL, stderr=log, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    try:
        url = None
        while url is None and proc.poll() is None and time.perf_counter() - started < 600:
            with open(log_path, "rb") as f:
                match = re.search(rb"Serving (http://127\.0\.0\.1:\d+)/", f.read())
            url = match.group(1).decode() + "/v1/models/translator:predict" if match else None
            time.sleep(0.05)
        if url is None:
            raise RuntimeError(f"kerasplm serve did not start; see {log_path}")
        row = {"ready_s": time.perf_counter() - started}
        first, row["first_s"] = _post(url, {"instances": [SENTENCE]})
        second, row["second_s"] = _post(url, {"instances": [SENTENCE]})
        assert first == second, (first, second)
        _, row["first_beam4_s"] = _post(url, {"signature_name": "translate",
                                              "instances": [{"inputs": SENTENCE, "beam_size": 4, "max_length": 0}]})
        return row
    finally:
        proc.kill()
        proc.wait()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", help="translator run directory (default: random transformer_seed model)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    translator, model_desc = build_translator(args.run)
    tmp = tempfile.mkdtemp(prefix="bench_warmup_")
    try:
        warm = os.path.join(tmp, "warm")
        version = export_translator(translator, warm)
        cold = os.path.join(tmp, "cold")
        shutil.copytree(warm, cold)
        os.remove(os.path.join(cold, os.path.basename(version), "assets.extra", "tf_serving_warmup_requests"))
        rows = {"with warmup records": [], "without": []}
        for i in range(args.repeats):
            for name, base in (("with warmup records", warm), ("without", cold)):
                rows[name].append(serve_once(base, os.path.join(tmp, f"serve_{i}.log")))
                print(name, json.dumps({k: round(v, 3) for k, v in rows[name][-1].items()}), flush=True)
        summary = {name: {key: round(float(np.median([r[key] for r in runs])), 3) for key in runs[0]}
                   for name, runs in rows.items()}
        result = {"benchmark": "bench_warmup", "model": model_desc, "repeats": args.repeats,
                  "median": summary, "runs": rows, "machine": machine_info()}
        print(json.dumps(result["median"], indent=1))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
