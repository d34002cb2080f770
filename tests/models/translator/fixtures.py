"""Translator fixtures shared by several test files; tests/conftest.py loads this module for the whole suite
(``pytest_plugins``), so a test asks for them by name and imports nothing from another test file.

Module-scoped (each module that asks writes its own): ``tiny_tsv`` (the toy pairs as a training file: the job's and
the budget schedule's tests).

Every pytest process loads this module at startup, the xdist controller too, which runs no test: so nothing heavy is
imported at the top."""
import pytest

from tests.models.translator.toys import PAIRS


@pytest.fixture(scope="module")
def tiny_tsv(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "pairs.tsv"
    path.write_text("".join(f"{en}\t{es}\n" for en, es in PAIRS * 3), encoding="utf-8")
    return str(path)
