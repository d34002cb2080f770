"""Tokenizers and preprocessors as `tf.Module`s: in-graph text processing that exports with the model.

Tokenizers (:mod:`kerasplm.text.wordpiece`) know normalization and vocabulary only; preprocessors
(:mod:`kerasplm.text.preprocessing`) own the special tokens, packing, truncation and padding.
"""
from kerasplm.text.bert_tokenizer import BertPreprocessor, BertTokenizer
from kerasplm.text.preprocessing import Preprocessor, TranslatorPreprocessor, pack_segments, pad_packed
from kerasplm.text.wordpiece import (
    WordPieceTokenizer,
    build_wordpiece_vocab,
    read_vocab,
    sanitize_utf8,
    write_vocab,
)

__all__ = ["WordPieceTokenizer", "BertTokenizer", "BertPreprocessor", "build_wordpiece_vocab", "read_vocab", "write_vocab", "sanitize_utf8",
           "Preprocessor", "TranslatorPreprocessor", "pack_segments", "pad_packed"]
