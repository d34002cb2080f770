"""The house's rules, checked: import-linter's layering contracts (the family ones made from the manifests), no
family reaching into another's private names, module-level imports, and a command line that starts without
TensorFlow."""
import ast
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from tests import layering_contracts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = pathlib.Path(ROOT, "kerasplm")
# Imported inside functions on purpose: packages that only some commands need (weights readers, Faiss, plots).
OPTIONAL_PACKAGES = {"torch", "safetensors", "h5py", "faiss", "sentencepiece", "matplotlib", "google", "tensorflow_text"}


def _lint_imports():
    executable = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    if executable is None:
        pytest.fail("lint-imports (import-linter, a test extra) is not installed")
    return executable


def test_layering_contracts_hold():
    """.importlinter's contracts (ground floor, manifests, models, export, converters, serving, jobs)."""
    result = subprocess.run([_lint_imports(), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_family_contracts_follow_the_manifests():
    """Each family folder's contract forbids every family but the bases its manifest declares; a new family
    or a changed ``BASES`` is one `python -m tests.layering_contracts --write` away."""
    with open(layering_contracts.PATH, encoding="utf-8") as f:
        current = f.read()
    assert current == layering_contracts.expected_file(current), \
        "run `python -m tests.layering_contracts --write`: .importlinter's family contracts are out of date"
    bases = layering_contracts.family_bases()
    assert {"bert", "electra", "gpt", "elmo", "ulmfit", "transformer", "rnn_seq2seq", "translator", "char_rnn",
            "distilbert", "sentence_embedding"} <= set(bases)
    assert "bert" in bases["electra"]


def _imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name, []


def _family(module):
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["kerasplm", "models"] and parts[2] not in (
        "base", "presets") else None


def test_no_family_imports_another_familys_private_names():
    found = []
    for path in sorted(PACKAGE.joinpath("models").rglob("*.py")):
        own = path.relative_to(PACKAGE).parts[1]
        for node, module, names in _imports(ast.parse(path.read_text())):
            other = _family(module)
            if other and other != own and (any(n.startswith("_") for n in names)
                                           or any(p.startswith("_") for p in module.split(".")[3:])):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {module} {names}")
    assert not found, f"private names of another family: {found}"


def test_kerasplm_is_imported_at_module_level():
    """Function-level imports hide cycles and cost: they are kept for optional packages and for the command
    line's start-up (the CLI and the server import a command's modules when it runs)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        startup = relative == "kerasplm/cli.py" or relative.startswith("kerasplm/serving/")
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node, module, _ in _imports(function):
                top = module.split(".")[0]
                if top in OPTIONAL_PACKAGES or (top in ("kerasplm", "tensorflow") and startup):
                    continue
                if module == "tensorflow.python.saved_model":   # a SavedModel's fingerprint: the one TF-internal use
                    continue
                found.append(f"{relative}:{node.lineno} {module}")
    assert not found, f"function-level imports: {found}"


def test_a_back_arrow_breaks_a_contract(tmp_path):
    """The contracts are live: a copy of the package with one forbidden import (a layer importing a job) fails."""
    shutil.copytree(os.path.join(ROOT, "kerasplm"), tmp_path / "kerasplm",
                    ignore=shutil.ignore_patterns("__pycache__", "sample"))
    shutil.copy(os.path.join(ROOT, ".importlinter"), tmp_path / ".importlinter")
    with open(tmp_path / "kerasplm" / "layers" / "masks.py", "a", encoding="utf-8") as f:
        f.write("\nimport kerasplm.models.translator.job  # noqa\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([_lint_imports(), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode != 0
    assert "kerasplm.layers.masks -> kerasplm.models.translator.job" in result.stdout


def _run_cli(*args, **kwargs):
    code = "import sys; from kerasplm.cli import main; rc = main(sys.argv[1:]); " \
           "print('TF_LOADED' if 'tensorflow' in sys.modules else 'TF_NOT_LOADED', file=sys.stderr); sys.exit(rc)"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, **kwargs)


@pytest.mark.parametrize("argv", [[], ["train", "translator"], ["finetune", "bert-qa"], ["export", "embedder"],
                                  ["convert", "elmo"], ["generate"], ["serve"], ["presets"], ["index", "build"],
                                  ["search"]])
def test_help_imports_no_tensorflow_and_is_quick(argv):
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", "import sys; from kerasplm.cli import main; "
                             "sys.argv[0] = 'kerasplm'\n"
                             "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
                             "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'TF imported'",
                             *argv, "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "usage: kerasplm" in result.stdout and result.stderr == ""
    # Not a benchmark: a bound an order of magnitude above the ~0.15 s it takes, far below TensorFlow's import.
    assert elapsed < 3.0, elapsed


def test_commands_print_no_tensorflow_log_lines_unless_verbose(tmp_path):
    """A command that loads TensorFlow (here: it fails on a missing run, after loading) writes only its own
    error to stderr; with --verbose TensorFlow's start-up lines come through."""
    quiet = _run_cli("export", "translator", "--run", str(tmp_path / "none"), "--to", str(tmp_path / "x"))
    assert quiet.returncode == 2
    lines = quiet.stderr.strip().splitlines()
    assert lines[-1] == "TF_LOADED" and len(lines) == 2, quiet.stderr
    assert lines[0].startswith("kerasplm: error: ") and "no config.json" in lines[0]
    verbose = _run_cli("--verbose", "export", "translator", "--run", str(tmp_path / "none"),
                       "--to", str(tmp_path / "x"), env={k: v for k, v in os.environ.items()
                                                         if k != "TF_CPP_MIN_LOG_LEVEL"})
    assert verbose.returncode == 2 and len(verbose.stderr.strip().splitlines()) > 2, verbose.stderr


def test_an_unreadable_family_manifest_is_one_line():
    result = subprocess.run([sys.executable, "-m", "kerasplm.cli", "--help"], capture_output=True, text=True,
                            timeout=120, cwd=ROOT, env={**os.environ, "KERASPLM_FAMILIES": "no_such_family_module"})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "kerasplm: error: family manifest 'no_such_family_module' (from KERASPLM_FAMILIES or kerasplm.models) "
        "cannot be imported (No module named 'no_such_family_module')"]
