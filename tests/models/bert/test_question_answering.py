"""Extractive QA: character offsets of word pieces, windows with a document stride, answer labels, span
decoding on constructed logits, the model's loss terms."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.question_answering import BertQuestionAnswerer, QuestionAnswerPreprocessor, decode_answers
from kerasplm.text.bert_tokenizer import BertTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "e", "f", "g", "h", "who", "?", "caf",
         "##e", ",", "hello", "world", "中", "naive", "the", "##b", "!"]
LETTERS = "a b c d e f g h"


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(VOCAB)


def test_offsets_keep_ids_and_point_at_the_pieces(tokenizer):
    texts = ["Café, hello  World!", "", " \t ", "ab\u200bcd x[MASK]x", "中文 Naïve", b"ab\xff\xfe cd \xc3",
             "the\tA\nab\u00a0e", "Cafe\u0301 e", "x" * 120 + " hello"]
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(texts))
    assert ids.to_list() == tokenizer.tokenize(tf.constant(texts)).to_list()       # same ids as tokenize
    spans = [[(t if isinstance(t, str) else t.decode("utf-8", "replace"))[s:e] for s, e in zip(row_s, row_e)]
             for t, row_s, row_e in zip(texts, starts.to_list(), ends.to_list())]
    # exact pieces where normalization keeps the length; the whole word where it does not (NFD "e\u0301",
    # removed characters, [UNK] for a word over 100 characters)
    assert spans[0] == ["Caf", "é", ",", "hello", "World", "!"]
    assert spans[3] == ["ab\u200bcd", "x", "[MASK]", "x"] and spans[4] == ["中", "文", "Naïve"]
    assert spans[5] == ["ab\ufffd\ufffd", "ab\ufffd\ufffd", "cd"]            # invalid bytes count as U+FFFD
    assert spans[6] == ["the", "A", "a", "b", "e"] and spans[7] == ["Cafe\u0301", "Cafe\u0301", "e"]
    assert spans[8] == ["x" * 120, "hello"]
    assert spans[1] == spans[2] == []


def test_windows_cover_the_context_with_stride(tokenizer):
    pre = QuestionAnswerPreprocessor(tokenizer, sequence_length=10, doc_stride=2, max_query_length=2)
    out = {k: v.numpy() for k, v in pre(["who ? who", "who", ""], [LETTERS, "a b", ""], [4, 0, -1], [7, 1, -1]).items()}
    # question cut to 2 pieces; 5 context pieces per window, starts 0, 2, 4 (the last one reaches "h")
    np.testing.assert_array_equal(out["token_ids"][:3], [[2, 13, 14, 3, 5, 6, 7, 8, 9, 3],
                                                         [2, 13, 14, 3, 7, 8, 9, 10, 11, 3],
                                                         [2, 13, 14, 3, 9, 10, 11, 12, 3, 0]])
    np.testing.assert_array_equal(out["segment_ids"][0], [0, 0, 0, 0, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(out["example_index"], [0, 0, 0, 1, 2])       # an empty context keeps a window
    np.testing.assert_array_equal(out["token_ids"][4], [2, 3, 3, 0, 0, 0, 0, 0, 0, 0])
    # every context piece is in some window, with its characters; exactly one window is its "max context"
    starts, ends, best = out["token_start"][:3], out["token_end"][:3], out["max_context"][:3]
    assert sorted(set(starts[starts >= 0])) == [0, 2, 4, 6, 8, 10, 12, 14]
    assert all(LETTERS[s:e] == LETTERS[s] for s, e in zip(starts[starts >= 0], ends[starts >= 0]))
    assert sorted(starts[best]) == [0, 2, 4, 6, 8, 10, 12, 14]
    # scores min(left, right) + 0.01 n: "d" ties between windows 0 and 1 (the first wins), "f" goes to window 1
    np.testing.assert_array_equal(best[:, 4:9], [[1, 1, 1, 1, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 0]])
    assert not out["max_context"][:3, :4].any() and (out["token_start"][:3, :4] == -1).all()
    # answer "c d" (characters [4, 7)): pieces 2..3, inside windows 0 and 1 only; "a" of row 1; none for row 2
    np.testing.assert_array_equal(out["start_positions"], [6, 4, 0, 3, 0])
    np.testing.assert_array_equal(out["end_positions"], [7, 5, 0, 3, 0])


def test_preprocessor_checks_its_lengths(tokenizer):
    with pytest.raises(ValueError, match="max_query_length=7 leaves no context piece"):
        QuestionAnswerPreprocessor(tokenizer, sequence_length=10, max_query_length=7)
    with pytest.raises(ValueError, match="doc_stride must be an integer >= 1"):
        QuestionAnswerPreprocessor(tokenizer, sequence_length=10, doc_stride=0)


def test_decoding_picks_the_best_valid_span_across_windows(tokenizer):
    pre = QuestionAnswerPreprocessor(tokenizer, sequence_length=10, doc_stride=2, max_query_length=2,
                                     pad_to_length=False)
    contexts = [LETTERS, "", "Café hello"]
    features = pre(["who ?", "who", "who"], contexts)
    start, end = np.full((5, 10), -5.0, np.float32), np.full((5, 10), -5.0, np.float32)
    start[:, 0] = end[:, 0] = 50.0                   # [CLS] is never an answer
    start[0, 8], end[0, 5] = 9.0, 9.0                # end before start: not a span
    start[0, 6], end[0, 7] = 3.0, 3.0                # "c d" in window 0 (sum 6) ...
    start[1, 6], end[1, 7] = 4.0, 3.0                # ... "e f" in window 1 (7) is better
    start[2, 6], end[2, 6] = 8.0, 8.0                # "g" in window 2, but g's max-context window is 2: best
    start[1, 4], end[1, 4] = 20.0, 20.0              # "c" in window 1: not its max-context window, cannot start
    start[4, 3], end[4, 5] = 2.0, 2.0                # "Café hello" (pieces caf ##e hello)
    out = decode_answers(tf.constant(contexts), features, start, end)
    assert out["answer"].numpy().tolist() == [b"g", b"", b"Caf\xc3\xa9 hello"]
    np.testing.assert_array_equal(out["start"], [12, 0, 0])
    np.testing.assert_array_equal(out["end"], [13, 0, 10])
    # score: P(start) P(end) under the window's softmax over its context pieces
    window = np.where(features["token_start"].numpy()[2] >= 0, start[2], -np.inf)
    p = np.exp(8.0 - np.log(np.exp(window[np.isfinite(window)]).sum()))
    np.testing.assert_allclose(out["score"][0], p * p, rtol=1e-5)
    assert out["score"][1] == 0.0
    # a maximum answer length of 1 piece forbids "Café hello" (3 pieces)
    short = decode_answers(tf.constant(contexts), features, start, end, max_answer_length=1)
    assert short["answer"][2].numpy() != b"Caf\xc3\xa9 hello"


def test_model_loss_is_the_mean_of_start_and_end_cross_entropy(tokenizer):
    keras.utils.set_random_seed(0)
    model = BertQuestionAnswerer(BertBackbone(vocab_size=len(VOCAB), num_layers=1, hidden_size=16, num_heads=2,
                                              intermediate_size=32, max_positions=16))
    batch = QuestionAnswerPreprocessor(tokenizer, sequence_length=10, doc_stride=3, max_query_length=2)(
        ["who"], [LETTERS], [2], [5])
    out = model({k: batch[k] for k in ("token_ids", "segment_ids", "padding_mask")})
    assert out["start_logits"].shape == (2, 10) and out["start_logits"].dtype == tf.float32
    assert (out["end_logits"].numpy()[batch["padding_mask"].numpy() == 0] == -1e9).all()
    sums = model.compute_loss_sums(batch, training=False)
    expected = {side: tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(batch[f"{side}_positions"], tf.int32), logits=out[f"{side}_logits"]).numpy().sum()
        for side in ("start", "end")}
    for side in ("start", "end"):
        total, count, weight = sums["losses"][side]
        np.testing.assert_allclose(total, expected[side], rtol=1e-5)
        assert (float(count), weight) == (2.0, 0.5)
