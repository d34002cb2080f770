"""What oversized requests cost a real ``kerasplm serve``: time to the answer, its size, the server's peak memory.

A random-weight ELMo (``--preset``, default ``elmo_tiny``) is exported and served by ``kerasplm serve`` (REST only,
the server's default caps), both run from the checkout ``--repo`` (default: this one; give an older checkout to
measure the code before the caps). Requests, in this order, each timed at the client:

* ``report``: the request of the report: one 2,000-word sentence and 63 empty ones;
* ``at_the_row_cap``: 64 sentences of 255 words (within the export's per-sentence cap);
* ``many_rows``: 1,024 sentences of 255 words (an answer of ~134 MB of tensors for elmo_tiny).

Per request: HTTP status, seconds, answer bytes, the first 150 characters of an error, and the server's peak
resident memory (VmHWM of /proc/PID/status) after it, against the peak after loading.

    python benchmarks/bench_serving_caps.py [--repo OLD_CHECKOUT] [--preset elmo_tiny] [--only report ...] [--out caps.json]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from benchmarks.common import machine_info  # noqa: E402

EXPORT = """
import sys, keras
from kerasplm.models.elmo.export import export_elmo
from kerasplm.models.elmo.model import ElmoBiLM
from kerasplm.models.elmo.runs import Elmo
keras.utils.set_random_seed(0)
export_elmo(Elmo(ElmoBiLM.from_preset(sys.argv[2], dropout=0.0), ["<S>", "</S>", "<UNK>"]), sys.argv[1])
"""

REQUESTS = {
    "report": ["w " * 2000] + [""] * 63,
    "at_the_row_cap": [" ".join(["w"] * 255)] * 64,
    "many_rows": [" ".join(["w"] * 255)] * 1024,
}


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) / 1024


def post(url, body):
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=1200) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    seconds = time.perf_counter() - start
    error = json.loads(raw).get("error", "")[:150] if status != 200 else ""
    return {"status": status, "seconds": round(seconds, 3), "answer_bytes": len(raw), "error": error}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=os.path.join(HERE, ".."), help="the checkout whose export and server run")
    parser.add_argument("--preset", default="elmo_tiny")
    parser.add_argument("--only", nargs="+", choices=list(REQUESTS), help="send only these requests")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    repo = os.path.abspath(args.repo)
    env = {**os.environ, "PYTHONPATH": repo, "TF_CPP_MIN_LOG_LEVEL": "2"}
    tmp = tempfile.mkdtemp(prefix="bench_caps_")
    base = os.path.join(tmp, "elmo")
    subprocess.run([sys.executable, "-c", EXPORT, base, args.preset], check=True, cwd=repo, env=env)
    log_path = os.path.join(tmp, "serve.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "kerasplm.cli", "serve", "--model-base-path", base,
                                 "--model-name", "elmo", "--rest_api_port", "0", "--port", "off", "--quiet"],
                                stdout=subprocess.DEVNULL, stderr=log, cwd=repo, env=env)
    try:
        url, started = None, time.perf_counter()
        while url is None and proc.poll() is None and time.perf_counter() - started < 600:
            with open(log_path, "rb") as f:
                match = re.search(rb"Serving (http://127\.0\.0\.1:\d+)/", f.read())
            url = match.group(1).decode() + "/v1/models/elmo:predict" if match else None
            time.sleep(0.05)
        if url is None:
            raise RuntimeError(f"kerasplm serve did not start; see {log_path}")
        post(url, {"instances": ["a warm up sentence"]})
        rows = {"loaded": {"peak_rss_mb": round(peak_rss_mb(proc.pid), 1)}}
        for name, sentences in REQUESTS.items():
            if args.only and name not in args.only:
                continue
            rows[name] = post(url, {"instances": sentences})
            rows[name]["peak_rss_mb"] = round(peak_rss_mb(proc.pid), 1)
            print(name, json.dumps(rows[name]), flush=True)
    finally:
        proc.kill()
        proc.wait()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    result = {"benchmark": "bench_serving_caps", "preset": args.preset, "repo_commit": commit.strip(),
              "requests": rows, "machine": machine_info()}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
