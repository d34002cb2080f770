"""GPT-2's byte-level BPE in TensorFlow ops: the ids of Hugging Face's GPT2Tokenizer (and of GPT-2's algorithm
written out below), exact round trips, invalid UTF-8, export without kerasplm, and file errors."""
import json
import os
import random

import numpy as np
import pytest
import tensorflow as tf

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytest.importorskip("regex")
pytest.importorskip("tokenizers")

from kerasplm.text.bpe import _NEW_DIGITS, _NEW_LETTERS, BytePairTokenizer  # noqa: E402
from tests.export.contract import check_bad_inputs, run_isolated  # noqa: E402
from tests.text.bpe_vocab import gpt2_reference_ids, read_merge_ranks, train_gpt2_vocab  # noqa: E402

EMOJI = "😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵 ❤️"
CASES = {
    "ascii": "The quick brown fox jumps over the lazy dog.",
    "contractions": "I'll don't it's we're they've you'd I'm 's 'S ''s 'sun x's !'s",
    "digits": "123 4567 3.14159 2024-11-22 ١٢٣ Ⅻ",
    "punctuation": "!!! ... ?! -- (a) [b] {c} <|not special|> @#$%^&*",
    "accents": "naïve café résumé Ærøskøbing Straße e\u0301",
    "cjk_cyrillic": "中文字符 日本語のテキスト 한국어 Привет, мир!",
    "emoji": EMOJI + " a😀b",
    "spaces": "  two leading, three   inside, trailing  ",
    "tabs_newlines": "\tTab\t\tx\n\nnew\r\nline \n y\t \t z \n",
    "whitespace_only": " \t\n  \u3000 ",
    "unicode_spaces": "a\u00a0b\u3000c\u2028d\x0be\x85f\u2009 g",
    "special": "<|endoftext|>after <|endoftext|><|endoftext|>  before <|endoftext|>\n",
    "empty": "",
    "single_space": " ",
    "unicode16": "\U00013460\U00013461 x\U000116d0\U000116d1 1\u1c89",
}


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    return train_gpt2_vocab(tmp_path_factory.mktemp("gpt2_vocab"), vocab_size=600)


@pytest.fixture(scope="module")
def hf(vocab_dir):
    return transformers.GPT2Tokenizer.from_pretrained(vocab_dir)


@pytest.fixture(scope="module")
def ours(vocab_dir):
    return BytePairTokenizer(os.path.join(vocab_dir, "vocab.json"), os.path.join(vocab_dir, "merges.txt"))


def tokenize(tokenizer, texts):
    return tokenizer.tokenize(tf.constant(texts, tf.string, shape=[len(texts)])).to_list()


def detokenize(tokenizer, ids):
    return [t for t in tokenizer.detokenize(tf.ragged.constant(ids, tf.int64, ragged_rank=1)).numpy()]


def check_against_hf(ours, hf, texts):
    """Ids equal HF's for every text; decoding gives the text back, byte for byte."""
    ids = tokenize(ours, texts)
    for text, row in zip(texts, ids):
        assert row == hf(text)["input_ids"], repr(text)
    assert detokenize(ours, ids) == [t.encode("utf-8") for t in texts]
    return ids


