"""Preprocessors: segment packing / padding against BERT's rules, and the translator's [START]/[END] rule
against the behaviour it replaces (ids must not change for existing run directories)."""
import itertools

import numpy as np
import pytest
import tensorflow as tf

from kerasplm.text import (TranslatorPreprocessor, WordPieceTokenizer, build_wordpiece_vocab, pack_segments,
                           pad_packed)
from tests.text.legacy_ids import old_translator_ids

CORPUS = ["¿Puedo tomar prestado este libro?", "Él está aquí, ¡qué bien!", "I don't know it.",
          "Where is the book? It is here."] * 3
SENTENCES = CORPUS[:4] + ["", "   ", " ".join(["libro"] * 30), b"ab\xff\xfe libro", "中 book ¿?"]


@pytest.fixture(scope="module")
def tok():
    return WordPieceTokenizer(build_wordpiece_vocab(CORPUS, vocab_size=200, learn_params=dict(lower_thresh=1)))


def _ragged(rows):
    return tf.RaggedTensor.from_row_lengths(tf.constant([x for r in rows for x in r], tf.int64),
                                            [len(r) for r in rows])


def _bert_truncate_seq_pair(a, b, max_tokens):
    """BERT's run_classifier._truncate_seq_pair: pop from the longer list (the second on ties)."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_tokens:
        (a if len(a) > len(b) else b).pop()
    return a, b


def test_pack_two_segments_like_bert():
    cls, sep = 101, 102
    lengths = list(itertools.product(range(5), range(5)))          # every (len A, len B) pair: one row each
    a = [list(range(10, 10 + n)) for n, _ in lengths]
    b = [list(range(50, 50 + n)) for _, n in lengths]
    for max_length in range(3, 11):
        ids, segments = pack_segments([_ragged(a), _ragged(b)], cls, sep, max_length=max_length)
        pairs = [_bert_truncate_seq_pair(x, y, max_length - 3) for x, y in zip(a, b)]
        assert ids.to_list() == [[cls] + ta + [sep] + tb + [sep] for ta, tb in pairs]
        assert segments.to_list() == [[0] * (len(ta) + 2) + [1] * (len(tb) + 1) for ta, tb in pairs]


def test_pack_one_segment_keeps_the_end_token():
    rows = [[], [7], [7, 8, 9, 10, 11]]
    ids, segments = pack_segments([_ragged(rows)], 2, 3, max_length=4)
    assert ids.to_list() == [[2, 3], [2, 7, 3], [2, 7, 8, 3]]
    assert segments.to_list() == [[0, 0], [0, 0, 0], [0, 0, 0, 0]]
    assert pack_segments([_ragged(rows)], 2, 3)[0].to_list() == [[2, 3], [2, 7, 3], [2, 7, 8, 9, 10, 11, 3]]
    with pytest.raises(ValueError, match="max_length=2 cannot hold the 3 special tokens of 2 segment"):
        pack_segments([_ragged(rows), _ragged(rows)], 2, 3, max_length=2)
    with pytest.raises(ValueError, match="at least one segment"):
        pack_segments([], 2, 3)


def test_pad_packed_gives_fixed_width_inputs_and_mask():
    ids, segments = pack_segments([_ragged([[7, 8], [9]]), _ragged([[5], []])], 101, 102, max_length=6)
    out = pad_packed(ids, segments, sequence_length=6)
    assert out["token_ids"].numpy().tolist() == [[101, 7, 8, 102, 5, 102], [101, 9, 102, 102, 0, 0]]
    assert out["segment_ids"].numpy().tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 0, 0]]
    assert out["input_mask"].numpy().tolist() == [[1] * 6, [1, 1, 1, 1, 0, 0]]
    assert pad_packed(ids, segments, sequence_length=3)["token_ids"].shape == (2, 3)


def test_translator_ids_equal_the_old_behaviour(tok):
    texts = tf.constant(SENTENCES)
    for max_source_length, max_target_length in ((None, 3), (6, 12)):
        pre = TranslatorPreprocessor(tok, tok, max_source_length=max_source_length,
                                     max_target_length=max_target_length)
        assert pre.source_ids(texts).to_list() == old_translator_ids(tok.vocab, SENTENCES, max_source_length)
        expected = old_translator_ids(tok.vocab, SENTENCES, max_target_length)
        assert pre.target_ids(texts).to_list() == expected
        assert any(len(r) == max_target_length and r[-1] == 3 for r in expected)   # some row was cut


def test_detokenize_target_stops_at_the_first_end(tok):
    pre = TranslatorPreprocessor(tok, tok)
    book, here = (tok.tokenize(tf.constant([w])).to_list()[0] for w in ("book", "here"))
    ids = [[2] + book + [0, 3] + here + [3, 0, 0], [2] + here + [0] * (len(book) + 5)]
    expected = [b"book", b"here"]
    assert pre.detokenize_target(tf.constant(ids, tf.int32)).numpy().tolist() == expected
    assert pre.detokenize_target(tf.ragged.constant(ids, tf.int64)).numpy().tolist() == expected
    assert pre.detokenize_target(tf.zeros([0, 5], tf.int32)).shape == (0,)


def test_round_trip_through_the_preprocessor(tok):
    pre = TranslatorPreprocessor(tok, tok, max_target_length=40)
    ids = pre.target_ids(tf.constant(CORPUS[:4]))
    assert [t.decode() for t in pre.detokenize_target(ids).numpy()] == [
        "¿puedo tomar prestado este libro?", "el esta aqui, ¡que bien!", "i don't know it.",
        "where is the book? it is here."]


def test_translator_vocabularies_are_validated(tok):
    bert = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"])
    with pytest.raises(ValueError, match=r"target vocabulary lacks the translator's special token\(s\) "
                                         r"\[START\], \[END\]"):
        TranslatorPreprocessor(tok, bert)
    shifted = WordPieceTokenizer(["[UNK]", "[PAD]", "[START]", "[END]", "a"])
    with pytest.raises(ValueError, match=r"source vocabulary has \[PAD\] at id 1"):
        TranslatorPreprocessor(shifted, tok)
    for bad in (1, 0, 2.5, True):
        with pytest.raises(ValueError, match="max_source_length must be an integer >= 2"):
            TranslatorPreprocessor(tok, tok, max_source_length=bad)


def test_usable_in_tf_data(tok):
    pre = TranslatorPreprocessor(tok, tok, max_source_length=5)
    ds = tf.data.Dataset.from_tensor_slices(SENTENCES[:4]).batch(2).map(pre.source_ids)
    rows = [r for batch in ds for r in batch.to_list()]
    assert rows == old_translator_ids(tok.vocab, SENTENCES[:4], 5)
    assert np.all([len(r) <= 5 for r in rows])


def test_trim_to_bucket_cuts_every_sequence_tensor_to_the_rounded_longest_row():
    from kerasplm.text.preprocessing import trim_to_bucket

    mask = tf.constant([[1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]])      # longest 5 -> 6 with multiple 3
    batch = ({"token_ids": mask * 7, "pair": tf.stack([mask, mask], 1)},            # [B, L] and [B, 2, L]
             {"labels": mask * 2, "label": tf.constant([1, 0]), "classes": tf.zeros([2, 5])})
    inputs, targets = trim_to_bucket(batch, mask, 3)
    assert inputs["token_ids"].shape == (2, 6) and inputs["pair"].shape == (2, 2, 6)
    np.testing.assert_array_equal(targets["labels"], (mask * 2)[:, :6])
    assert targets["label"].shape == (2,) and targets["classes"].shape == (2, 5)   # not the sequence's width
    # Never wider than the mask, never narrower than one bucket (an empty batch keeps well-defined shapes).
    assert trim_to_bucket(mask, mask, 16).shape == (2, 8)
    assert trim_to_bucket(tf.zeros([0, 8]), tf.zeros([0, 8]), 4).shape == (0, 4)
    with pytest.raises(ValueError, match="static width"):
        tf.function(lambda m: trim_to_bucket(m, m, 4),
                    input_signature=[tf.TensorSpec([None, None])]).get_concrete_function()
