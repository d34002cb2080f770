"""The question answering SavedModel: answers equal the in-process ones when loaded without kerasplm, the
bad-input battery on question and context, `kerasplm serve`, the CLI."""
import os

import numpy as np
import pytest

from kerasplm import serving
from kerasplm.cli import main
from kerasplm.export.base import read_metadata
from kerasplm.models.bert.question_answering_job import load_bert_qa
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, run_isolated
from tests.serving.client import http

QUESTIONS = ["Where does John live?", "Where does Anna sleep?", "who works in london", "", "Where?"]
CONTEXTS = ["John lives in Paris.", "Anna sleeps in the city of New York, and John works in Rome.",
            "Mary works in London and sleeps in Oslo. " * 4, "Mary works in Oslo.", ""]


@pytest.fixture(scope="module")
def exported(qa_run, tmp_path_factory):
    base = str(tmp_path_factory.mktemp("qa_export"))
    assert main(["export", "qa", "--run", qa_run[0], "--to", base]) == 0
    return os.path.join(base, "1"), load_bert_qa(qa_run[0]).answer(QUESTIONS, CONTEXTS)


def test_isolated_equals_in_process(exported):
    path, expected = exported
    (served,) = run_isolated(path, [("serving_default", {"question": QUESTIONS, "context": CONTEXTS})])
    assert served["answer"] == expected["answer"]
    assert expected["answer"][:2] == ["Paris", "New York"] and expected["answer"][4] == ""
    assert served["start"] == expected["start"].tolist() and served["end"] == expected["end"].tolist()
    np.testing.assert_allclose(served["score"], expected["score"], rtol=1e-4)
    meta = read_metadata(path)
    assert (meta["family"], meta["doc_stride"], meta["offsets"]) == ("bert_qa", 4, "characters")


def _consistent(texts, out):
    for row, text in enumerate(texts):
        context = text if isinstance(text, str) else text.decode("utf-8", "replace")
        start, end = int(out["start"][row]), int(out["end"][row])
        assert 0 <= start <= end <= len(context) and 0.0 <= out["score"][row] <= 1.0
        assert out["answer"][row] == context[start:end].encode()


def test_bad_inputs(exported):
    alone = check_bad_inputs(exported[0], "serving_default", "context", _consistent, normal=CONTEXTS[0],
                             extra_inputs={"question": lambda texts: texts})
    assert alone["empty"]["answer"][0] == b"" and alone["whitespace"]["score"][0] == 0.0


def test_served(exported):
    path, expected = exported
    server = serving.ModelServer(os.path.dirname(path), "qa", rest_api_port=0, grpc_port=None, quiet=True)
    server.start()
    try:
        # a long timeout: the first request runs the model's first call (slow on a loaded 2-core machine)
        status, body = http("POST", f"{server.url}/v1/models/qa:predict", {"instances": [
            {"question": q, "context": c} for q, c in zip(QUESTIONS[:2], CONTEXTS[:2])]}, timeout=300)
    finally:
        server.stop()
    assert status == 200, body
    assert [row["answer"] for row in body["predictions"]] == expected["answer"][:2]
    assert [row["start"] for row in body["predictions"]] == expected["start"][:2].tolist()


def test_batch_safe_with_warmup_records(exported):
    """TF Serving's batching rule holds for every signature, and the warmup records cover and replay on each."""
    check_batch_safe(exported[0])
    check_warmup(exported[0])
