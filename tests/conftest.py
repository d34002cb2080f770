"""Shared test setup: quiet TensorFlow logs, the TensorFlow backend, paths to shared data."""
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data():
    """``../shared/data`` next to the checkout; skip when a user's clone does not have it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared corpora not present at {SHARED_DATA} (only CI and dev machines have them)")
    return SHARED_DATA

