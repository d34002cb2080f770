"""Shared test setup: quiet TensorFlow logs, the TensorFlow backend, paths to shared data."""
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

import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def _tensorflow_imported_first():
    """Each test process imports TensorFlow before its first test, on TensorFlow's default CPU kernels, as the
    Python API runs. An in-process ``cli.main(["train", ...])`` would otherwise import it first in some workers and
    turn oneDNN on for the rest of that worker (``kerasplm.cli.choose_cpu_kernels``), so a test's kernels would depend
    on the order the tests ran in. Training commands run as subprocesses still choose as a user's do."""
    import tensorflow  # noqa: F401


@pytest.fixture
def shared_data():
    """``../shared/data`` next to the checkout; skip when a user's clone does not have it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared corpora not present at {SHARED_DATA} (only CI and dev machines have them)")
    return SHARED_DATA



# Test files that use another file's module- or session-scoped fixtures (a trained run, an export) run on the
# same worker as that file, so the fixture is built once per suite rather than once per worker.
SAME_WORKER_AS = {
    "tests/export/test_classifier_export.py": "tests/models/bert/test_classifier_job.py",
    "tests/models/sentence_embedding/test_embedder_export.py": "tests/models/bert/test_classifier_job.py",
    "tests/models/sentence_embedding/test_simcse_job.py": "tests/models/bert/test_classifier_job.py",
    "tests/models/sentence_embedding/test_sbert_job.py": "tests/models/bert/test_classifier_job.py",
    "tests/models/bert/test_question_answering_export.py": "tests/models/bert/test_question_answering_job.py",
    "tests/models/distilbert/test_distillation_job.py": "tests/models/bert/test_classifier_job.py",
    "tests/models/sentence_embedding/test_retriever_export.py": "tests/models/sentence_embedding/test_vector_index.py",
}


def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadscope`` (the README's command): a test file is one unit of work (its fixtures are
    built once), files listed in SAME_WORKER_AS join the file whose fixtures they use, and each test class
    is a unit of its own (the notebook runs: tests/notebooks/test_notebooks.py)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            scope = nodeid.rsplit("::", 1)[0]
            path = scope.split("::", 1)[0]
            return SAME_WORKER_AS.get(path, scope)

    return FileScheduling(config, log)
