"""Data-parallel scaling on one machine: each family's training step on 1 worker against 2 local workers.

Every family's real job (``kerasplm train|finetune FAMILY ... --steps N``) runs three ways, one after the other so
that each has the machine to itself, with the same global batch:

* ``1 worker, 1 thread``: ``--distribute default``, one intra-op thread (``TF_NUM_INTRAOP_THREADS=1``): one core's
  worth of compute, the unit a second worker adds;
* ``2 workers, 1 thread each``: ``--distribute multi-worker`` as worker 0 and worker 1 of a two-worker
  ``TF_CONFIG`` on 127.0.0.1 (what two nodes would run), each with one intra-op thread; every global batch is
  split between them and the gradients are all-reduced (MultiWorkerMirroredStrategy's ring over gRPC);
* ``1 worker, 2 threads``: ``--distribute default`` with both cores to one process (the default way to use this
  machine).

The figure of each is the run's steady step time, ``median_step_seconds`` of its ``metrics.json`` (the median of
the steps after the first, which traces): examples per second = global batch / step time. The scaling efficiency
of data parallelism is

    efficiency = throughput(2 workers) / (2 x throughput(1 worker, 1 thread))

(1.0: the second worker doubles the throughput; the shortfall is the all-reduce of every gradient, the split
batch's smaller matmuls and the workers' lock-step). The last column compares the two ways of spending both
cores: throughput(2 workers) / throughput(1 worker, 2 threads). ``docs/SCALING.md`` reads these figures.

    python -m benchmarks.bench_scaling --json scaling.json            # every family, ~12 min on 2 idle cores
    python -m benchmarks.bench_scaling --only bert gpt --steps 30
    python -m benchmarks.bench_scaling --smoke                        # 3 steps of each (not a figure)
    python -m benchmarks.bench_scaling --projection --measured-efficiency 0.8   # docs/SCALING.md's projection only

``--projection`` prints the projection of BERT-base pretraining on 8 and 64 GPUs that docs/SCALING.md explains:
:func:`project_bert_base` with every input named below (published per-GPU throughput, FLOP ratio, the BERT paper's
schedule, scaling efficiencies).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import load_average, machine_info, write_results  # noqa: E402
from tests.jobs.multiworker import cli_env, free_ports, tf_config  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))
WIKITEXT = os.path.join(DATA, "wikitext2", "wiki.valid.tokens")
SHAKESPEARE = os.path.join(DATA, "tiny_shakespeare", "input.txt")
SST2 = os.path.join(DATA, "sst2")

# family: (verb, command family, global batch, arguments). Each preset is the smallest one that trains like the
# real thing (a d_model of 256 or a 5M-parameter translator); the global batch is split between the workers.
FAMILIES = {
    "translator": ("train", "translator", 64, [
        "--bundled-data", "sample", "--preset", "transformer_seed", "--batch-size", "64", "--vocab-size", "8000",
        "--bleu-max-sentences", "0", "--export-to", "none"]),
    "rnn_translator": ("train", "translator", 64, [
        "--bundled-data", "sample", "--preset", "gru_bahdanau", "--batch-size", "64", "--vocab-size", "8000",
        "--bleu-max-sentences", "0", "--export-to", "none"]),
    "bert": ("train", "bert", 32, [
        "--corpus", WIKITEXT, "--preset", "bert_mini", "--sentence-task", "none", "--batch-size", "32",
        "--max-seq-length", "128", "--vocab-size", "8000", "--dev-documents", "2"]),
    "electra": ("train", "electra", 32, [
        "--corpus", WIKITEXT, "--preset", "electra_mini", "--batch-size", "32", "--max-seq-length", "128",
        "--vocab-size", "8000", "--dev-documents", "2"]),
    "bert_classifier": ("finetune", "bert-classifier", 32, [
        "--train", os.path.join(SST2, "train.tsv"), "--dev", os.path.join(SST2, "dev.tsv"), "--init", "{bert_run}",
        "--max-examples", "4000", "--batch-size", "32"]),
    "gpt": ("train", "gpt", 16, [
        "--corpus", SHAKESPEARE, "--preset", "gpt2", "--num-layers", "4", "--d-model", "256", "--num-heads", "4",
        "--vocab-size", "2000", "--seq-len", "128", "--batch-size", "16"]),
    "elmo": ("train", "elmo", 32, [
        "--corpus", WIKITEXT, "--preset", "elmo_mini", "--batch-size", "32", "--vocab-size", "8000"]),
    "char_rnn": ("train", "char-rnn", 64, [
        "--corpus", SHAKESPEARE, "--preset", "char_rnn_lstm", "--batch-size", "64"]),
}
# Not here: ``train ulmfit-lm``, whose BPTT state is carried per stream in one process's variables; it refuses
# --distribute other than default.
SIDES = ("1 worker, 1 thread", "2 workers, 1 thread each", "1 worker, 2 threads")

# --- The projection's inputs, each from a source named here (docs/SCALING.md discusses them).
# The BERT paper's schedule (Devlin et al. 2019, appendix A.2): 1,000,000 steps of 256 sequences, the first 90% of
# the steps at 128 tokens, the last 10% at 512.
PAPER_SCHEDULE = ((900_000 * 256, 128), (100_000 * 256, 512))   # (sequences, tokens per sequence)
# Published per-GPU pretraining throughput (sequences/s, steady state): NVIDIA DeepLearningExamples,
# TensorFlow2/LanguageModeling/BERT README, "Pre-training training performance", BERT-Large, TF 21.02 NGC container,
# mixed precision, LAMB with gradient accumulation (per-GPU batch 312 at 128 tokens, 40 at 512):
# 1x A100 80GB: 485.59 (128), 96.52 (512); 8x A100 (one DGX A100): 3799.24 (128), 649.69 (512);
# multi-node DGX A100, 1 node and 8 nodes (64 GPUs): 3803.82 and 29711.11 (128), 749.73 and 5870.83 (512).
PUBLISHED_LARGE_PER_GPU = {128: 485.59, 512: 96.52}
PUBLISHED_WEAK_SCALING = {  # efficiency = throughput(n) / (n x throughput(1)), derived from the figures above
    8: {128: 3799.24 / (8 * 485.59), 512: 649.69 / (8 * 96.52)},
    # 64 GPUs: the single-node efficiency times the multi-node table's 8-node / (8 x 1-node) ratio (that table ran
    # on other A100s, so only its ratio is used)
    64: {128: 3799.24 / (8 * 485.59) * 29711.11 / (8 * 3803.82), 512: 649.69 / (8 * 96.52) * 5870.83 / (8 * 749.73)},
}
BERT_LARGE = dict(n_layers=24, d_model=1024, dff=4096)
BERT_BASE = dict(n_layers=12, d_model=768, dff=3072)
BERT_VOCAB = 30522
MASKED_FRACTION = 20 / 128   # max_predictions_per_seq / seq_len of the paper's setup: where the MLM head runs


def environment(threads, config=None):
    """The CLI's environment (tests/jobs/multiworker.py's: this checkout first on the path, no inherited TF_CONFIG)
    with ``threads`` intra-op threads and, for a worker, its ``TF_CONFIG``."""
    extra = {"TF_CONFIG": config} if config else {}
    return cli_env(TF_NUM_INTRAOP_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="3", **extra)


def launch(directory, family, steps, side, timeout, bert_run=None):
    """Run ``family``'s job the ``side`` way in ``directory`` (one or two processes at once); returns the chief's
    ``metrics.json``. Raises RuntimeError with the failing process's last lines. ``bert_run``: the pretrained run
    the classifier starts from."""
    verb, command, _, args = FAMILIES[family]
    args = [bert_run if arg == "{bert_run}" else arg for arg in args]
    base = [sys.executable, "-m", "kerasplm.cli", verb, command, *args, "--steps", str(steps), "--quiet",
            "--seed", "0", "--out", "run"]
    if side == SIDES[1]:
        ports = free_ports(2)
        launches = [(os.path.join(directory, f"node{i}"), base + ["--distribute", "multi-worker"],
                     environment(1, tf_config(ports, i))) for i in range(2)]
    else:
        threads = 1 if side == SIDES[0] else 2
        launches = [(os.path.join(directory, "single"), base + ["--distribute", "default"], environment(threads))]
    started, procs = time.monotonic(), []
    try:
        for cwd, cmd, env in launches:
            os.makedirs(cwd, exist_ok=True)
            procs.append(subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        for proc in procs:
            out, err = proc.communicate(timeout=max(timeout - (time.monotonic() - started), 1))
            if proc.returncode != 0:
                raise RuntimeError(f"{family} ({side}) exited {proc.returncode}:\n{out[-2000:]}\n{err[-2000:]}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    with open(os.path.join(launches[0][0], "run", "metrics.json"), encoding="utf-8") as f:
        return json.load(f)


def scaling_row(family, step_seconds):
    """The row of one family from its three step times (seconds per global batch, keyed by side)."""
    batch = FAMILIES[family][2]
    throughput = {side: batch / seconds for side, seconds in step_seconds.items()}
    one, two, both = (throughput[side] for side in SIDES)
    return {"family": family, "global_batch": batch, "step_seconds": step_seconds,
            "examples_per_second": {side: round(value, 2) for side, value in throughput.items()},
            "efficiency": round(two / (2 * one), 3), "two_workers_vs_two_threads": round(two / both, 3)}


def flops_per_sequence(shape, seq_len):
    """Training FLOPs of one sequence: ``T x (6·N + 12·L·T·d)`` (benchmarks/mfu.py), N = the blocks' matmul
    weights plus the MLM head's (its d x d transform and d x V output, on the masked fraction of positions)."""
    from benchmarks.mfu import training_flops_per_token, transformer_matmul_params

    d = shape["d_model"]
    n = transformer_matmul_params(shape["n_layers"], d, shape["dff"]) + MASKED_FRACTION * (d * d + d * BERT_VOCAB)
    return seq_len * training_flops_per_token(n, shape["n_layers"], seq_len, d)


