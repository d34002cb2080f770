"""A plain-text corpus of one sentence per line (what sentence-embedding tools read: whitening, indexes)."""
import os

__all__ = ["read_sentence_lines"]


def read_sentence_lines(path):
    """The sentences of ``path``: its lines, stripped, blank lines skipped.

    Raises FileNotFoundError naming a missing file, and one-line ValueErrors naming the file for a line that is not
    UTF-8 (with its line number) and for a file that holds no sentence.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"corpus not found: {path}")
    with open(path, "rb") as f:
        raw = f.read()
    sentences = []
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        try:
            text = line.decode("utf-8").strip()
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: line {lineno} is not valid UTF-8 (byte {e.start} of the line)") from None
        if text:
            sentences.append(text)
    if not sentences:
        raise ValueError(f"{path}: the corpus holds no sentence (one per line; blank lines are skipped)")
    return sentences
