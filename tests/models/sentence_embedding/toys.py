"""The vector-index tests' toy corpus (sentences over the QA toy's names, places and verbs), their queries and
sequence length; the ``flat_index`` fixture (tests/models/sentence_embedding/fixtures.py) indexes it, and the
retriever export's tests query it."""
import random

from tests.models.bert.qa_toy import NAMES, PLACES, VERBS

SEQUENCE_LENGTH = 16
QUERIES = ["where does john live ?", "mary works in london", "new york"]


def corpus_lines(n, seed):
    """``n`` distinct toy sentences ("anna sleeps in the city of rome ." ...), drawn with ``seed``."""
    rng, lines = random.Random(seed), set()
    while len(lines) < n:
        place = rng.choice(PLACES + ["new york"])
        lines.add(f"{rng.choice(NAMES)} {rng.choice(VERBS)} in {rng.choice(['', 'the city of '])}{place}"
                  f"{rng.choice(['', ' .', ' and ' + rng.choice(NAMES) + ' ' + rng.choice(VERBS)])}")
    return sorted(lines)