def ring_efficiency(two_worker_efficiency, workers):
    """Efficiency at ``workers`` from one measured at 2, if the only loss is a ring all-reduce that is not hidden:
    each worker sends and receives 2(n-1)/n of the gradients' bytes, 1x at n = 2, so the overhead fraction
    f_n = f_2 · 2(n-1)/n with f_2 = 1/e_2 - 1, and e_n = 1 / (1 + f_n)."""
    overhead = 1 / two_worker_efficiency - 1
    return 1 / (1 + overhead * 2 * (workers - 1) / workers)


def project_bert_base(gpus=(1, 8, 64), measured_efficiency=None):
    """Hours of BERT-base pretraining on the paper's schedule on ``gpus`` A100s: the published BERT-Large
    per-GPU throughput scaled by the FLOPs ratio (BERT-Large / BERT-base per sequence), times n, times an
    efficiency: NVIDIA's published weak scaling, or (``measured_efficiency``, the 2-worker efficiency measured
    here) :func:`ring_efficiency`. Returns rows of dicts."""
    rows = []
    for n in gpus:
        for source in ("published", "measured") if measured_efficiency else ("published",):
            hours, per_phase = 0.0, {}
            for sequences, seq_len in PAPER_SCHEDULE:
                per_gpu = PUBLISHED_LARGE_PER_GPU[seq_len] * (flops_per_sequence(BERT_LARGE, seq_len)
                                                               / flops_per_sequence(BERT_BASE, seq_len))
                if n == 1:
                    efficiency = 1.0
                elif source == "published":
                    efficiency = PUBLISHED_WEAK_SCALING[n][seq_len]
                else:
                    efficiency = ring_efficiency(measured_efficiency, n)
                phase_hours = sequences / (per_gpu * n * efficiency) / 3600
                per_phase[seq_len] = {"per_gpu_sequences_per_second": round(per_gpu, 1),
                                      "efficiency": round(efficiency, 3), "hours": round(phase_hours, 2)}
                hours += phase_hours
            rows.append({"gpus": n, "efficiency_from": "none (1 GPU)" if n == 1 else source, "phases": per_phase,
                         "hours": round(hours, 2)})
            if n == 1:
                break
    return rows


