"""BERT token classification: first-piece label alignment, masked loss, harness checks."""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.bert.tagger import (BertTaggerPreprocessor, BertTokenClassifier, decode_entities, piece_tags,
                                       split_words_with_offsets, tag_texts)
from kerasplm.text import WordPieceTokenizer
from tests.harness import check_model
from tests.models.bert.tagger_toy import TAGS, VOCAB, tiny_tagger

WORDS = [["Johanson", "lives", "in", "New", "York", "."], ["1996-08-30", "\x01", "in"]]
LABELS = [[1, 0, 0, 2, 3, 0], [0, 4, 0]]


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer(VOCAB)


@pytest.fixture(scope="module")
def preprocessor(tokenizer):
    return BertTaggerPreprocessor(tokenizer, sequence_length=12)


def test_alignment_labels_first_pieces(preprocessor):
    out = {k: v.numpy() for k, v in preprocessor(WORDS, LABELS).items()}
    # [CLS] johan ##son lives in new york . [SEP] | [CLS] 1996 - 08 - 30 [UNK](\x01) in [SEP]
    np.testing.assert_array_equal(out["token_ids"], [[2, 5, 6, 7, 8, 9, 10, 15, 3, 0, 0, 0],
                                                     [2, 11, 12, 13, 12, 14, 1, 8, 3, 0, 0, 0]])
    np.testing.assert_array_equal(out["padding_mask"], [[1] * 9 + [0] * 3] * 2)
    np.testing.assert_array_equal(out["segment_ids"], np.zeros((2, 12)))
    # labels sit on the first piece of each word only ("##son" and "- 08 - 30" carry none)
    np.testing.assert_array_equal(out["word_index"], [[-1, 0, -1, 1, 2, 3, 4, 5, -1, -1, -1, -1],
                                                      [-1, 0, -1, -1, -1, -1, 1, 2, -1, -1, -1, -1]])
    np.testing.assert_array_equal(out["label_weights"], out["word_index"] >= 0)
    np.testing.assert_array_equal(out["labels"], [[0, 1, 0, 0, 0, 2, 3, 0, 0, 0, 0, 0],
                                                  [0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0]])


def test_alignment_truncates_keeping_sep_and_runs_in_graph(tokenizer):
    short = BertTaggerPreprocessor(tokenizer, sequence_length=6)
    fn = tf.function(lambda w, l: short(w, l))
    out = fn(tf.ragged.constant(WORDS), tf.ragged.constant(LABELS, dtype=tf.int64))
    # 4 pieces fit: johan ##son lives in | 1996 - 08 - : the cut words lose their labels
    np.testing.assert_array_equal(out["token_ids"], [[2, 5, 6, 7, 8, 3], [2, 11, 12, 13, 12, 3]])
    np.testing.assert_array_equal(out["word_index"], [[-1, 0, -1, 1, 2, -1], [-1, 0, -1, -1, -1, -1]])
    np.testing.assert_array_equal(out["labels"][0], [0, 1, 0, 0, 0, 0])
    no_labels = short([["in"], []])
    assert "labels" not in no_labels and no_labels["label_weights"].numpy().sum() == 1
    with pytest.raises(tf.errors.InvalidArgumentError, match="one label id per word"):
        short([["in", "in"]], [[0]])
    with pytest.raises(ValueError, match="sequence_length must be an integer >= 3"):
        BertTaggerPreprocessor(tokenizer, sequence_length=2)


