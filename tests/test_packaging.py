"""Installing works on every Python that TensorFlow 2.21 and tensorflow-text 2.21 ship wheels for.

The wheel check asks the package index (through pip, as a user's install would) which versions of each
runtime and test dependency have a wheel for each Python. It reads index pages only: resolving the whole
dependency tree (`pip install --dry-run --python-version X`) downloads every wheel -- ~650 MB of
TensorFlow and tensorflow-text per Python on an index without PEP 658 metadata -- so that deeper check is
opt-in: KERASPLM_RESOLVE_ALL_PYTHONS=1.
"""
import ast
import configparser
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def _setup_cfg():
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg", encoding="utf-8")
    return parser


def _lines(text):
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _requirements():
    cfg = _setup_cfg()
    return [Requirement(r) for r in _lines(cfg["options"]["install_requires"])
            + _lines(cfg["options.extras_require"]["test"])]


def test_declared_python_range_is_every_python_with_tensorflow_wheels():
    cfg = _setup_cfg()
    supported = SpecifierSet(cfg["options"]["python_requires"])
    assert [v for v in ("3.9", *PYTHONS, "3.14") if v in supported] == list(PYTHONS)
    classifiers = _lines(cfg["metadata"]["classifiers"])
    assert [f"Programming Language :: Python :: {v}" in classifiers for v in PYTHONS] == [True] * len(PYTHONS)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"Python 3\.10 to 3\.13", readme), "README must state the supported Python range"


def test_code_parses_as_python_3_10():
    """No syntax newer than the oldest supported Python (e.g. `except*`, PEP 695 generics)."""
    for path in sorted([*ROOT.glob("kerasplm/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("benchmarks/*.py")]):
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 10))


# One subprocess per package: pip is imported once, then asked about each Python in turn.
_INDEX_VERSIONS = r"""
import contextlib, io, json, sys
from pip._internal.cli.main import main
name, pythons = sys.argv[1], sys.argv[2:]
found = {}
for python in pythons:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["index", "versions", name, "--python-version", python, "--only-binary=:all:",
              "--timeout", "15", "--retries", "1", "--disable-pip-version-check"])
    match = [line for line in out.getvalue().splitlines() if line.startswith("Available versions:")]
    found[python] = match[0].split(":", 1)[1].replace(" ", "").split(",") if match else []
print(json.dumps(found))
"""


def _wheel_versions(name, pythons=PYTHONS):
    """{python: [versions with a wheel for it]} from the package index, through pip."""
    result = subprocess.run([sys.executable, "-c", _INDEX_VERSIONS, name, *pythons], capture_output=True,
                            text=True, timeout=240)
    if result.returncode:
        raise RuntimeError(f"pip index versions {name} failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_dependency_has_wheels_for_every_supported_python():
    if not _wheel_versions("pip", pythons=("3.11",))["3.11"]:
        pytest.skip("the package index is unreachable (pip index versions pip found nothing)")
    requirements = _requirements()
    with ThreadPoolExecutor(max_workers=len(requirements)) as pool:
        found = dict(zip(requirements, pool.map(lambda r: _wheel_versions(r.name), requirements)))
    missing = [f"{requirement} on Python {python}" for requirement, by_python in found.items()
               for python in PYTHONS
               if not any(requirement.specifier.contains(v, prereleases=False) for v in by_python[python])]
    assert not missing, "no wheel for: " + "; ".join(missing)


@pytest.mark.skipif(os.environ.get("KERASPLM_RESOLVE_ALL_PYTHONS") != "1",
                    reason="downloads ~2.6 GB of wheels: set KERASPLM_RESOLVE_ALL_PYTHONS=1 to run")
@pytest.mark.parametrize("python", PYTHONS)
def test_whole_dependency_tree_resolves_to_wheels(python):
    with tempfile.TemporaryDirectory() as target:
        report = os.path.join(target, "report.json")
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--only-binary=:all:",
             "--python-version", python, "--target", target, "--report", report, "--quiet",
             *[str(r) for r in _requirements()]], capture_output=True, text=True, timeout=1800)
        assert result.returncode == 0, result.stderr[-3000:]
        with open(report, encoding="utf-8") as f:
            installed = {item["metadata"]["name"].lower() for item in json.load(f)["install"]}
    assert {"tensorflow", "tensorflow-text", "keras"} <= installed
