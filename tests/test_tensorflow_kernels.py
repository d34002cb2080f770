"""The command line picks TensorFlow's CPU kernels per command: oneDNN's for training jobs, the default otherwise."""
import os
import subprocess
import sys

import pytest

from kerasplm import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Parses a command line, lets the CLI choose, then imports TensorFlow and asks it which kernels it runs.
_PROBE = """
import os, sys
from kerasplm import cli
args = cli.build_parser().parse_args(sys.argv[1:])
chosen = cli.choose_cpu_kernels(args)
import tensorflow
from tensorflow.python.util import _pywrap_util_port as port
print(chosen, port.IsMklEnabled())
"""


def _probe(argv, cwd, **env):
    environment = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    environment.update(env, PYTHONPATH=REPO)
    result = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, env=environment,
                            cwd=cwd, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.split()


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    """A directory holding what the commands' flags must find: ``t.tsv`` and a ``run`` directory."""
    (tmp_path / "t.tsv").write_text("sentence\tlabel\n")
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_training_job_runs_on_onednn_and_a_user_setting_wins(inputs):
    assert _probe(["train", "translator", "--out", "unused"], inputs) == ["1", "True"]
    assert _probe(["finetune", "bert-classifier", "--train", "t.tsv", "--dev", "t.tsv", "--out", "unused"], inputs,
                  TF_ENABLE_ONEDNN_OPTS="0") == ["0", "False"]


@pytest.mark.parametrize("argv", [
    ["train", "gpt", "--out", "x"], ["finetune", "bert-classifier", "--train", "t.tsv", "--dev", "t.tsv", "--out", "x"],
    ["distill", "--teacher", "run", "--train", "t.tsv", "--dev", "t.tsv", "--out", "x"]])
def test_every_training_job_asks_for_onednn(argv, inputs, monkeypatch):
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    # As in a fresh CLI process, where nothing imported TensorFlow yet.
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    assert cli.choose_cpu_kernels(cli.build_parser().parse_args(argv)) == "1"


@pytest.mark.parametrize("argv", [
    ["serve", "--model-base-path", "run", "--model-name", "m"], ["translate", "--run", "run", "hola"],
    ["export", "translator", "--run", "run", "--to", "e"], ["presets"]])
def test_inference_commands_keep_tensorflows_default(argv, inputs, monkeypatch):
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    assert cli.choose_cpu_kernels(cli.build_parser().parse_args(argv)) is None
    assert "TF_ENABLE_ONEDNN_OPTS" not in os.environ


def test_nothing_is_set_once_tensorflow_is_imported(monkeypatch):
    # Too late to matter (TensorFlow read the variable at its import), so the CLI does not claim it.
    import tensorflow  # noqa: F401
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    assert cli.choose_cpu_kernels(cli.build_parser().parse_args(["train", "translator", "--out", "x"])) is None