def test_loss_equals_numpy_over_first_pieces(preprocessor):
    model = tiny_tagger()
    batch = preprocessor(WORDS, LABELS)
    sums = model.compute_loss_sums(batch, training=False)
    inputs = {k: batch[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    logits = model(inputs, training=False).numpy().astype(np.float64)
    log_p = logits - logits.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    first = batch["word_index"].numpy() >= 0                            # 6 + 3 word-initial pieces
    labels = batch["labels"].numpy()
    expected = -sum(log_p[b, t, labels[b, t]] for b, t in zip(*np.nonzero(first)))
    assert float(sums["weight"]) == 9.0
    np.testing.assert_allclose(float(sums["loss"]), expected, rtol=1e-5)
    correct = sum(logits[b, t].argmax() == labels[b, t] for b, t in zip(*np.nonzero(first)))
    assert float(sums["accuracy"]) == correct
    # changing a label on an ignored piece (##son) changes nothing; on a first piece it does
    changed = dict(batch, labels=tf.tensor_scatter_nd_update(batch["labels"], [[0, 2]], tf.constant([4], tf.int64)))
    assert float(model.compute_loss_sums(changed, training=False)["loss"]) == pytest.approx(float(sums["loss"]))
    changed = dict(batch, labels=tf.tensor_scatter_nd_update(batch["labels"], [[0, 1]], tf.constant([4], tf.int64)))
    assert float(model.compute_loss_sums(changed, training=False)["loss"]) != pytest.approx(float(sums["loss"]))


def test_harness(tmp_path, preprocessor):
    batch = preprocessor(WORDS, LABELS)
    inputs = {k: batch[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    model = check_model(tiny_tagger, inputs, expected_shapes=(2, 12, 5), tmp_path=tmp_path)
    assert model.get_config()["num_labels"] == 5 and model.get_config()["dropout"] == 0.1
    with pytest.raises(ValueError, match="num_labels"):
        BertTokenClassifier(model.backbone, num_labels=0)


def test_decode_entities_character_offsets(preprocessor):
    texts = tf.constant(["Ünal lives in  New York.", "Jo", "", "a b c d e f g h i j k l m"])
    words = split_words_with_offsets(texts)
    assert words[0][0].numpy().tolist() == [w.encode() for w in ["Ünal", "lives", "in", "New", "York", "."]]
    inputs = preprocessor(words[0])
    # one tag per word (IOB1): "Ünal"=I-PER, "New York"=I-LOC I-LOC; the 13 one-letter words B-LOC each,
    # but only 10 fit in 12 positions ([CLS] + 10 + [SEP]).
    wanted = [[4, 0, 0, 2, 2, 0], [3], [], [1] * 13]
    word_index = inputs["word_index"].numpy()
    logits = np.zeros(word_index.shape + (5,), np.float32)
    for b, t in zip(*np.nonzero(word_index >= 0)):
        logits[b, t, wanted[b][word_index[b, t]]] = 5.0
    out = decode_entities(texts, tf.constant(logits), inputs["word_index"], words, TAGS)
    assert out["entity_text"].to_list() == [["Ünal".encode(), b"New York"], [b"Jo"], [],
                                           [c.encode() for c in "abcdefghij"]]
    assert out["entity_label"].to_list()[:2] == [[b"PER", b"LOC"], [b"PER"]]
    # character (not byte) offsets: "Ü" is 2 bytes but one character; two spaces before "New"
    assert out["start"].to_list()[:3] == [[0, 15], [0], []] and out["end"].to_list()[:3] == [[4, 23], [2], []]
    assert out["start"].to_list()[3] == list(range(0, 20, 2))
    # score: the chosen tag's probability e^5 / (e^5 + 4), averaged over the entity's words
    np.testing.assert_allclose(out["score"].flat_values.numpy(), np.exp(5) / (np.exp(5) + 4), rtol=1e-6)


def test_tag_texts_end_to_end(preprocessor):
    model = tiny_tagger()
    out = tag_texts(model, preprocessor, ["Johanson lives in New York.", ""], TAGS)
    assert out["entity_text"].nrows() == 2 and out["entity_text"].row_lengths().numpy()[1] == 0
    for text, start, end in zip(out["entity_text"][0].numpy(), out["start"][0].numpy(), out["end"][0].numpy()):
        assert "Johanson lives in New York."[start:end].encode() == text


def test_crf_tagger_loss_is_the_word_sequences_nll(preprocessor, tmp_path):
    model = tiny_tagger(crf=True)
    rng = np.random.default_rng(0)
    for weight in model.crf.weights:
        weight.assign(rng.normal(size=weight.shape).astype(np.float32))
    batch = preprocessor(WORDS, LABELS)
    sums = model.compute_loss_sums(batch, training=False)
    inputs = {k: batch[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    logits = model(inputs, training=False).numpy()
    first = batch["word_index"].numpy() >= 0
    # the CRF sees each sentence's words only: their first-piece logits, in order, padded after them
    emissions = np.zeros((2, 12, 5), np.float32)
    tags, mask = np.zeros((2, 12), np.int32), np.zeros((2, 12), bool)
    for row in range(2):
        n = first[row].sum()
        emissions[row, :n], tags[row, :n] = logits[row][first[row]], batch["labels"].numpy()[row][first[row]]
        mask[row, :n] = True
    expected = -model.crf.log_likelihood(emissions, tags, mask).numpy().sum()
    np.testing.assert_allclose(float(sums["loss"]), expected, rtol=1e-5)
    assert float(sums["weight"]) == 9.0
    viterbi = model.crf.viterbi_decode(emissions, mask)[0].numpy()
    assert float(sums["accuracy"]) == ((viterbi == tags) & mask).sum()
    # decoding reads the Viterbi path back to the words' first pieces; scores are marginals in (0, 1]
    piece_tag, piece_score = piece_tags(logits, tf.constant(first), model.crf)
    for row in range(2):
        np.testing.assert_array_equal(piece_tag.numpy()[row][first[row]], viterbi[row, :first[row].sum()])
    assert ((piece_score.numpy()[first] > 0) & (piece_score.numpy()[first] <= 1 + 1e-6)).all()
    check_model(lambda: tiny_tagger(crf=True), inputs, expected_shapes=(2, 12, 5), tmp_path=tmp_path,
                checks=("config", "checkpoint"))
