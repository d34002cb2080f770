"""The words of the BERT pretraining tests' toy corpus (written by the ``corpus`` fixture of
tests/models/bert/fixtures.py; its vocabulary is BERT's special tokens, these words, "." and "##s")."""
WORDS = ["the", "cat", "dog", "sat", "ran", "on", "mat", "rug", "a", "big", "small", "red", "blue", "and", "then"]
