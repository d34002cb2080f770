"""Shared test setup: quiet TensorFlow logs, the TensorFlow backend, paths to shared data, the fixture modules that
several test files share, and which worker runs which test file."""
import ast
import importlib
import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Where the environment sets PYTHONDONTWRITEBYTECODE (these machines' images do) and the install skipped
# byte-compiling (the README's --no-compile), every process that imports TensorFlow compiles its ~2,000 modules
# again: 22 s against 9 s per process here, and the suite starts dozens (workers, CLIs, servers, notebook kernels).
# The suite's processes write the bytecode cache once and read it after; this process and every child inherit that.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def _threads_per_worker():
    """The cores each test process may use: pytest-xdist's workers share the machine, so each TensorFlow process
    gets its share of the cores instead of a pool as large as the machine (two workers on two cores, each with two
    intra-op and two inter-op threads, oversubscribe it: the GPT tests ran 18% slower so). CLIs, servers and
    notebook kernels the tests start inherit the setting."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return max(1, (os.cpu_count() or 1) // max(1, workers))


if "PYTEST_XDIST_WORKER" in os.environ:
    _threads = str(_threads_per_worker())
    for _variable in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        os.environ.setdefault(_variable, _threads)

# Eigen's CPU kernels in every test process and every process it starts, on every machine. TensorFlow turns oneDNN
# on by itself on AVX-512 VNNI machines only (and kerasplm's training CLIs everywhere): on the suite's tiny models its
# per-op overhead outweighs its faster products (two job test files, one process: 81.5 s with oneDNN, 72.9 s
# without, on an AVX-512 EPYC), and the tests' numbers should not depend on the machine class. The CLI's choice of
# kernels is tested with the variable removed (tests/test_tensorflow_kernels.py). Set here, it also keeps an
# in-process ``cli.main(["train", ...])`` from turning oneDNN on for the rest of its worker
# (``kerasplm.cli.choose_cpu_kernels`` only fills the variable in when it is unset).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

# A test file imports nothing from another test file: the fixtures that several files use live in these modules,
# loaded for the whole suite (a test asks for them by name), and the constants and helpers in its folder's toy modules.
pytest_plugins = [
    "tests.models.bert.fixtures",
    "tests.models.gpt.fixtures",
    "tests.models.sentence_embedding.fixtures",
    "tests.models.translator.fixtures",
]


@pytest.fixture
def shared_data():
    """``../shared/data`` next to the checkout; skip when a user's clone does not have it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared corpora not present at {SHARED_DATA} (only CI and dev machines have them)")
    return SHARED_DATA


def _parse(path):
    """The syntax tree of a Python file; None if it cannot be read (its worker reports that when it collects it)."""
    try:
        return ast.parse(pathlib.Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None


def _fixture_scope(decorator):
    """The scope a ``@pytest.fixture`` / ``@pytest.fixture(scope=...)`` decorator gives; None for another one."""
    call = decorator if isinstance(decorator, ast.Call) else None
    target = call.func if call else decorator
    if (target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)) != "fixture":
        return None
    scopes = [k.value.value for k in (call.keywords if call else ())
              if k.arg == "scope" and isinstance(k.value, ast.Constant)]
    return scopes[0] if scopes else "function"


def _parameters(function):
    arguments = function.args
    return {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}


def _shared_session_fixtures():
    """{name: group} for the session-scoped fixtures of the ``pytest_plugins`` modules. A fixture's group is the
    first (by name) of the session fixtures at the bottom of its chain of session-scoped dependencies: ``learned_run``
    and ``pair_run`` need ``toy``, so the three are the group ``toy``."""
    needs = {}
    for module in pytest_plugins:
        tree = _parse(importlib.import_module(module).__file__)
        for node in tree.body if tree else ():
            if isinstance(node, ast.FunctionDef) and "session" in map(_fixture_scope, node.decorator_list):
                needs[node.name] = _parameters(node)

    def bottom(name, chain=()):
        below = [n for n in needs[name] if n in needs and n not in chain]
        return set().union(*(bottom(n, (*chain, name)) for n in below)) if below else {name}

    return {name: min(bottom(name)) for name in needs}


def _requested(path):
    """The fixture names a test file may ask for, read from its source: its functions' parameters (tests, fixtures,
    methods) and the ``usefixtures`` names, less the fixtures it defines itself (they override a plugin's)."""
    tree = _parse(path)
    if tree is None:
        return set()
    names, own = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names |= _parameters(node)
            if any(map(_fixture_scope, node.decorator_list)):
                own.add(node.name)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "usefixtures":
            names |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return names - own


def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadscope`` (the README's command) the unit of work is a test file, so its module-scoped
    fixtures are built once; each test class is a unit of its own (the notebook runs: tests/notebooks/
    test_notebooks.py); and the files that ask for the same shared session-scoped fixture (one of the
    ``pytest_plugins`` modules', with the session fixtures it needs) are one unit.

    Why: a session fixture is built once per worker that runs a test asking for it, and the shared ones train or
    build something (``toy``'s converted BERT with ``learned_run``'s 30 fine-tuning steps and ``pair_run``'s CLI run;
    ``qa_run``; ``flat_index``), so splitting their files over both workers would build each twice. Grouping by
    fixture rather than by folder keeps the units small: a folder such as tests/models/bert/ (pretraining, tagging,
    question answering, conversions, ...) as one unit would pin a large share of the suite to one worker, while wall
    time is the busier worker's. A file that asks for no shared session fixture goes wherever the balance wants it.
    xdist hands out the units with the most tests first, which puts the big groups early. The rule reads the test
    files' source (the controller collects nothing), so it needs no list: a new file that asks for ``toy`` joins the
    ``toy`` group. Session fixtures of a folder's conftest.py are not grouped (tests/serving/conftest.py's toy
    SavedModels take a moment to build: cheaper twice than chaining that folder's files onto one worker)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    shared = _shared_session_fixtures()
    groups = {}

    def group(path):
        if path not in groups:
            found = {shared[name] for name in _requested(config.rootpath / path) if name in shared}
            groups[path] = f"<session fixture {min(found)}>" if found else None
        return groups[path]

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            scope = nodeid.rsplit("::", 1)[0]
            return group(scope.split("::", 1)[0]) or scope

    return FileScheduling(config, log)
