"""Launch a ``kerasplm train FAMILY`` job as one process and as two MultiWorkerMirroredStrategy workers, and compare.

The multi-worker run is what two nodes would do (README, "Two nodes"): the same command line on each, with
``--distribute multi-worker`` and a ``TF_CONFIG`` naming a cluster of two workers (here two free ports of
127.0.0.1) and the node's own task index. Each worker runs in its own directory, standing in for its node's
disk, with the same relative ``--out run``: so what the non-chief writes is plain to see (it must write
nothing; the chief, worker 0, writes the whole run). The single-process run (``--distribute default``) takes
the same global batches; the Trainer's loss sums are exact global means, so the chief's history must equal the
single run's up to float32 rounding (summed in another order: the workers' halves, then the all-reduce).

Used by ``tests/jobs/test_multiworker.py``; a fixture runs :func:`train_single_and_two_workers` once per
family and the tests check its :class:`Outcome` with :func:`check_matches_single`.
"""
import dataclasses
import json
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = "run"   # the --out every process is given, relative to its own directory
# What each worker logs once the job runs under a strategy of two replicas (kerasplm.jobs.job.Job.run).
REPLICAS_LINE = "multi-worker: 2 replicas"


def free_ports(n):
    """``n`` different ports the OS hands out as free (held open together so that they differ)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(ports, index):
    """TF_CONFIG of worker ``index`` of a cluster of workers on 127.0.0.1 at ``ports``."""
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
                       "task": {"type": "worker", "index": index}})


def cli_env(**extra):
    """The CLI's environment: this checkout first on the path; one intra-op thread per process (two workers share
    the test machine's cores; the thread count changes nothing but float32 rounding)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               KERAS_BACKEND="tensorflow", TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="2")
    env.update(extra)
    return env


def cli_command(family, args, distribute, verb="train"):
    return [sys.executable, "-m", "kerasplm.cli", verb, family, *args, "--out", OUT, "--distribute", distribute]


@dataclasses.dataclass
class Process:
    directory: Path
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def run(self):
        return self.directory / OUT

    def json(self, name):
        return json.loads((self.run / name).read_text(encoding="utf-8"))

    def tail(self):
        return f"exit {self.returncode}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}"


@dataclasses.dataclass
class Outcome:
    single: Process
    chief: Process
    worker: Process
    seconds: float = None       # wall time of the three processes together
    cpu_seconds: float = None   # CPU time (user + system) they took together


def train_single_and_two_workers(root, family, args, timeout=240, verb="train"):
    """Run ``kerasplm VERB FAMILY ARGS --out run`` (VERB: train or finetune) with ``--distribute default`` (in ``root/single``) and as two
    workers with ``--distribute multi-worker`` (in ``root/node0`` and ``root/node1``), the three at once (each
    process alone leaves much of the machine idle: imports, tracing, the workers' collectives)."""
    root = Path(root)
    ports = free_ports(2)
    launches = {"single": (cli_command(family, args, "default", verb), cli_env())}
    for index in range(2):
        launches[f"node{index}"] = (cli_command(family, args, "multi-worker", verb),
                                    cli_env(TF_CONFIG=tf_config(ports, index)))
    started, cpu_before = time.monotonic(), _children_cpu_seconds()
    procs = {}
    try:
        for name, (command, env) in launches.items():
            (root / name).mkdir(parents=True, exist_ok=True)
            procs[name] = subprocess.Popen(command, cwd=root / name, env=env, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True)
        results = {}
        for name, proc in procs.items():   # a worker left alone waits for its peer: the timeout ends such a hang
            out, err = proc.communicate(timeout=max(timeout - (time.monotonic() - started), 1))
            results[name] = Process(root / name, proc.returncode, out, err, time.monotonic() - started)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return Outcome(results["single"], results["node0"], results["node1"], seconds=time.monotonic() - started,
                   cpu_seconds=_children_cpu_seconds() - cpu_before)


def _children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def files_under(directory):
    """Every file under ``directory`` (relative paths, sorted); [] when it does not exist."""
    directory = Path(directory)
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def check_matches_single(outcome, keys=("loss", "eval_loss"), rtol=1e-4, atol=1e-6):
    """Every process exits 0 and both workers trained on 2 replicas; the chief wrote the run, with the single run's
    config, assets and files (logs aside), and its history's ``keys`` equal the single run's within
    ``rtol``/``atol``. Returns ``(chief history, single history)``."""
    single, chief, worker = outcome.single, outcome.chief, outcome.worker
    assert single.returncode == 0, single.tail()
    assert chief.returncode == 0, chief.tail()
    assert worker.returncode == 0, worker.tail()
    for process in (chief, worker):
        assert REPLICAS_LINE in process.stdout, process.tail()
    assert REPLICAS_LINE not in single.stdout
    chief_files, single_files = files_under(chief.run), files_under(single.run)
    for name in ("config.json", "history.json", "metrics.json", "checkpoints/checkpoint"):
        assert name in chief_files, chief_files
    # The same run: config and assets (vocabularies, tokenizer models) byte for byte, the same files.
    config, single_config = chief.json("config.json"), single.json("config.json")
    assert config == single_config
    for name in config["assets"].values():
        assert (chief.run / name).read_bytes() == (single.run / name).read_bytes(), name
    assert [f for f in chief_files if not f.startswith("logs/")] == [f for f in single_files
                                                                       if not f.startswith("logs/")]
    history, single_history = chief.json("history.json"), single.json("history.json")
    assert history["step"] == single_history["step"]
    assert history.get("eval_step") == single_history.get("eval_step")
    for key in keys:
        assert history[key], key
        np.testing.assert_allclose(history[key], single_history[key], rtol=rtol, atol=atol, err_msg=key)
    return history, single_history


def check_non_chief_wrote_nothing(outcome):
    """The non-chief worker exited 0 and left no file in its run directory (every run file is the chief's)."""
    worker = outcome.worker
    assert worker.returncode == 0, worker.tail()
    assert files_under(worker.run) == [], f"the non-chief wrote run files: {files_under(worker.run)}"
    assert "wrote run" not in worker.stdout and "(the chief writes the run in run)" in worker.stdout, worker.tail()
    assert "wrote run: step" in outcome.chief.stdout, outcome.chief.tail()
