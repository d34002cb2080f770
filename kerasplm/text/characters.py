"""Tokens as character (UTF-8 byte) ids, in graph: the input of ELMo's character CNN.

The conventions are AllenNLP bilm-tf's (``UnicodeCharsVocabulary`` and ``Batcher`` in ``bilm/data.py``),
so that its pretrained weights read the same ids:

* a token is its UTF-8 **bytes** (0..255), cut to ``max_characters - 2`` bytes, wrapped as
  ``[begin-of-word] bytes [end-of-word]`` and padded with the padding character to ``max_characters``
  (50 in every published model);
* the sentence-boundary tokens ``<S>`` and ``</S>`` have no bytes: their rows are
  ``[begin-of-word, begin-of-sentence, end-of-word, pad, ...]`` and the same with end-of-sentence;
* bilm-tf numbers the specials bos=256, eos=257, bow=258, eow=259, pad=260 and its Batcher adds **1**
  to every id so that **0 means "no token"** (the rows of padding positions after a sentence's end).
  The ids here already include that +1: a byte b is b+1, bos 257, eos 258, bow 259, eow 260, pad 261,
  so the character vocabulary has 262 entries (``NUM_CHARACTERS``).

Everything is TensorFlow ops (``tf.strings.bytes_split``, ``tf.io.decode_raw``, ragged ops), so the
encoding exports inside a SavedModel. Invalid UTF-8 needs no special case: the bytes are taken as they are.

:class:`ElmoPreprocessor` is what an ELMo run stores beside its biLM: whitespace-tokenized sentences in, the
character ids of ``<S> tokens </S>`` out, and the word vocabulary of the biLM's softmax (bilm-tf's vocabulary file:
one token per line, ``<S>``, ``</S>`` and ``<UNK>`` among them; :func:`read_word_vocab`).
"""
import os

import tensorflow as tf

from kerasplm.runs.serialization import asset_name, asset_path, serializable
# The word-vocabulary files are every family's (kerasplm.text.word_vocab); importable from here as before.
from kerasplm.text.word_vocab import read_word_list, word_vocab_text, write_word_vocab

__all__ = ["BOS_CHAR", "EOS_CHAR", "BOW_CHAR", "EOW_CHAR", "PAD_CHAR", "NUM_CHARACTERS", "MAX_CHARACTERS",
           "BOS_TOKEN", "EOS_TOKEN", "UNK_TOKEN", "SPECIAL_TOKENS", "ElmoPreprocessor", "word_char_ids",
           "sentence_char_ids", "add_sentence_boundaries", "boundary_row", "check_word_vocab", "read_word_vocab",
           "word_vocab_text", "write_word_vocab"]

# bilm-tf's ids plus the Batcher's +1 (0 = no token).
BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = 257, 258, 259, 260, 261
NUM_CHARACTERS = 262
MAX_CHARACTERS = 50
# bilm-tf's word tokens: sentence boundaries and the unknown word (every vocabulary file holds them).
BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<S>", "</S>", "<UNK>"
SPECIAL_TOKENS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)


def boundary_row(char, max_characters=MAX_CHARACTERS):
    """The character row of ``<S>`` (``char=BOS_CHAR``) or ``</S>`` (``EOS_CHAR``): int32 ``(max_characters,)``."""
    return tf.constant([BOW_CHAR, char, EOW_CHAR] + [PAD_CHAR] * (max_characters - 3), tf.int32)


def word_char_ids(tokens, max_characters=MAX_CHARACTERS):
    """``tokens`` string ``[N]`` -> int32 ``[N, max_characters]``: bow, UTF-8 bytes (+1, cut to
    ``max_characters - 2``), eow, then pad (see the module docstring)."""
    tokens = tf.convert_to_tensor(tokens, tf.string)
    pieces = tf.strings.bytes_split(tokens)                              # ragged [N, (bytes)] of 1-byte strings
    values = tf.reshape(tf.io.decode_raw(pieces.flat_values, tf.uint8), [-1])
    byte_ids = pieces.with_flat_values(tf.cast(values, tf.int32) + 1)[:, :max_characters - 2]
    n = tf.shape(tokens, out_type=tf.int64)[0]
    bow = tf.RaggedTensor.from_tensor(tf.fill([n, 1], BOW_CHAR))
    eow = tf.RaggedTensor.from_tensor(tf.fill([n, 1], EOW_CHAR))
    wrapped = tf.concat([bow, byte_ids, eow], axis=1)
    return wrapped.to_tensor(default_value=PAD_CHAR, shape=[None, max_characters])


def sentence_char_ids(tokens, max_characters=MAX_CHARACTERS, add_boundaries=True):
    """Ragged string tokens ``[batch, (n)]`` -> int32 ``[batch, T, max_characters]``.

    With ``add_boundaries`` each sentence becomes ``<S> tokens </S>`` (T = longest n + 2), as bilm-tf
    feeds its biLM. Positions after a sentence's end are all 0 (no token).
    """
    flat = word_char_ids(tokens.flat_values, max_characters)
    ids = tokens.with_flat_values(flat)                                   # [batch, (n), max_characters]
    if add_boundaries:
        batch = tf.shape(ids.row_lengths())[0]
        bos = tf.RaggedTensor.from_tensor(tf.tile(boundary_row(BOS_CHAR, max_characters)[None, None], [batch, 1, 1]))
        eos = tf.RaggedTensor.from_tensor(tf.tile(boundary_row(EOS_CHAR, max_characters)[None, None], [batch, 1, 1]))
        ids = tf.concat([bos, ids, eos], axis=1)
    return ids.to_tensor(default_value=0)


