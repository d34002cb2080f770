"""One runner for every side-by-side comparison: one table of kerasplm against its anchors, MFU and peak memory.

    python -m benchmarks.run [--quick] [--only NAME ...] [--json FILE] [--compare OLD.json [--tolerance 0.1]]
    python -m benchmarks.run --list

Each comparison of ``REGISTRY`` runs in a child process of its own (``python -m benchmarks.run --in-process
--only NAME``), so its TensorFlow state, thread pools and peak memory are its own; inside it, the bench script's
``runner_rows`` runs kerasplm and the anchor side by side (built first, then taking turns), and the child
measures the dense matmul peak in the same process, before and after the comparison (the higher reading). The
parent collects the children's JSON. Training comparisons run on the CPU kernels kerasplm's training jobs use
(``TF_ENABLE_ONEDNN_OPTS=1`` unless the environment sets it), the others on TensorFlow's default, as ``kerasplm
serve`` does.

Per row: the kerasplm figure, the anchor's, ``ratio`` = kerasplm over the anchor in "higher is better" terms
(throughputs: kerasplm / anchor; latencies in ms: anchor / kerasplm, see ``UNITS``), MFU for training rows
(``benchmarks.mfu``: the model's training FLOP/s over the float32 matmul peak, bfloat16 for bfloat16 rows) and
``peak_rss_mb``, the child process's peak resident memory (``ru_maxrss``) after its comparison, i.e. of all the
sides it held. A comparison whose anchor library is not installed (keras-hub, transformers/torch) gives rows
marked skipped with the reason. ``--compare OLD.json`` marks rows whose ratio fell by more than ``--tolerance``
(a fraction) against the same-named row of an earlier ``--json`` and then exits with status 1; a comparison that
failed exits with status 2.

``--quick`` runs each comparison on its small configuration (fewer rounds, shorter generations, fewer batch
sizes): meant to finish within 20 minutes on 2 idle cores (11.6 minutes on 2026-12-06's AVX-512 machine). Its
training comparisons still take the median of 4–5 rounds per side, so that one slow round cannot flip a row: with 2
rounds of one step, one idle run put BERT MLM with XLA at 0.92x keras-hub where a rerun of the same code gave 1.17x
(benchmarks/RESULTS.md, 2026-12-06). The figures of a quick run are noisier than a full run's; compare quick runs
with quick runs. ``--timeout`` (default 30 minutes) kills a comparison that hangs and reports it failed.
"""
import argparse
import collections
import dataclasses
import datetime
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import mfu as mfu_lib  # noqa: E402
from benchmarks.common import child_environment  # noqa: E402

