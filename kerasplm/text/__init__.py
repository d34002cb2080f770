"""Tokenizers as `tf.Module`s: in-graph tokenization that exports with the model."""
from kerasplm.text.wordpiece import (
    WordPieceTokenizer,
    build_wordpiece_vocab,
    read_vocab,
    sanitize_utf8,
    write_vocab,
)

__all__ = ["WordPieceTokenizer", "build_wordpiece_vocab", "read_vocab", "write_vocab",
           "sanitize_utf8"]
