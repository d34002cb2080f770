"""Tokenizers and preprocessors as `tf.Module`s: in-graph text processing that exports with the model.

Tokenizers (:mod:`kerasplm.text.wordpiece`; GPT-2's byte-level BPE in :mod:`kerasplm.text.bpe`; SentencePiece in
:mod:`kerasplm.text.sentencepiece`) know normalization and vocabulary only; preprocessors
(:mod:`kerasplm.text.preprocessing`) own the special tokens, packing, truncation and padding;
:mod:`kerasplm.text.characters` turns tokens into ELMo's (bilm-tf's) character ids.
"""
from kerasplm.text.bert_tokenizer import BertPreprocessor, BertTokenizer
from kerasplm.text.bpe import BytePairTokenizer
from kerasplm.text.characters import sentence_char_ids, word_char_ids
from kerasplm.text.preprocessing import Preprocessor, TranslatorPreprocessor, pack_segments, pad_packed
from kerasplm.text.sentencepiece import SentencePieceTokenizer, train_sentencepiece
from kerasplm.text.wordpiece import (
    WordPieceTokenizer,
    build_wordpiece_vocab,
    read_vocab,
    sanitize_utf8,
    write_vocab,
)

__all__ = ["BytePairTokenizer", "WordPieceTokenizer", "BertTokenizer", "BertPreprocessor",
           "build_wordpiece_vocab", "read_vocab", "write_vocab", "sanitize_utf8", "SentencePieceTokenizer",
           "train_sentencepiece", "Preprocessor", "TranslatorPreprocessor", "pack_segments", "pad_packed",
           "sentence_char_ids", "word_char_ids"]