# Unit -> True when a larger figure is better. The ratio is always "kerasplm is this many times better".
UNITS = {"tokens/s": True, "target tokens/s": True, "new tokens/s": True, "examples/s": True, "requests/s": True,
         "sentences/s": True, "ms": False}


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One side-by-side comparison: ``module.function(argv)`` returns its rows (see ``complete_row``)."""
    name: str
    module: str
    anchor: str
    unit: str
    training: bool
    description: str
    quick: tuple = ()
    full: tuple = ()
    function: str = "runner_rows"
    peak_matmul: str = None  # "module:function" building the peak's matmul (default: TensorFlow's)
    hidden: bool = False     # not run by default (the runner's own test entry)


REGISTRY = {c.name: c for c in (
    Comparison("translator_train", "benchmarks.bench_train", "the seed's train_step (tf.function)",
               "target tokens/s", True, "transformer_seed, batch 64, length 40, Trainer vs the seed's train_step",
               quick=("--rounds", "5", "--steps-per-turn", "2", "--precisions", "float32"), full=("--rounds", "10")),
    Comparison("translator_decode", "benchmarks.bench_decode", "the seed's evaluate() (eager)", "tokens/s", False,
               "transformer_seed, batch 1: cached greedy and beam (K=4) vs the seed's evaluate()",
               quick=("--tokens", "20", "--seed-tokens", "20", "--repeats", "2"), full=()),
    Comparison("bert_mlm_train", "benchmarks.bench_bert_pretrain", "keras-hub BertMaskedLM; HF BertForMaskedLM",
               "tokens/s", True, "bert_mini (L4 H256), seq 128, batch 16, with and without XLA",
               quick=("--rounds", "5", "--steps", "2", "--warmup", "2"), full=()),
    Comparison("bert_base_memory", "benchmarks.bench_bert_pretrain", "none (absolute; peak RSS target 8 GB)",
               "tokens/s", True, "bert_base (L12 H768) pretraining step, seq 128, batch 32: tokens/s and peak memory",
               quick=("--steps", "2"), full=("--steps", "5"), function="memory_rows"),
    Comparison("bert_finetune", "benchmarks.bench_finetune", "keras-hub BertTextClassifier", "examples/s", True,
               "MiniLM-L6-H384 classifier, seq 128, batch 32, with and without XLA",
               quick=("--rounds", "4", "--steps", "1", "--warmup", "1"), full=()),
    Comparison("gpt_train", "benchmarks.bench_gpt_train", "keras-hub GPT2CausalLM; HF GPT2LMHeadModel", "tokens/s",
               True,
               "GPT-2 layout L6 H512, seq 256, batch 8, with and without XLA",
               quick=("--rounds", "4", "--steps", "1", "--warmup", "1"), full=()),
    Comparison("gpt_generate", "benchmarks.bench_generate", "keras-hub GPT2CausalLM.generate; HF generate",
               "new tokens/s", False, "GPT-2 layout L6 H512, greedy, batch 1, 4 and 32",
               quick=("--batch", "1", "4", "--new", "32", "--rounds", "3", "--bandwidth-gib", "0"),
               full=("--batch", "1", "4", "32", "--bandwidth-gib", "0")),
    Comparison("elmo_train", "benchmarks.bench_elmo", "a plain Keras Model.fit of the same network", "tokens/s",
               True, "elmo_tiny biLM, vocab 2000, batch 32, window 20",
               quick=("--rounds", "4", "--steps", "2"), full=()),
    Comparison("rnn_seq2seq_train", "benchmarks.bench_rnn_seq2seq", "the seed's GRU + attention in plain Keras",
               "target tokens/s", True, "gru_bahdanau, batch 64, lengths 5-20",
               quick=("--rounds", "4", "--steps", "1", "--warmup", "1"), full=()),
    Comparison("serving", "benchmarks.bench_serving", "none (absolute latency)", "ms", False,
               "transformer_seed export, one sentence per request: SavedModel signature and kerasplm serve (REST)",
               quick=("--requests", "20", "--warmup", "3", "--no-jit", "--max-beam-size", "1"), full=()),
    Comparison("selftest", "benchmarks.run", "numpy einsum", "tokens/s", True,
               "the runner's own check: tiny numpy matmuls, seconds, no TensorFlow",
               function="selftest_rows", peak_matmul="benchmarks.run:numpy_matmul", hidden=True),
)}


# ----------------------------------------------------------------------------------------------------- rows

def ratio(kerasplm, anchor, unit):
    """kerasplm over the anchor in "higher is better" terms (``UNITS``); None when either figure is missing."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}; known: {sorted(UNITS)}")
    if not kerasplm or not anchor:
        return None
    return kerasplm / anchor if UNITS[unit] else anchor / kerasplm


def complete_row(comparison, row, peak_rss_mb, peaks):
    """The runner's row from one row that a comparison function returned.

    ``row``: ``name`` (the row's label within the comparison, "" for a single row), ``kerasplm`` and ``anchor``
    figures (``anchor`` None for absolute rows), ``unit`` (default the comparison's), ``config``, and optionally
    ``skipped`` (the reason), ``training_flops_per_unit`` (model training FLOPs per unit of the figure, e.g.
    per token: ``mfu.training_flops_per_token``) and ``dtype`` (the compute dtype, default float32).
    ``peaks``: {dtype: matmul FLOP/s} measured in the same process."""
    unit = row.get("unit", comparison.unit)
    name = f"{comparison.name}/{row['name']}" if row.get("name") else comparison.name
    out = {"name": name, "kerasplm": row.get("kerasplm"), "anchor": row.get("anchor"), "ratio": None, "unit": unit,
           "mfu": None, "peak_rss_mb": round(peak_rss_mb, 1)}
    if row.get("skipped"):
        return {**out, "peak_rss_mb": None, "skipped": row["skipped"], "config": row.get("config", {})}
    out["ratio"] = ratio(out["kerasplm"], out["anchor"], unit)
    if comparison.training and row.get("training_flops_per_unit"):
        dtype = row.get("dtype", "float32")
        peak = peaks.get(dtype) or peaks.get("float32")
        out["mfu"] = mfu_lib.mfu(row["training_flops_per_unit"], out["kerasplm"], peak)
        out["peak_flops"] = peak
        out["training_flops_per_unit"] = row["training_flops_per_unit"]
    for key in ("kerasplm_side", "anchor_side"):
        if key in row:
            out[key] = row[key]
    out["config"] = row.get("config", {})
    return out


