"""The BERT pretraining tests' toy corpus: its words, and the writer of the corpus and its vocabulary (BERT's special
tokens, these words, "." and "##s"). Used by the ``corpus`` fixture of tests/models/bert/fixtures.py and by the
ELECTRA and multi-worker pretraining tests."""
from kerasplm.data.pretraining import BERT_SPECIAL_TOKENS

WORDS = ["the", "cat", "dog", "sat", "ran", "on", "mat", "rug", "a", "big", "small", "red", "blue", "and", "then"]


def write_pretraining_corpus(root, rng):
    """``(corpus.txt, vocab.txt)`` paths under ``root``: 8 documents of 10 sentences of 3–6 of WORDS drawn from the
    NumPy generator ``rng`` (which a caller may draw on further), and their vocabulary."""
    docs = ["\n".join(" ".join(rng.choice(WORDS, size=rng.integers(3, 7))) + " ." for _ in range(10))
            for _ in range(8)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    (root / "vocab.txt").write_text("\n".join([*BERT_SPECIAL_TOKENS, *WORDS, ".", "##s"]) + "\n", encoding="utf-8")
    return str(root / "corpus.txt"), str(root / "vocab.txt")
