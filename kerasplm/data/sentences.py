"""Sentence files: a plain-text corpus of one sentence per line (what sentence-embedding tools read: whitening,
indexes, SimCSE's training file; cut into tokenized sentences: ELMo's corpus) and tab-separated rows of a fixed
number of sentences or fields (Sentence-BERT's pairs and triplets)."""
import os

__all__ = ["read_sentence_lines", "read_tsv_rows"]

# What a file without a sentence is told (read_sentence_lines' default).
NO_SENTENCE = "the corpus holds no sentence (one per line; blank lines are skipped)"


def read_sentence_lines(path, max_sentences=None, split_after=None, min_sentences=1, too_few=None):
    """The sentences of ``path``: its lines, stripped, blank lines skipped. With ``split_after`` (a set of tokens,
    ELMo's ``{".", "!", "?"}``), each line's whitespace tokens instead, cut into sentences after any of those tokens
    (a sentence: a list of tokens; a line's last one ends with the line). ``max_sentences``: the first that many
    only, the file read no further (None or 0: all).

    Raises FileNotFoundError naming a missing file, and one-line ValueErrors naming the file for a line that is not
    UTF-8 (with its line number) and for a file that holds fewer than ``min_sentences`` sentences: ``too_few``
    after the file's name (``{count}``: the sentences found), by default that the corpus holds no sentence.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"corpus not found: {path}")
    sentences = []
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, start=1):
            if max_sentences and len(sentences) >= max_sentences:
                break
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}: line {lineno} is not valid UTF-8 (byte {e.start} of the line)") from None
            if split_after is None:
                text = text.strip()
                if text:
                    sentences.append(text)
                continue
            current = []
            for token in text.split():
                current.append(token)
                if token in split_after:
                    sentences.append(current)
                    current = []
            if current:
                sentences.append(current)
    if max_sentences:
        sentences = sentences[:max_sentences]
    if len(sentences) < min_sentences:
        raise ValueError(f"{path}: " + (too_few or NO_SENTENCE).format(count=len(sentences)))
    return sentences


def read_tsv_rows(path, columns, header=False, max_rows=None):
    """The rows of a tab-separated UTF-8 file holding exactly ``len(columns)`` fields per line, as
    ``[(line number, (field, ...)), ...]`` (fields stripped; ``columns`` names them in messages).

    Blank lines are skipped; ``header``: the first line is a header, not a row; ``max_rows`` stops early. Raises
    FileNotFoundError naming a missing file, and one-line ValueErrors naming the file and line (``path:LINE: ...``)
    for a line that is not UTF-8, a line with another number of columns, an empty field, and naming the file for a
    file without rows.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"file not found: {path}")
    with open(path, "rb") as f:
        raw = f.read()
    rows, expected = [], len(columns)
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        if max_rows is not None and len(rows) >= max_rows:
            break
        try:
            text = line.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}:{lineno}: not valid UTF-8 (byte {e.start} of the line)") from None
        if not text.strip() or (header and lineno == 1):
            continue
        fields = tuple(field.strip() for field in text.split("\t"))
        if len(fields) != expected:
            raise ValueError(f"{path}:{lineno}: {len(fields)} column(s), {expected} expected "
                             f"({', '.join(columns)}, tab-separated)")
        for name, field in zip(columns, fields):
            if not field:
                raise ValueError(f"{path}:{lineno}: empty {name}")
        rows.append((lineno, fields))
    if not rows:
        raise ValueError(f"{path}: no examples (one per line: {', '.join(columns)}, tab-separated)")
    return rows