def peak_rss_mb():
    """This process's peak resident memory so far in MB of 2**20 bytes (``ru_maxrss``: KiB on Linux, bytes on
    macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _load(spec):
    module, _, function = spec.partition(":")
    return getattr(importlib.import_module(module), function)


def run_in_process(comparison, quick):
    """Runs one comparison in this process; returns (rows, machine info or None)."""
    argv = list(comparison.quick if quick else comparison.full)
    peaks = {}
    matmul = _load(comparison.peak_matmul) if comparison.peak_matmul else None

    def measure_peaks():
        return {dtype: mfu_lib.best_matmul_peak(dtype, matmul=matmul) for dtype in mfu_lib.peak_dtypes()}

    if comparison.training:
        # Before the comparison: once keras-hub's XLA sides had run, the same process measured 134 GFLOP/s where a
        # fresh one measures 210 (an MFU of 102%): the peak is the machine's, not what the sides left behind.
        peaks = measure_peaks()
    rows = _load(f"{comparison.module}:{comparison.function}")(argv)
    if comparison.training:
        # And after it, keeping the higher reading: one reading before the GPT row measured 128 GFLOP/s on a machine
        # whose other rows read 154-201 (an MFU of 117%). A low reading inflates MFU; a high one cannot.
        peaks = {dtype: max(peaks[dtype], value) for dtype, value in measure_peaks().items()}
    rss = peak_rss_mb()
    machine = None
    if "tensorflow" in sys.modules:
        from benchmarks.common import machine_info
        machine = machine_info()
    return [complete_row(comparison, r, rss, peaks) for r in rows], \
        {"machine": machine, "matmul_peaks": peaks, "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS")}


def run_child(comparison, quick, log=sys.stderr, timeout=None):
    """Runs one comparison in a child process; returns (rows, info). A failed child, or one still running
    after ``timeout`` seconds (then killed), gives one error row."""
    import threading

    with tempfile.TemporaryDirectory(prefix="benchmarks_run_") as tmp:
        out = os.path.join(tmp, "rows.json")
        cmd = [sys.executable, "-m", "benchmarks.run", "--in-process", "--only", comparison.name, "--json", out]
        if quick:
            cmd.append("--quick")
        env = child_environment()
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        if comparison.training:
            # The CPU kernels kerasplm's training jobs run on (kerasplm.cli.choose_cpu_kernels: oneDNN's); the other
            # rows keep TensorFlow's default, as serve and translate do. An explicit setting applies to every row.
            env.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
        tail = collections.deque(maxlen=20)
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        timer = threading.Timer(timeout, proc.kill) if timeout else None
        if timer:
            timer.start()
        for line in proc.stdout:
            tail.append(line.rstrip())
            if log is not None:
                print(f"  [{comparison.name}] {line.rstrip()}", file=log, flush=True)
        status = proc.wait()
        seconds = time.perf_counter() - start
        if timer:
            timer.cancel()
            if status != 0 and seconds >= timeout:
                tail.append(f"killed after the --timeout of {timeout:g} s")
        if status == 0 and os.path.exists(out):
            with open(out) as f:
                result = json.load(f)
            return result["rows"], {**result.get("info", {}), "seconds": round(seconds, 1)}
    last = next((line for line in reversed(tail) if line.strip()), "no output")
    return [{"name": comparison.name, "kerasplm": None, "anchor": None, "ratio": None, "unit": comparison.unit,
             "mfu": None, "peak_rss_mb": None, "error": f"exit status {status}: {last}"}], \
        {"seconds": round(seconds, 1)}


# ----------------------------------------------------------------------------------------------------- compare

def _merit(row):
    """(what --compare judges, higher is better; its key): the ratio; for a row without an anchor (absolute
    figures, comparable only on the same machine) the kerasplm figure itself, inverted for latencies;
    (None, None) for a skipped or failed row."""
    if row.get("ratio") is not None:
        return row["ratio"], "ratio"
    figure = row.get("kerasplm")
    if row.get("anchor") is not None or not figure or row.get("unit") not in UNITS:
        return None, None
    return (figure if UNITS[row["unit"]] else 1.0 / figure), "kerasplm"


def compare(rows, old_rows, tolerance):
    """Marks each row whose ratio fell below ``(1 - tolerance)`` × the same-named old row's ratio
    (``regressed``: True, ``old_ratio``); a row without an anchor is judged on its own figure in the same way
    (``old_kerasplm``). Rows missing on either side, skipped or failed, are not judged. Returns the names of
    the regressed rows."""
    if not 0 <= tolerance < 1:
        raise ValueError(f"--tolerance must be in [0, 1), got {tolerance}")
    old = {r["name"]: r for r in old_rows}
    regressed = []
    for row in rows:
        (now, key), (then, old_key) = _merit(row), _merit(old.get(row["name"], {}))
        if now is None or then is None or key != old_key:
            continue
        row[f"old_{key}"] = old[row["name"]][key]
        row["regressed"] = now < then * (1 - tolerance)
        if row["regressed"]:
            regressed.append(row["name"])
    return regressed


# ----------------------------------------------------------------------------------------------------- output

def _figure(x):
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}"


def format_table(rows, markdown=False):
    """The rows as a fixed-width text table (one line per row, a header and a rule); ``markdown``: as a
    Markdown table (for benchmarks/RESULTS.md)."""
    headers = ("name", "kerasplm", "anchor", "ratio", "unit", "MFU", "peak RSS MB", "note")
    lines = []
    for r in rows:
        note = r.get("skipped") and f"skipped: {r['skipped']}" or r.get("error") and f"FAILED: {r['error']}" or ""
        was = f"was {r['old_ratio']:.2f}x" if "old_ratio" in r else \
            f"was {_figure(r['old_kerasplm'])}" if "old_kerasplm" in r else ""
        if r.get("regressed"):
            note = f"REGRESSED ({was})"
        elif was:
            note = was
        lines.append((r["name"], _figure(r.get("kerasplm")), _figure(r.get("anchor")),
                      "-" if r.get("ratio") is None else f"{r['ratio']:.2f}x", r.get("unit", ""),
                      "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%",
                      "-" if r.get("peak_rss_mb") is None else f"{r['peak_rss_mb']:,.0f}", note))
    right = {1, 2, 3, 5, 6}
    if markdown:
        rule = ["---:" if i in right else "---" for i in range(len(headers))]
        return "\n".join("| " + " | ".join(c.replace("|", "/") for c in cells) + " |"
                         for cells in [headers, rule, *lines])
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(headers)]

    def fmt(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return "\n".join([fmt(headers), fmt(["-" * w for w in widths])] + [fmt(line) for line in lines])


def git_commit():
    """HEAD's commit of this checkout (with "-dirty" when tracked files changed); None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def machine_summary():
    """The parent's machine description (no TensorFlow import: the children report library versions)."""
    from benchmarks.common import machine_info
    return {k: v for k, v in machine_info(libraries=False).items() if k != "date"}


