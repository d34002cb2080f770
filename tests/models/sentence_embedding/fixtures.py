"""Sentence-embedding fixtures shared by several test files; tests/conftest.py loads this module for the whole suite
(``pytest_plugins``), so a test asks for them by name and imports nothing from another test file.

Session-scoped (built once per worker; tests/conftest.py runs the files that use them on one worker): ``flat_index``
(the vector index's tests and the retriever export's).

Every pytest process loads this module at startup, the xdist controller too, which runs no test: so nothing heavy is
imported at the top; each fixture imports what it needs when it is built (the files that use ``flat_index`` skip
without faiss before it is built)."""
import pytest


@pytest.fixture(scope="session")
def flat_index(tmp_path_factory):
    """The run, a 50-line corpus (with a blank line) and a 10-line addition, a flat index built through the CLI, the
    run's parts and the index's encoder (shared with the retriever export's tests)."""
    from kerasplm.cli import main
    from kerasplm.models.sentence_embedding.embedder import bert_run_parts
    from kerasplm.models.sentence_embedding.vector_index import load_embedder, load_index
    from tests.models.bert.qa_toy import make_init_run
    from tests.models.sentence_embedding.toys import SEQUENCE_LENGTH, corpus_lines

    root = tmp_path_factory.mktemp("index")
    run = make_init_run(root / "run")
    lines = corpus_lines(60, 0)
    corpus, more = root / "corpus.txt", root / "more.txt"
    corpus.write_text("\n".join(lines[:25]) + "\n\n" + "\n".join(lines[25:50]) + "\n", encoding="utf-8")
    more.write_text("\n".join(lines[50:]) + "\n", encoding="utf-8")
    assert main(["index", "build", "--embedder", run, "--corpus", str(corpus), "--out", str(root / "flat"),
                 "--sequence-length", str(SEQUENCE_LENGTH)]) == 0
    flat = load_index(root / "flat")
    return {"root": root, "run": run, "lines": lines, "corpus": str(corpus), "more": str(more),
            "flat": str(root / "flat"), "parts": bert_run_parts(run), "encoder": load_embedder(flat)}