def projection_table(rows):
    lines = ["| GPUs | efficiency from | per-GPU seq/s (128 / 512) | efficiency (128 / 512) | hours (128 / 512) | "
             "total hours |", "|---:|---|---|---|---|---:|"]
    for row in rows:
        p = row["phases"]
        lines.append(f"| {row['gpus']} | {row['efficiency_from']} | "
                     f"{p[128]['per_gpu_sequences_per_second']:.0f} / {p[512]['per_gpu_sequences_per_second']:.0f} | "
                     f"{p[128]['efficiency']:.3f} / {p[512]['efficiency']:.3f} | "
                     f"{p[128]['hours']:.2f} / {p[512]['hours']:.2f} | {row['hours']:.2f} |")
    return "\n".join(lines)


def table(rows):
    lines = ["| family | global batch | examples/s: 1 worker, 1 thread | 2 workers, 1 thread each | "
             "1 worker, 2 threads | efficiency 2w / (2 x 1w1t) | 2 workers / 1 worker 2 threads |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        per = row["examples_per_second"]
        lines.append(f"| {row['family']} | {row['global_batch']} | " + " | ".join(f"{per[side]:.1f}" for side in SIDES)
                     + f" | {row['efficiency']:.2f} | {row['two_workers_vs_two_threads']:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(FAMILIES), help="these families only")
    parser.add_argument("--steps", type=int, default=25, help="steps of each run (the first traces: left out)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    parser.add_argument("--out", help="directory for the runs (default: a temporary one)")
    parser.add_argument("--smoke", action="store_true", help="3 steps of each family (checks the wiring)")
    parser.add_argument("--check-args", action="store_true",
                        help="with --smoke: the one-process side only (checks each family's command line)")
    parser.add_argument("--projection", action="store_true",
                        help="print the BERT-base projection (docs/SCALING.md) and exit; measures nothing")
    parser.add_argument("--measured-efficiency", type=float,
                        help="with --projection: the 2-worker efficiency measured for BERT (its row's efficiency)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.projection:
        rows = project_bert_base(measured_efficiency=args.measured_efficiency)
        print(projection_table(rows))
        write_results({"projection": rows}, args.json)
        return rows
    steps = 3 if args.smoke else args.steps
    out = args.out or tempfile.mkdtemp(prefix="bench_scaling_")
    results = {"machine": machine_info(libraries=False), "load_average_start": load_average(), "steps": steps,
               "rows": []}
    # The classifier fine-tunes the BERT family's run (its one-process side), made with a single step when the BERT
    # family is not measured in this run.
    bert_run = os.path.join(out, "bert", "side2", "single", "run")
    for family in args.only or FAMILIES:
        if family == "bert_classifier" and not os.path.isdir(bert_run):
            launch(os.path.join(out, "bert", "side2"), "bert", 1, SIDES[2], args.timeout)
        seconds = {}
        try:
            for index, side in enumerate(SIDES[:1] if args.check_args else SIDES):
                metrics = launch(os.path.join(out, family, f"side{index}"), family, steps, side, args.timeout,
                                 bert_run)
                seconds[side] = metrics["median_step_seconds"]
                print(f"{family}: {side}: {seconds[side]:.4f} s/step", flush=True)
        except (RuntimeError, subprocess.TimeoutExpired) as e:   # one family's failure does not cost the others
            print(f"{family}: failed: {e}", flush=True)
            results["rows"].append({"family": family, "failed": str(e)[-2000:]})
            continue
        if not args.check_args:
            results["rows"].append(scaling_row(family, seconds))
    results["load_average_end"] = load_average()
    print(table([row for row in results["rows"] if "failed" not in row]))
    write_results(results, args.json)
    return results


if __name__ == "__main__":
    main()
