"""The BERT tagger SavedModel: text -> entity spans, loaded without kerasplm, bad-input battery."""
import numpy as np
import pytest

from kerasplm.export.base import read_metadata
from kerasplm.models.bert.tagger_export import export_tagger
from kerasplm.models.bert.tagger import BertTaggerPreprocessor, tag_texts
from kerasplm.text import WordPieceTokenizer
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, run_isolated
from tests.models.bert.tagger_toy import TAGS, VOCAB, tiny_tagger

TEXTS = ["Johanson lives in New York.", "in new york in 1996", ""]


@pytest.fixture(scope="module")
def tagger():
    model = tiny_tagger()
    # Bias the head so that a random tiny model still predicts entities (B-PER over LOC, I-PER next).
    model.head.bias.assign(np.array([0.0, -5.0, -5.0, 0.2, 0.1], np.float32))
    return model, BertTaggerPreprocessor(WordPieceTokenizer(VOCAB), sequence_length=16)


@pytest.fixture(scope="module")
def exported(tagger, tmp_path_factory):
    model, preprocessor = tagger
    return export_tagger(model, preprocessor, TAGS, tmp_path_factory.mktemp("tagger"))


def _spans_consistent(texts, out):
    for row, text in enumerate(texts):
        n = int(out["count"][row])
        chars = (text if isinstance(text, str) else text.decode("utf-8", "replace"))
        for i in range(n):
            start, end = int(out["start"][row, i]), int(out["end"][row, i])
            assert 0 <= start < end <= len(chars)
            assert chars[start:end].encode() == out["entity_text"][row, i]
            assert out["entity_label"][row, i] in (b"PER", b"LOC") and 0 < out["score"][row, i] <= 1
        assert (out["entity_text"][row, n:] == b"").all()


def test_export_matches_eager_and_loads_without_kerasplm(tagger, exported):
    model, preprocessor = tagger
    eager = tag_texts(model, preprocessor, TEXTS, TAGS)
    served, = run_isolated(exported, [("serving_default", {"text": TEXTS})])
    assert served["count"] == eager["start"].row_lengths().numpy().tolist() and served["count"][0] > 0
    for name in ("entity_text", "entity_label", "start", "end"):
        expected = [[v.decode() if isinstance(v, bytes) else v for v in row] for row in eager[name].to_list()]
        assert [row[:n] for row, n in zip(served[name], served["count"])] == expected
    np.testing.assert_allclose(served["score"][0][:served["count"][0]], eager["score"][0].numpy(), rtol=1e-5)
    assert read_metadata(exported)["labels"] == TAGS


def test_bad_inputs(exported):
    alone = check_bad_inputs(exported, "serving_default", "text", _spans_consistent, normal=TEXTS[0])
    assert alone["empty"]["count"][0] == 0 and alone["whitespace"]["count"][0] == 0


def test_label_count_checked(tagger, tmp_path):
    with pytest.raises(ValueError, match="2 label names for a model with num_labels=5"):
        export_tagger(tagger[0], tagger[1], ["O", "B-PER"], tmp_path)


def test_crf_tagger_exports_with_viterbi_in_graph(tagger, tmp_path):
    model, preprocessor = tagger
    crf_model = tiny_tagger(crf=True)
    crf_model.set_weights(model.get_weights() + [w.numpy() for w in crf_model.crf.weights])
    # a B-PER may not follow a B-PER: the Viterbi path differs from the per-word argmax (all B-PER here)
    transitions = np.zeros((5, 5), np.float32)
    transitions[3, 3] = -50.0
    crf_model.crf.transitions.assign(transitions)
    eager = tag_texts(crf_model, preprocessor, TEXTS, TAGS)
    assert eager["start"].to_list() != tag_texts(model, preprocessor, TEXTS, TAGS)["start"].to_list()
    path = export_tagger(crf_model, preprocessor, TAGS, tmp_path / "crf")
    served, = run_isolated(path, [("serving_default", {"text": TEXTS})])
    assert served["count"] == eager["start"].row_lengths().numpy().tolist()
    for name in ("start", "end"):
        assert [row[:n] for row, n in zip(served[name], served["count"])] == eager[name].to_list()
    np.testing.assert_allclose(served["score"][0][:served["count"][0]], eager["score"][0].numpy(), rtol=1e-5)
    assert read_metadata(path)["crf"] is True


def test_batch_safe_with_warmup_records(exported):
    """TF Serving's batching rule holds for every signature, and the warmup records cover and replay on each."""
    check_batch_safe(exported)
    check_warmup(exported)
