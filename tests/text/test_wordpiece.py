"""WordPieceTokenizer and the vocabulary builder, on a tiny generated corpus."""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.text import WordPieceTokenizer, build_wordpiece_vocab, read_vocab, write_vocab

CORPUS = [
    "¿Puedo tomar prestado este libro?",
    "Él está aquí, ¡qué bien!",
    "I don't know it.",
    "Tom can't swim; he's afraid: really.",
    "Where is the book? It is here.",
] * 3
LEARN = dict(lower_thresh=1)


@pytest.fixture(scope="module")
def vocab():
    return build_wordpiece_vocab(CORPUS, vocab_size=300, learn_params=LEARN)


@pytest.fixture(scope="module")
def tok(vocab):
    return WordPieceTokenizer(vocab)


def test_reserved_ids(vocab, tok):
    assert vocab[:4] == ["[PAD]", "[UNK]", "[START]", "[END]"]
    assert (tok.pad_id, tok.unk_id, tok.start_id, tok.end_id) == (0, 1, 2, 3)
    assert tok.vocab_size == len(vocab) == int(tok.get_vocab_size())
    assert [t.decode() for t in tok.get_reserved_tokens().numpy()] == vocab[:4]


def test_vocab_builder_is_deterministic(vocab):
    again = build_wordpiece_vocab(tf.data.Dataset.from_tensor_slices(CORPUS), vocab_size=300,
                                  learn_params=LEARN)
    assert again == vocab


def test_vocab_builder_rejects_empty_corpus():
    with pytest.raises(ValueError, match="empty corpus"):
        build_wordpiece_vocab([])
    with pytest.raises(ValueError, match="empty corpus"):
        build_wordpiece_vocab(tf.data.Dataset.from_tensor_slices(tf.constant([], tf.string)))


def test_vocab_file_round_trip(vocab, tmp_path):
    path = tmp_path / "vocab.txt"
    write_vocab(vocab, path)
    assert read_vocab(path) == vocab
    assert WordPieceTokenizer(str(path)).vocab == vocab


def test_round_trip_normalizes_accents_case_and_punctuation(tok):
    ids = tok.tokenize(tf.constant(CORPUS[:5]))
    assert ids.dtype == tf.int64 and isinstance(ids, tf.RaggedTensor)
    assert [t.decode() for t in tok.detokenize(ids).numpy()] == [
        "¿puedo tomar prestado este libro?",
        "el esta aqui, ¡que bien!",
        "i don't know it.",
        "tom can't swim; he's afraid: really.",
        "where is the book? it is here.",
    ]
    # Dense (zero-padded) ids give the same text.
    assert np.array_equal(tok.detokenize(ids.to_tensor()).numpy(), tok.detokenize(ids).numpy())


def test_punctuation_is_split_into_tokens(tok):
    tokens = tok.lookup(tok.tokenize(tf.constant(["¿Puedo?", "¡Bien!"]))).to_list()
    assert tokens[0][:3] == [b"[START]", "¿".encode(), b"puedo"]
    assert tokens[1][:3] == [b"[START]", "¡".encode(), b"bien"]


def test_start_end_and_ragged_batch(tok):
    ids = tok.tokenize(tf.constant(["here", "where is the book?", ""])).to_list()
    assert len({len(r) for r in ids}) == 3                 # ragged: one length per row
    for row in ids:
        assert row[0] == tok.start_id and row[-1] == tok.end_id
    assert ids[2] == [tok.start_id, tok.end_id]          # empty string -> [START, END]


def test_unknown_characters_map_to_unk(tok):
    ids = tok.tokenize(tf.constant(["中 book"])).to_list()[0]
    assert tok.unk_id in ids
    assert tok.detokenize(tf.ragged.constant([ids], tf.int64)).numpy()[0] == b"[UNK] book"


def test_invalid_utf8_does_not_crash(tok):
    ids = tok.tokenize(tf.constant([b"\xff\xfe book"])).to_list()[0]
    assert ids[0] == tok.start_id and ids[-1] == tok.end_id and tok.unk_id in ids
    assert tok.detokenize(tf.ragged.constant([ids], tf.int64)).numpy()[0].endswith(b"book")


def test_detokenize_stops_at_first_end_and_drops_reserved(tok):
    book = tok.tokenize(tf.constant(["book"])).to_list()[0][1:-1]
    here = tok.tokenize(tf.constant(["here"])).to_list()[0][1:-1]
    ids = [[tok.start_id] + book + [tok.pad_id, tok.end_id] + here + [tok.end_id, 0, 0]]
    assert tok.detokenize(tf.constant(ids, tf.int64)).numpy().tolist() == [b"book"]


def test_saved_model_round_trip(tok, tmp_path):
    texts = tf.constant(CORPUS[:5] + [""])
    ids = tok.tokenize(texts)
    tf.saved_model.save(tok, str(tmp_path / "tok"))
    assert (tmp_path / "tok" / "assets" / "vocab.txt").exists()
    loaded = tf.saved_model.load(str(tmp_path / "tok"))
    assert loaded.tokenize(texts).to_list() == ids.to_list()
    assert loaded.detokenize(ids).numpy().tolist() == tok.detokenize(ids).numpy().tolist()
    assert loaded.detokenize(ids.to_tensor()).numpy().tolist() == tok.detokenize(ids).numpy().tolist()
    assert int(loaded.get_vocab_size()) == tok.vocab_size
    assert loaded.get_vocab_path().numpy().decode().endswith("assets/vocab.txt")


def test_bad_vocab_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="reserved token"):
        WordPieceTokenizer(["[PAD]", "a", "b"])
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        WordPieceTokenizer(str(tmp_path / "missing.txt"))
