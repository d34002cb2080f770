"""A model family that is one folder outside the package reaches every rail through the real command line:
`kerasplm presets`, `kerasplm train toy`, `load_run`, `kerasplm export toy`, `kerasplm serve`, with no edit under
kerasplm/. The folder (tests/toy_family) is copied out of the repository under another name first, so nothing of it
may lean on where it lives."""
import json
import os
import shutil
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
FOLDER = os.path.join(ROOT, "tests", "toy_family")
MANIFEST = "tests.toy_family.manifest"


def test_the_toy_family_is_one_folder(tmp_path, monkeypatch):
    outside = tmp_path / "elsewhere"
    shutil.copytree(FOLDER, outside / "toyfamily", ignore=shutil.ignore_patterns("__pycache__"))
    manifest = "toyfamily.manifest"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, str(outside)]), "KERASPLM_FAMILIES": manifest}

    def kerasplm(*args, **extra):
        return subprocess.run([sys.executable, "-m", "kerasplm.cli", *args], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path, env={**env, **extra})

    listed = kerasplm("train", "--help")
    assert listed.returncode == 0 and "toy" in listed.stdout and "the toy regression family" in listed.stdout
    assert "toy" not in kerasplm("train", "--help", KERASPLM_FAMILIES="").stdout

    presets = kerasplm("presets")
    assert presets.returncode == 0, presets.stderr
    rows = {line.split()[1]: line.split() for line in presets.stdout.splitlines()[1:]}
    assert rows["toy_linear"][0] == "toy" and rows["toy_linear"][2] == "2" and rows["toy_wide"][2] == "6"
    assert "bert_base" in rows   # the package's own families are still listed beside it

    run_dir = str(tmp_path / "run")
    trained = kerasplm("train", "toy", "--steps", "300", "--out", run_dir, "--seed", "3")
    assert trained.returncode == 0, trained.stderr
    assert f"wrote {run_dir}: step 300" in trained.stdout and trained.stderr == ""
    config = json.loads(open(os.path.join(run_dir, "config.json")).read())
    assert config["family"] == "toy" and config["options"]["seed"] == 3
    metrics = json.loads(open(os.path.join(run_dir, "metrics.json")).read())
    assert metrics["step"] == 300 and 0 < metrics["median_step_seconds"] < metrics["train_seconds"]

    monkeypatch.setenv("KERASPLM_FAMILIES", manifest)
    monkeypatch.syspath_prepend(str(outside))
    model = load_run(run_dir)                       # kerasplm's one loader, nothing registered for the toy
    lengths = np.array([[0.3], [0.7], [1.1]], np.float32)           # 3, 7 and 11 bytes
    np.testing.assert_allclose(model(lengths).numpy()[:, 0] * 10, [7, 15, 23], atol=0.5)

    conflict = kerasplm("train", "toy", "--steps", "301", "--out", run_dir, "--max-chars", "5")
    assert conflict.returncode == 2 and "max_chars=5 (the run has 12)" in conflict.stderr

    base = str(tmp_path / "export")
    exported = kerasplm("export", "toy", "--run", run_dir, "--to", base)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.strip() == os.path.join(base, "1")

    monkeypatch.delenv("KERASPLM_FAMILIES")    # serving knows SavedModels only: no family code in its process
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