# ----------------------------------------------------------------------------------------------------- selftest

def numpy_matmul(size, dtype):
    """A ``measured_matmul_peak`` matmul in numpy (the selftest's peak; no TensorFlow)."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((size, size)).astype(dtype if dtype == "float32" else "float32")
    return lambda: a @ a


def selftest_rows(argv):
    """The runner's own test entry: ``a @ w`` (float32, 256 × 64 @ 64 × 64) timed against ``np.einsum`` of
    the same product, one "token" per row of ``a``; and a row whose anchor library is missing."""
    import numpy as np

    from benchmarks.common import library_or_reason, interleaved

    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((256, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    timings = interleaved({"kerasplm": lambda: a @ w, "anchor": lambda: np.einsum("ij,jk->ik", a, w)},
                          rounds=2, steps_per_round=3, quiet=True)
    rate = {side: len(a) / t["seconds_per_step"] for side, t in timings.items()}
    config = {"rows": 256, "width": 64}
    _, reason = library_or_reason("kerasplm_no_such_library", "kerasplm_no_such_library")
    return [{"name": "matmul vs einsum", "kerasplm": rate["kerasplm"], "anchor": rate["anchor"], "config": config,
             "training_flops_per_unit": 2 * 64 * 64},
            {"name": "missing anchor", "skipped": reason, "config": config}]


# ----------------------------------------------------------------------------------------------------- main

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small configurations and few rounds (~20 min, 2 cores)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these comparisons (see --list)")
    parser.add_argument("--json", metavar="FILE", help="write the rows, machine, date and commit here")
    parser.add_argument("--compare", metavar="OLD.json", help="flag rows whose ratio fell against this --json")
    parser.add_argument("--tolerance", type=float, default=0.10,
                        help="the fall of a ratio, as a fraction, that --compare flags (default 0.10)")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds a comparison may run before its child is killed (0: no limit; default 1800)")
    parser.add_argument("--markdown", action="store_true", help="print the table in Markdown (for RESULTS.md)")
    parser.add_argument("--list", action="store_true", help="list the comparisons and exit")
    parser.add_argument("--in-process", action="store_true",
                        help="run the comparisons in this process (what each child does) and write raw rows")
    args = parser.parse_args(argv)
    if args.list:
        for c in REGISTRY.values():
            print(f"{c.name:18}  {'training' if c.training else 'inference':9}  {c.unit:15}  vs {c.anchor}"
                  f"{'  (test entry, run with --only)' if c.hidden else ''}\n{'':20}{c.description}")
        return 0
    unknown = sorted(set(args.only or ()) - set(REGISTRY))
    if unknown:
        parser.error(f"unknown comparison(s) {', '.join(unknown)}; choose from {', '.join(REGISTRY)}")
    if not 0 <= args.tolerance < 1:
        parser.error(f"--tolerance must be in [0, 1), got {args.tolerance}")
    old_rows = None
    if args.compare:
        try:
            with open(args.compare) as f:
                old_rows = json.load(f)["rows"]
        except (OSError, ValueError, KeyError) as e:
            parser.error(f"--compare {args.compare}: cannot read its rows ({e})")
    selected = [REGISTRY[n] for n in args.only] if args.only else [c for c in REGISTRY.values() if not c.hidden]

    if args.in_process:
        rows, info = [], {}
        for comparison in selected:
            got, info = run_in_process(comparison, args.quick)
            rows += got
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": rows, "info": info}, f, indent=2)
        return 0

    started = datetime.datetime.now(datetime.timezone.utc)
    rows, children = [], {}
    for comparison in selected:
        print(f"{comparison.name}: running (vs {comparison.anchor})", file=sys.stderr, flush=True)
        got, info = run_child(comparison, args.quick, timeout=args.timeout or None)
        rows += got
        children[comparison.name] = info
    regressed = compare(rows, old_rows, args.tolerance) if old_rows is not None else []
    print(format_table(rows, markdown=args.markdown))
    for name in regressed:
        print(f"regression: {name} fell more than {100 * args.tolerance:g}% against {args.compare}")
    libraries = next((i["machine"] for i in children.values() if i.get("machine")), None)
    result = {"machine": {**machine_summary(), **({k: libraries[k] for k in ("tensorflow", "keras", "gpus")}
                                                   if libraries else {})},
              "date": started.isoformat(timespec="seconds"), "commit": git_commit(), "quick": args.quick,
              "comparisons": {n: {k: v for k, v in i.items() if k != "machine"} for n, i in children.items()},
              "rows": rows}
    if args.compare:
        result["compared_with"] = {"file": args.compare, "tolerance": args.tolerance, "regressed": regressed}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    if regressed:
        return 1
    return 2 if any(r.get("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
