"""A model family defined only under tests/ (tests/toy_family) reaches every rail through the real command line:
`kerasplm train toy`, `load_run`, `kerasplm export toy`, `kerasplm serve`, with no edit under kerasplm/."""
import json
import os
import subprocess
import sys
import urllib.request
from types import SimpleNamespace

import numpy as np

from kerasplm import registry
from kerasplm.jobs.job import training_summary
from kerasplm.runs import load_run
from tests.serving.client import CLIServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MANIFEST = "tests.toy_family.manifest"
ENV = {**os.environ, "PYTHONPATH": ROOT, "KERASPLM_FAMILIES": MANIFEST}


def kerasplm(*args):
    return subprocess.run([sys.executable, "-m", "kerasplm.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=ENV)


def test_the_toy_family_is_one_place(tmp_path, monkeypatch):
    listed = kerasplm("train", "--help")
    assert listed.returncode == 0 and "toy" in listed.stdout and "the toy regression family" in listed.stdout
    assert "toy" not in subprocess.run([sys.executable, "-m", "kerasplm.cli", "train", "--help"], capture_output=True,
                                       text=True, cwd=ROOT, env={**ENV, "KERASPLM_FAMILIES": ""}).stdout

    run_dir = str(tmp_path / "run")
    trained = kerasplm("train", "toy", "--steps", "300", "--out", run_dir, "--seed", "3")
    assert trained.returncode == 0, trained.stderr
    assert f"wrote {run_dir}: step 300" in trained.stdout and trained.stderr == ""
    config = json.loads(open(os.path.join(run_dir, "config.json")).read())
    assert config["family"] == "toy" and config["options"]["seed"] == 3
    metrics = json.loads(open(os.path.join(run_dir, "metrics.json")).read())
    assert metrics["step"] == 300 and 0 < metrics["median_step_seconds"] < metrics["train_seconds"]

    monkeypatch.setenv("KERASPLM_FAMILIES", MANIFEST)
    model = load_run(run_dir)                       # the loader the manifest declares
    lengths = np.array([[0.3], [0.7], [1.1]], np.float32)           # 3, 7 and 11 bytes
    np.testing.assert_allclose(model(lengths).numpy()[:, 0] * 10, [7, 15, 23], atol=0.5)

    conflict = kerasplm("train", "toy", "--steps", "301", "--out", run_dir, "--max-chars", "5")
    assert conflict.returncode == 2 and "max_chars=5 (the run has 12)" in conflict.stderr

    base = str(tmp_path / "export")
    exported = kerasplm("export", "toy", "--run", run_dir, "--to", base)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.strip() == os.path.join(base, "1")

    server = CLIServer(["--model-base-path", base, "--model-name", "toy", "--quiet"], tmp_path / "serve.log")
    try:
        server.wait_ready()
        request = urllib.request.Request(f"{server.url}/v1/models/toy:predict", method="POST",
                                         data=json.dumps({"instances": ["abc", "abcdefg"]}).encode())
        with urllib.request.urlopen(request, timeout=60) as response:
            predictions = json.loads(response.read())["predictions"]
    finally:
        server.close()
    np.testing.assert_allclose(predictions, [7, 15], atol=0.5)


def test_a_manifest_added_in_process_registers_its_commands(monkeypatch):
    monkeypatch.setattr(registry, "_extra_manifests", [])
    assert "train toy" not in {c.path for c in registry.commands()}
    registry.add_manifest(MANIFEST)
    assert {c.path for c in registry.commands()} >= {"train toy", "export toy"}
    assert MANIFEST in registry.manifest_modules()


def test_the_summary_reports_the_median_step_after_the_traced_one():
    trainer = SimpleNamespace(step=4, stop_reason="steps", step_seconds=[9.0, 0.3, 0.1, 0.2])
    summary = training_summary(trainer, {"loss": [2.0, 1.5]}, train_seconds=9.64)
    assert summary["median_step_seconds"] == 0.2   # of 0.3, 0.1, 0.2: the 9 s first step (the trace) is left out
    assert summary["train_seconds"] == 9.6 and summary["final_loss"] == 1.5 and summary["eval_loss"] is None
    assert training_summary(SimpleNamespace(step=1, stop_reason="steps", step_seconds=[4.0]), {},
                            train_seconds=4.0)["median_step_seconds"] is None
