"""kerasplm.data.sentences.read_sentence_lines: the one reader of sentence files (whitening, indexes, SimCSE's
training file, ELMo's corpus), checked against the readers it replaced."""
import functools

import pytest

from kerasplm.data.sentences import read_sentence_lines
from kerasplm.models.elmo.job import read_sentences as elmo_read_sentences
from kerasplm.models.sentence_embedding.simcse_job import read_sentences as simcse_read_sentences

SENTENCE_END = {".", "!", "?"}


def old_elmo_read_sentences(path, max_sentences=None):
    """kerasplm.models.elmo.job.read_sentences, as it was."""
    sentences = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            current = []
            for token in line.split():
                current.append(token)
                if token in SENTENCE_END:
                    sentences.append(current)
                    current = []
            if current:
                sentences.append(current)
            if max_sentences and len(sentences) >= max_sentences:
                return sentences[:max_sentences]
    if not sentences:
        raise ValueError(f"{path}: no text")
    return sentences


def old_simcse_read_sentences(path, max_examples=None):
    """kerasplm.models.sentence_embedding.simcse_job.read_sentences, as it was (less its UTF-8 error's wording)."""
    with open(path, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    sentences = sentences[:max_examples] if max_examples else sentences
    if len(sentences) < 2:
        raise ValueError(f"{path}: {len(sentences)} sentence(s); SimCSE needs at least 2 (in-batch negatives)")
    return sentences


TEXTS = ["b a . a zz\n\n = Head =\n", "one. two ! three ? four\r\nfive six .\r\n\r\n  \t \n seven", "  x  \n",
         "\n\n", "", "é ü . ß\nlast line without a newline"]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("limit", [None, 0, 1, 2, 3, 100])
def test_the_family_readers_read_as_they_did(tmp_path, text, limit):
    path = tmp_path / "corpus.txt"
    path.write_bytes(text.encode("utf-8"))
    for new, old in ((elmo_read_sentences, old_elmo_read_sentences),
                     (simcse_read_sentences, old_simcse_read_sentences)):
        try:
            expected = old(str(path), limit)
        except ValueError as e:
            with pytest.raises(ValueError) as got:
                new(str(path), limit)
            assert str(got.value) == str(e)
        else:
            assert new(str(path), limit) == expected


def test_defaults_limits_and_messages(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b" first sentence \r\n\n\tsecond\n")
    assert read_sentence_lines(path) == ["first sentence", "second"]
    assert read_sentence_lines(path, max_sentences=1) == ["first sentence"]
    assert read_sentence_lines(path, split_after={"sentence"}) == [["first", "sentence"], ["second"]]
    with pytest.raises(ValueError, match=r"c.txt: 2 sentence\(s\); need 3$"):
        read_sentence_lines(path, min_sentences=3, too_few="{count} sentence(s); need 3")
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n\n")
    with pytest.raises(ValueError, match=f"{empty}: the corpus holds no sentence"):
        read_sentence_lines(empty)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nab\xffc\n")
    with pytest.raises(ValueError, match=f"{bad}: line 2 is not valid UTF-8 \\(byte 2 of the line\\)"):
        read_sentence_lines(bad)
    assert read_sentence_lines(bad, max_sentences=1) == ["fine"]   # read no further
    with pytest.raises(FileNotFoundError, match="corpus not found"):
        read_sentence_lines(tmp_path / "none.txt")
    assert isinstance(elmo_read_sentences, functools.partial)
