"""The shared word-vocabulary helpers (kerasplm.text.word_vocab): one builder, writer and reader for every family,
checked against the family versions they replaced (ULMFiT's, ELMo's biLM and classifier vocabularies)."""
import collections
import random

import pytest

from kerasplm.text import characters
from kerasplm.text.word_vocab import (SPECIAL_TOKENS, build_word_vocab, read_word_list, word_vocab_text,
                                      write_word_vocab)

ELMO_SPECIALS = ("<S>", "</S>", "<UNK>")
CLASSIFIER_SPECIALS = ("<PAD>", "<UNK>")


def old_elmo_build_vocab(sentences, vocab_size):
    """kerasplm.models.elmo.job.build_vocab, as it was."""
    counts = collections.Counter(w for s in sentences for w in s if w not in ELMO_SPECIALS)
    return list(ELMO_SPECIALS) + [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:vocab_size]]


def old_classifier_build_word_vocab(texts, max_vocab, min_count=1):
    """kerasplm.models.elmo.classifier_job.build_word_vocab, as it was."""
    counts = collections.Counter(w for t in texts for w in t.split() if w not in CLASSIFIER_SPECIALS)
    kept = sorted((kv for kv in counts.items() if kv[1] >= min_count), key=lambda kv: (-kv[1], kv[0]))
    return list(CLASSIFIER_SPECIALS) + [w for w, _ in kept[:max_vocab]]


def random_texts(seed, n=60):
    rng = random.Random(seed)
    words = ["a", "b", "cat", "Dog", "dog", ".", "<UNK>", "<S>", "<PAD>", "zz", "é", "x-y"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(0, 9))) for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_the_elmo_vocabularies_are_the_ones_they_were(seed):
    texts = random_texts(seed)
    sentences = [t.split() for t in texts]
    for size in (None, 0, 1, 3, 50):
        assert build_word_vocab(sentences, max_words=size, special_tokens=ELMO_SPECIALS, split=None) == \
            old_elmo_build_vocab(sentences, size)
        for min_count in (1, 2, 5):
            assert build_word_vocab(texts, max_words=size, min_count=min_count, special_tokens=CLASSIFIER_SPECIALS,
                                    split="whitespace") == old_classifier_build_word_vocab(texts, size, min_count)


def test_the_ulmfit_vocabulary():
    lines = ["The cat sat.", "the <unk> cat", "A dog, a cat!"]
    assert build_word_vocab(lines) == list(SPECIAL_TOKENS) + ["cat", "a", "the", "!", ",", ".", "dog", "sat"]
    assert build_word_vocab(lines, max_size=6, min_count=2) == list(SPECIAL_TOKENS) + ["cat", "a"]
    assert build_word_vocab(lines, lowercase=False)[4:7] == ["cat", "!", ","]
    with pytest.raises(ValueError, match="max_size=4 leaves no room for a word after the 4 special tokens"):
        build_word_vocab(lines, max_size=4)
    with pytest.raises(ValueError, match="split must be"):
        build_word_vocab(lines, split="characters")


def test_one_writer_and_reader(tmp_path):
    vocab = ["<S>", "</S>", "<UNK>", "é", "a b"]
    path = tmp_path / "vocab.txt"
    write_word_vocab(vocab, path)
    assert path.read_bytes() == "".join(w + "\n" for w in vocab).encode("utf-8")
    assert word_vocab_text(vocab) == path.read_text(encoding="utf-8")
    assert read_word_list(path) == vocab
    # ELMo's vocabulary files are these (importable from kerasplm.text.characters as before)
    assert characters.write_word_vocab is write_word_vocab and characters.word_vocab_text is word_vocab_text
    assert characters.read_word_vocab(path) == vocab
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"<S>\n\xff\n")
    with pytest.raises(ValueError, match=f"{bad}: not UTF-8 text .*; the file is damaged"):
        read_word_list(bad)
    with pytest.raises(ValueError, match="vocabulary lacks <UNK>"):
        characters.read_word_vocab(_write(tmp_path / "short.txt", "<S>\n</S>\n"))


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path
