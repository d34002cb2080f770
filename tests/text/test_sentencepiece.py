"""SentencePieceTokenizer (in graph, tensorflow-text) against the `sentencepiece` package's own encode/decode."""
import os

import pytest
import sentencepiece as spm  # a kerasplm requirement: no skip
import tensorflow as tf

from kerasplm.text import SentencePieceTokenizer, train_sentencepiece

CORPUS = [
    "First Citizen: Before we proceed any further, hear me speak.",
    "All: Speak, speak.",
    "You are all resolved rather to die than to famish?",
    "Où est la bibliothèque ? Très bien, merci.",
    "We know't, we know't.   Let us kill him, and we'll have corn at our own price.",
] * 4
TEXTS = ["First Citizen:\nBefore we  proceed,\n\n hear me.", "  leading and trailing spaces  ",
         "Très bien — 😀 ünïcödé ✓", "<|endoftext|> is only text here", "", "tabs\tand\r\nCRLF", "x" * 300]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("spm") / "spm"
    train_sentencepiece(CORPUS, vocab_size=330, model_prefix=str(prefix), seed=1)
    return str(prefix) + ".model"


@pytest.fixture(scope="module")
def tok(model_path):
    return SentencePieceTokenizer(model_path)


@pytest.fixture(scope="module")
def reference(model_path):
    return spm.SentencePieceProcessor(model_file=model_path)


def test_ids_equal_the_sentencepiece_package(tok, reference):
    ids = tok.tokenize(tf.constant(TEXTS))
    assert ids.dtype == tf.int64 and isinstance(ids, tf.RaggedTensor)
    assert ids.to_list() == [reference.encode(t) for t in TEXTS]
    # The corpus learned merges: ordinary words take fewer pieces than characters.
    assert len(reference.encode("speak")) < len("speak")


def test_round_trip_is_exact_on_ordinary_and_unusual_text(tok, reference):
    ids = tok.tokenize(tf.constant(TEXTS))
    decoded = [t.decode("utf-8") for t in tok.detokenize(ids).numpy()]
    assert decoded == TEXTS  # whitespace runs, newlines, emoji (byte fallback), the empty string
    assert decoded == [reference.decode(i) for i in ids.to_list()]
    # Dense, 0-padded ids decode the same (<pad> is a control token).
    assert [t.decode() for t in tok.detokenize(ids.to_tensor()).numpy()] == TEXTS


def test_special_tokens_by_name(tok, reference):
    assert tok.special_tokens == {"pad": "<pad>", "unk": "<unk>", "end_of_text": "<|endoftext|>"}
    assert (tok.pad_id, tok.token_to_id("<unk>"), tok.end_of_text_id) == (0, 1, 2)
    assert tok.id_to_token(3) == "\n" and tok.vocab_size == 330 == reference.get_piece_size()
    assert int(tok.get_vocab_size()) == 330
    with pytest.raises(KeyError, match="'<mask>' is not in the SentencePiece vocabulary"):
        tok.token_to_id("<mask>")
    with pytest.raises(IndexError, match="outside the vocabulary"):
        tok.id_to_token(330)
    # The end-of-text token is a control symbol: the text spelling it never becomes it, and it decodes to "".
    assert 2 not in tok.tokenize(tf.constant(["<|endoftext|>"])).to_list()[0]
    hello = tok.tokenize(tf.constant(["hear"])).to_list()[0]
    assert tok.detokenize(tf.ragged.constant([hello + [2] + hello], tf.int64)).numpy()[0] == b"hearhear"


def test_bad_inputs_do_not_crash(tok):
    out = tok.detokenize(tf.constant([[5, -1, 10_000, 0]], tf.int64)).numpy()[0].decode()
    assert "⁇" in out  # out-of-range ids decode as <unk>
    ids = tok.tokenize(tf.constant([b"ab\xff\xfe cd \xc3"]))
    assert tok.detokenize(ids).numpy()[0].decode() == "ab\ufffd\ufffd cd \ufffd"
    assert tok.tokenize(tf.constant([], tf.string)).shape[0] == 0


def test_training_is_deterministic_and_errors_are_clear(tmp_path, model_path):
    again = train_sentencepiece(CORPUS, vocab_size=330, seed=1)
    with open(model_path, "rb") as f:
        assert f.read() == again
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS), encoding="utf-8")
    assert train_sentencepiece(str(corpus), vocab_size=330, seed=1) == again  # a file = its lines
    with pytest.raises(ValueError, match=r"vocab_size=5000 is too large for this corpus: SentencePiece can learn at most \d+ pieces"):
        train_sentencepiece(CORPUS, vocab_size=5000)
    with pytest.raises(ValueError, match="empty corpus"):
        train_sentencepiece(["", "  "], vocab_size=330)
    with pytest.raises(ValueError, match="vocab_size must be an integer > 260"):
        train_sentencepiece(CORPUS, vocab_size=100)
    with pytest.raises(FileNotFoundError, match="corpus file not found"):
        train_sentencepiece(str(tmp_path / "missing.txt"))
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a SentencePiece model"):
        SentencePieceTokenizer(str(bad))


def test_saved_model_carries_the_model(tok, tmp_path, model_path):
    tf.saved_model.save(tok, str(tmp_path / "tok"))
    loaded = tf.saved_model.load(str(tmp_path / "tok"))
    ids = loaded.tokenize(tf.constant(TEXTS))
    assert ids.to_list() == tok.tokenize(tf.constant(TEXTS)).to_list()
    assert [t.decode() for t in loaded.detokenize(ids).numpy()] == TEXTS
    assert os.path.basename(loaded.get_model_path().numpy().decode()) == "spm.model"
    assert os.path.isfile(loaded.get_model_path().numpy().decode())
