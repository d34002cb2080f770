"""CoNLL-2003 named-entity files: reader, IOB1 -> IOB2 conversion, label vocabulary.

The shared files (Tjong Kim Sang & De Meulder 2003) hold one token a line, four space-separated columns
``token POS chunk NER``, sentences separated by blank lines, documents by ``-DOCSTART- -X- O O`` lines.
Tags are shipped in **IOB1**: ``I-X`` inside an entity, ``B-X`` only where an entity starts right after
another entity of the same type. **IOB2** puts ``B-X`` at every entity start.

Quirk of the shared copies: the first ``-DOCSTART-`` line sits at the *end* of the file (with no final
newline). ``-DOCSTART-`` lines are dropped wherever they are and always end the sentence before them.

>>> sentences = read_conll("eng.train", tag_scheme="iob2")
>>> sentences[0].tokens, sentences[0].tags
(('EU', 'rejects', 'German', ...), ('B-ORG', 'O', 'B-MISC', ...))
"""
import dataclasses
import re

__all__ = ["Sentence", "read_conll", "iob1_to_iob2", "label_vocabulary", "DOCSTART"]

DOCSTART = "-DOCSTART-"
_TAG_RE = re.compile(r"O|[BI]-\S+")


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One sentence: ``tokens`` and ``tags`` (NER), plus the ``pos`` and ``chunk`` columns (tuples of str,
    all of the same length); ``line`` is the 1-based line number of its first token in the file."""

    tokens: tuple
    tags: tuple
    pos: tuple = ()
    chunk: tuple = ()
    line: int = 0


def iob1_to_iob2(tags):
    """IOB1 tags -> IOB2: ``I-X`` becomes ``B-X`` where it starts an entity (after ``O``, at the start, or
    after a tag of another type); ``B-X`` and ``O`` are kept. Already-IOB2 input is returned unchanged."""
    converted = []
    previous_type = None                    # type of the previous tag; None for O / sentence start
    for tag in tags:
        if tag == "O":
            converted.append(tag)
            previous_type = None
            continue
        prefix, entity_type = tag[0], tag[2:]
        if prefix == "I" and entity_type != previous_type:
            tag = "B-" + entity_type
        converted.append(tag)
        previous_type = entity_type
    return converted


def _parse_line(line, path, line_number, num_columns):
    columns = line.split()
    if len(columns) != num_columns:
        raise ValueError(f"{path}:{line_number}: expected {num_columns} space-separated columns "
                         f"(token POS chunk NER), got {len(columns)}: {line.rstrip()!r}")
    if not _TAG_RE.fullmatch(columns[-1]):
        raise ValueError(f"{path}:{line_number}: NER tag {columns[-1]!r} is not O, B-TYPE or I-TYPE")
    return columns


def read_conll(path, tag_scheme="iob1", num_columns=4, encoding="utf-8"):
    """Reads a CoNLL-2003 file into a list of :class:`Sentence`.

    Args:
      path: the file (``eng.train``, ``eng.testa``, ...).
      tag_scheme: ``"iob1"`` keeps the tags as shipped; ``"iob2"`` converts them (:func:`iob1_to_iob2`).
      num_columns: columns per token line (the NER tag is the last; 4 in CoNLL-2003 English).
    Raises ``ValueError`` naming ``file:line`` for a line with the wrong number of columns or a malformed
    tag, and ``FileNotFoundError`` for a missing file.
    """
    if tag_scheme not in ("iob1", "iob2"):
        raise ValueError(f"tag_scheme must be 'iob1' or 'iob2', got {tag_scheme!r}")
    sentences, rows, first_line = [], [], 0

    def flush():
        if rows:
            tokens, pos, chunk, tags = (tuple(c) for c in zip(*[(r[0], r[1], r[-2], r[-1]) for r in rows]))
            if tag_scheme == "iob2":
                tags = tuple(iob1_to_iob2(tags))
            sentences.append(Sentence(tokens, tags, pos, chunk, first_line))
            rows.clear()

    with open(path, encoding=encoding) as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                flush()
                continue
            if line.split()[0] == DOCSTART:      # a document boundary, wherever it sits
                flush()
                continue
            if not rows:
                first_line = line_number
            rows.append(_parse_line(line, path, line_number, num_columns))
    flush()
    return sentences


def label_vocabulary(sentences):
    """The tags used by ``sentences`` as a list: ``"O"`` first, then the others sorted by entity type with
    ``B-`` before ``I-`` (a fixed order, so label ids are reproducible)."""
    tags = {tag for sentence in sentences for tag in sentence.tags} - {"O"}
    return ["O"] + sorted(tags, key=lambda tag: (tag[2:], tag[0]))