def test_ids_equal_hf_and_gpt2_algorithm_and_round_trip(ours, hf, vocab_dir):
    texts = list(CASES.values())
    ids = check_against_hf(ours, hf, texts)
    assert ids[list(CASES).index("empty")] == []
    assert tokenize(ours, []) == [] and tokenize(ours, ["", ""]) == [[], []]
    assert detokenize(ours, [[], []]) == [b"", b""]
    assert all(len(row) > 0 for row, text in zip(ids, texts) if text)
    with open(os.path.join(vocab_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    ranks = read_merge_ranks(os.path.join(vocab_dir, "merges.txt"))
    for label, text in CASES.items():   # the `regex` module knows other Unicode letters than tokenizers does
        if label not in ("special", "unicode16"):
            assert gpt2_reference_ids(text, vocab, ranks) == ids[texts.index(text)], label
    # Each row is independent of its batch.
    assert tokenize(ours, [CASES["emoji"]]) == [ids[texts.index(CASES["emoji"])]]


def test_whitespace_runs_split_like_gpt2(ours):
    """\\s+(?!\\S): the last space of a run joins the next word; a last tab/newline stands alone."""
    pieces = ours.pre_tokenize(tf.constant(["a   b", "a \t\n b", "a\t\tb", "x  ", "  's", "a\n\n"])).to_list()
    assert pieces == [[b"a", b"  ", b" b"], [b"a", b" \t\n", b" b"], [b"a", b"\t", b"\t", b"b"], [b"x", b"  "],
                      [b" ", b" '", b"s"], [b"a", b"\n\n"]]


def test_random_strings_equal_hf(ours, hf):
    rng = random.Random(0)
    alphabet = list("abcXYZ'019 .,!-é中ж😀\u200d\u0301") + [" "] * 6 + ["\t", "\n", "\r\n", "\u3000", "\xa0", "'s",
                                                                       "'ll", "<|endoftext|>", "\U00013460"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(300)]
    check_against_hf(ours, hf, texts)


def test_long_inputs_equal_hf(ours, hf):
    rng = random.Random(1)
    words = "alpha beta gamma I'll 42 ... naïve Привет 中文 😀 \n\t".split(" ")
    long_text = " ".join(rng.choice(words) for _ in range(2000))    # ~10,000 characters
    no_spaces = "".join(rng.choice("abcdefghé!1") for _ in range(3000))
    ids = check_against_hf(ours, hf, [long_text, no_spaces, "a" * 4000])
    assert len(long_text) > 8000 and len(ids[0]) > 2000


def test_unicode_classes_equal_hf(ours, hf):
    """Letters, digits and spaces as tokenizers (Unicode 16) classifies them: the code points TensorFlow's RE2
    does not know yet, the whitespace characters, and a sample of all code points."""
    rng = random.Random(2)
    points = [int(end, 16) for item in f"{_NEW_LETTERS} {_NEW_DIGITS}".split() for end in item.split("-")]
    points += [0x9, 0xA, 0xB, 0xC, 0xD, 0x1C, 0x1F, 0x85, 0xA0, 0x1680, 0x180E, 0x2000, 0x200A, 0x200B, 0x2028,
               0x202F, 0x205F, 0x3000, 0xFEFF]
    points += [c for c in rng.sample(range(0x30000), 1500) if not 0xD800 <= c <= 0xDFFF]
    texts = [f"a{c}a 1{c}1 !{c}! {c}x x {c}{c}" for c in map(chr, points)]
    check_against_hf(ours, hf, texts)


def test_invalid_utf8_is_replaced_as_hf_sees_it(ours, hf):
    """Bytes that are not UTF-8 become U+FFFD (Python's errors="replace": one per maximal invalid subpart)."""
    raw = [b"ab\xff\xfe cd \xc3", b"\xe2\x82 x", b"\xed\xa0\x80", b"\xc0\x80!", b"\xf0\x9f\x98 \xf4\x90\x80\x80"]
    ids = ours.tokenize(tf.constant(raw)).to_list()
    replaced = [b.decode("utf-8", errors="replace") for b in raw]
    assert ids == [hf(text)["input_ids"] for text in replaced]
    assert detokenize(ours, ids) == [text.encode("utf-8") for text in replaced]


def test_detokenize_any_ids_equals_hf_decode(ours, hf):
    """Arbitrary id sequences (which may cut a character's bytes) decode as HF's decode does; ids outside the
    vocabulary (padding) are skipped; dense and ragged inputs agree."""
    rng = np.random.default_rng(3)
    rows = [list(rng.integers(0, ours.vocab_size, size=rng.integers(0, 10))) for _ in range(200)]
    expected = [hf.decode(row, clean_up_tokenization_spaces=False).encode("utf-8") for row in rows]
    assert detokenize(ours, rows) == expected
    dense = np.full((len(rows), 12), -1, np.int64)
    for i, row in enumerate(rows):
        dense[i, :len(row)] = row
    dense[:, -1] = ours.vocab_size + 5
    assert list(ours.detokenize(tf.constant(dense)).numpy()) == expected


def test_vocabulary_api(ours, hf):
    size = ours.vocab_size
    assert size == len(hf) > 400
    assert ours.special_tokens == {"end_of_text": "<|endoftext|>"}
    assert ours.token_to_id("<|endoftext|>") == hf.convert_tokens_to_ids("<|endoftext|>") == 0
    assert ours.id_to_token(ours.token_to_id("Ġ")) == "Ġ"
    assert int(ours.get_vocab_size()) == size
    with pytest.raises(KeyError, match="'nope' is not in the vocabulary"):
        ours.token_to_id("nope")
    with pytest.raises(IndexError, match=rf"{size} is outside the vocabulary \[0, {size}\)"):
        ours.id_to_token(size)


def test_special_tokens_in_text_can_be_turned_off(vocab_dir, hf, tmp_path):
    """special_tokens={} reads "<|endoftext|>" in the text as plain text (HF's split_special_tokens=True), e.g.
    for untrusted input; a special token must be in the vocabulary and hold no whitespace."""
    paths = os.path.join(vocab_dir, "vocab.json"), os.path.join(vocab_dir, "merges.txt")
    plain = BytePairTokenizer(*paths, special_tokens={})
    texts = [CASES["special"], "a<|endoftext|>b"]
    assert plain.special_tokens == {}
    assert tokenize(plain, texts) == [hf(t, split_special_tokens=True)["input_ids"] for t in texts]
    assert detokenize(plain, tokenize(plain, texts)) == [t.encode("utf-8") for t in texts]
    with pytest.raises(ValueError, match=r"special tokens \{'x': '<\|nope\|>'\} are not in the vocabulary"):
        BytePairTokenizer(*paths, special_tokens={"x": "<|nope|>"})
    with open(paths[0], encoding="utf-8") as f:
        vocab = json.load(f)
    spaced = write(tmp_path / "vocab.json", json.dumps({**vocab, "<|a b|>": len(vocab)}))
    with pytest.raises(ValueError, match="without whitespace"):
        BytePairTokenizer(spaced, paths[1], special_tokens={"spaced": "<|a b|>"})


def test_export_runs_without_kerasplm(ours, tmp_path):
    class Module(tf.Module):
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def round_trip(self, text):
            ids = self.tokenizer.tokenize(text)
            return {"token_ids": ids.to_tensor(0), "lengths": ids.row_lengths(),
                    "text": self.tokenizer.detokenize(ids)}

    module = Module(ours)
    path = str(tmp_path / "1")
    tf.saved_model.save(module, path, signatures={"serving_default": module.round_trip})
    texts = [CASES["emoji"], CASES["tabs_newlines"], "", b"ab\xff cd"]
    (out,) = run_isolated(path, [("serving_default", {"text": texts})])
    expected = tokenize(ours, texts[:3]) + [ours.tokenize(tf.constant([texts[3]])).to_list()[0]]
    assert [row[:n] for row, n in zip(out["token_ids"], out["lengths"])] == expected
    assert out["text"] == texts[:3] + ["ab\ufffd cd"]

    def round_trips(texts, outputs):   # valid UTF-8 comes back unchanged
        for text, back in zip(texts, outputs["text"]):
            assert isinstance(text, bytes) or back == text.encode("utf-8")

    check_bad_inputs(path, "serving_default", "text", output_check=round_trips)


def write(path, text):
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return str(path)


def test_bad_files_give_one_line_errors(vocab_dir, tmp_path):
    vocab_path, merges_path = os.path.join(vocab_dir, "vocab.json"), os.path.join(vocab_dir, "merges.txt")
    with open(vocab_path, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(merges_path, encoding="utf-8") as f:
        merges = f.read()
    good_vocab, good_merges = vocab_path, merges_path
    bad = {
        "missing vocab": ((str(tmp_path / "none.json"), good_merges), r"none.json: BPE vocabulary not found"),
        "bad json": ((write(tmp_path / "a.json", '{"a": 0,\n "b": }'), good_merges), r"a.json: line 2 column 7"),
        "not an object": ((write(tmp_path / "b.json", "[1, 2]"), good_merges), r"b.json: expected a non-empty"),
        "shared id": ((write(tmp_path / "c.json", json.dumps({**vocab, "zz": 3})), good_merges),
                      r"c.json: token 'zz' has id 3|share id 3"),
        "bad id": ((write(tmp_path / "d.json", json.dumps({"a": 0, "b": 5})), good_merges),
                   r"d.json: token 'b' has id 5; ids must be the integers 0 .. 1"),
        "not bytes": ((write(tmp_path / "e.json", json.dumps({"a": 0, "b": 1})), good_merges),
                      r"e.json: 254 of GPT-2's 256 byte symbols are not in the vocabulary"),
        "three symbols": ((good_vocab, write(tmp_path / "m1.txt", merges.replace("\n", "\nĠ t h\n", 1))),
                          r"m1.txt: line 2: expected two symbols separated by one space, got 'Ġ t h'"),
        "unknown merge": ((good_vocab, write(tmp_path / "m2.txt", merges + "Ġt qqq\n")),
                          r"m2.txt: line \d+: 'qqq' \(of the merge Ġt qqq\) is not in the vocabulary"),
        "repeated merge": ((good_vocab, write(tmp_path / "m3.txt", merges + merges.splitlines()[1] + "\n")),
                           r"m3.txt: line \d+: the merge '.*' repeats line 2"),
        "not utf-8": ((good_vocab, write(tmp_path / "m4.txt", merges.encode() + b"a \xff\n")),
                      r"m4.txt: line \d+ is not valid UTF-8"),
    }
    for label, ((vocab_file, merges_file), message) in bad.items():
        with pytest.raises((ValueError, FileNotFoundError), match=message) as error:
            BytePairTokenizer(vocab_file, merges_file)
        assert "\n" not in str(error.value), label