def add_sentence_boundaries(char_ids):
    """``char_ids (batch, T, C)`` of tokens only (rows of 0 after each sentence) -> ``(batch, T + 2, C)``
    with ``<S>`` first and ``</S>`` right after each sentence's last token."""
    char_ids = tf.convert_to_tensor(char_ids, tf.int32)
    max_characters = char_ids.shape[-1]
    lengths = tf.reduce_sum(tf.cast(tf.reduce_any(char_ids > 0, axis=-1), tf.int32), axis=1)
    batch = tf.shape(char_ids)[0]
    bos = tf.tile(boundary_row(BOS_CHAR, max_characters)[None, None], [batch, 1, 1])
    padded = tf.concat([bos, char_ids, tf.zeros_like(char_ids[:, :1])], axis=1)
    at_eos = tf.one_hot(lengths + 1, tf.shape(padded)[1], dtype=tf.int32)[:, :, None]   # (batch, T + 2, 1)
    return padded * (1 - at_eos) + boundary_row(EOS_CHAR, max_characters) * at_eos


# ------------------------------------------------------------------------------------------------ word vocabulary
def check_word_vocab(vocab, source="the vocabulary"):
    """``vocab`` (a list of tokens) if it holds ``<S>``, ``</S>``, ``<UNK>`` once each and no token twice."""
    missing = [s for s in SPECIAL_TOKENS if s not in vocab]
    if missing:
        raise ValueError(f"{source}: vocabulary lacks {', '.join(missing)}")
    if len(set(vocab)) != len(vocab):
        raise ValueError(f"{source}: duplicate tokens")
    return vocab


def read_word_vocab(path):
    """bilm-tf's vocabulary file (one token per line: :func:`kerasplm.text.word_vocab.read_word_list`), checked by
    :func:`check_word_vocab`. A ValueError names the file (also for text that is not UTF-8)."""
    return check_word_vocab(read_word_list(path), path)


@serializable
class ElmoPreprocessor:
    """Sentences -> the biLM's input, and the word vocabulary of its softmax.

    Args:
      vocabulary: bilm-tf's vocabulary file (its name is what a run's config stores, relative to the run) or a
        list of tokens; ``<S>``, ``</S>`` and ``<UNK>`` must be among them.
      max_characters: characters per token (the biLM's ``max_characters_per_token``).
    Call: string sentences ``(batch,)`` -> int32 ``char_ids (batch, n + 2, max_characters)``: each sentence split
    on whitespace and fed as ``<S> tokens </S>``, rows of 0 after its end (n: the longest sentence).

    A plain Python object (no TensorFlow state), so a task model holding it checkpoints as before.
    """

    def __init__(self, vocabulary, max_characters=MAX_CHARACTERS, name=None):
        if isinstance(vocabulary, (str, os.PathLike)):
            self._vocabulary_file = os.fspath(vocabulary)
            self.vocabulary = read_word_vocab(self._vocabulary_file)
        else:
            self._vocabulary_file = None
            self.vocabulary = check_word_vocab([str(t) for t in vocabulary])
        self.max_characters = int(max_characters)
        if self.max_characters < 3:
            raise ValueError(f"max_characters must be at least 3 (bow, one byte, eow), got {max_characters}")
        self.name = name or "elmo_preprocessor"
        self._ids = {w: i for i, w in enumerate(self.vocabulary)}

    @property
    def vocabulary_file(self):
        """The vocabulary file this preprocessor was made from (None when made from a list)."""
        return self._vocabulary_file

    @property
    def vocab_size(self):
        return len(self.vocabulary)

    def token_to_id(self, token):
        """A word's id in the vocabulary (``<UNK>``'s for any other word)."""
        return self._ids.get(token, self._ids[UNK_TOKEN])

    def tokenize(self, sentences):
        """Whitespace tokens: string ``(batch,)`` -> ragged string ``[batch, (n)]``."""
        return tf.strings.split(tf.convert_to_tensor(sentences, tf.string))

    def char_ids(self, tokens):
        """Ragged tokens ``[batch, (n)]`` -> int32 ``(batch, n + 2, max_characters)`` with ``<S>``/``</S>``."""
        return sentence_char_ids(tokens, self.max_characters)

    def __call__(self, sentences):
        return self.char_ids(self.tokenize(sentences))

    def get_config(self):
        vocabulary = asset_name(self._vocabulary_file) if self._vocabulary_file else list(self.vocabulary)
        return {"vocabulary": vocabulary, "max_characters": self.max_characters, "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        vocabulary = config.pop("vocabulary")
        return cls(asset_path(vocabulary) if isinstance(vocabulary, str) else vocabulary, **config)
