"""A character vocabulary as a ``tf.Module``: one token per Unicode character, in graph (tensorflow ops only).

The vocabulary of a character-level language model is the set of characters of its training text
(:func:`build_char_vocab`), stored in the run as a JSON list (:func:`write_char_vocab`; JSON because a
character may be a newline or any other code point a line-oriented file could not hold). Ids:

* 0 ``<pad>``: never a real token (the LM loss ignores label 0, the generation engine never produces it);
* 1 ``<unk>``: any character the training text did not have; it detokenizes to U+FFFD;
* 2 ``<|endoftext|>``: the start of the text (what an empty prompt is, as GPT's); it detokenizes to nothing;
* 3 ... the characters, most frequent first (ties by code point), so the same text gives the same ids.

``tokenize`` decodes UTF-8 to code points (``tf.strings.unicode_decode``; invalid bytes become U+FFFD) and maps
each through a static hash table; ``detokenize`` maps ids back to code points and encodes UTF-8. So
``detokenize(tokenize(text)) == text`` for any valid UTF-8 text made of the vocabulary's characters (tested).

    tok = CharacterTokenizer(build_char_vocab("To be, or not to be"))
    tok.tokenize(tf.constant(["to be"]))            # ragged int64, one id per character
    tok.detokenize(tok.tokenize(tf.constant(["to be"])))   # [b"to be"]
"""
import collections
import json
import os

import tensorflow as tf

from kerasplm.runs.serialization import asset_name, asset_path, serializable
from kerasplm.text.vocabulary import VocabularyLookup

__all__ = ["PAD", "UNK", "END_OF_TEXT", "SPECIAL_TOKENS", "CharacterTokenizer", "build_char_vocab",
           "read_char_vocab", "write_char_vocab"]

PAD, UNK, END_OF_TEXT = "<pad>", "<unk>", "<|endoftext|>"
SPECIAL_TOKENS = (PAD, UNK, END_OF_TEXT)
REPLACEMENT = 0xFFFD   # what <unk> and invalid UTF-8 become


def build_char_vocab(text, max_size=None):
    """The special tokens then every character of ``text``, most frequent first (ties: by code point).
    ``max_size`` caps the whole list (the rarest characters become ``<unk>``)."""
    if not isinstance(text, str) or not text:
        raise ValueError("build_char_vocab needs a non-empty string")
    counts = collections.Counter(text)
    chars = sorted(counts, key=lambda c: (-counts[c], ord(c)))
    if max_size is not None:
        if max_size <= len(SPECIAL_TOKENS):
            raise ValueError(f"max_size must be > {len(SPECIAL_TOKENS)} (the special tokens), got {max_size}")
        chars = chars[:max_size - len(SPECIAL_TOKENS)]
    return list(SPECIAL_TOKENS) + chars


def write_char_vocab(vocab, path):
    """Write ``vocab`` (a list of tokens) as a JSON list (UTF-8, one token per line for reading)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("[\n" + ",\n".join(json.dumps(t, ensure_ascii=False) for t in vocab) + "\n]\n")


def read_char_vocab(path):
    """The token list of a vocabulary file; a one-line ValueError naming the file when it is not one."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"character vocabulary not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            vocab = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a JSON character vocabulary ({e})") from None
    _check_vocab(vocab, path)
    return vocab


def _check_vocab(vocab, where):
    if not isinstance(vocab, list) or tuple(vocab[:len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise ValueError(f"{where}: a character vocabulary is a list starting with {list(SPECIAL_TOKENS)}")
    chars = vocab[len(SPECIAL_TOKENS):]
    bad = [t for t in chars if not isinstance(t, str) or len(t) != 1]
    if bad:
        raise ValueError(f"{where}: entries after the special tokens must be single characters, got {bad[0]!r}")
    if len(set(chars)) != len(chars):
        raise ValueError(f"{where}: a character is listed twice")


@serializable
class CharacterTokenizer(VocabularyLookup, tf.Module):
    """Characters <-> int64 ids in graph (see the module docstring).

    Args:
      vocabulary: a token list (:func:`build_char_vocab`) or the path of a vocabulary file
        (:func:`write_char_vocab`); a run stores the file, named relative to the run (``get_config``).

    Attributes (Python): ``vocab_size``, ``special_tokens`` (``{"pad", "unk", "end_of_text"}`` -> token),
    ``token_to_id``, ``id_to_token``, ``pad_id`` (0), ``end_of_text_id`` (2), ``vocabulary_file``.
    """

    id_functions = ("detokenize",)   # dense or ragged ids; traced for export (VocabularyLookup)

    vocabulary_kind = "character vocabulary"

    def __init__(self, vocabulary, name=None):
        super().__init__(name=name)
        if isinstance(vocabulary, (str, os.PathLike)):
            self._vocabulary_file = os.fspath(vocabulary)
            vocab = read_char_vocab(self._vocabulary_file)
        else:
            self._vocabulary_file = None
            vocab = list(vocabulary)
            _check_vocab(vocab, "vocabulary")
        self._set_vocabulary(vocab)
        n = len(SPECIAL_TOKENS)
        codes = [ord(c) for c in vocab[n:]]
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(codes, tf.int64),
                                                tf.range(n, len(vocab), dtype=tf.int64)),
            default_value=tf.constant(vocab.index(UNK), tf.int64))
        # id -> code point; -1 for the tokens that decode to nothing (<pad>, <|endoftext|>).
        self._code_points = tf.constant([-1, REPLACEMENT, -1] + codes, tf.int32)

    @property
    def vocabulary_file(self):
        return self._vocabulary_file

    def get_config(self):
        if self._vocabulary_file is None:
            return {"vocabulary": self.vocab, "name": self.name}
        return {"vocabulary": asset_name(self._vocabulary_file), "name": self.name}

    @classmethod
    def from_config(cls, config):
        vocabulary = config["vocabulary"]
        return cls(asset_path(vocabulary) if isinstance(vocabulary, str) else vocabulary, name=config.get("name"))

    @property
    def special_tokens(self):
        return {"pad": PAD, "unk": UNK, "end_of_text": END_OF_TEXT}

    def _special_token_strings(self):
        return list(SPECIAL_TOKENS)

    @property
    def pad_id(self):
        return 0

    @property
    def end_of_text_id(self):
        return 2

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, strings):
        """Strings [batch] -> int64 RaggedTensor [batch, (characters)]; no special token added."""
        codes = tf.strings.unicode_decode(strings, "UTF-8", errors="replace", replacement_char=REPLACEMENT)
        return tf.ragged.map_flat_values(lambda c: self._table.lookup(tf.cast(c, tf.int64)), codes)

    @tf.function
    def detokenize(self, ids):
        """int64 ids [batch, len] (dense or ragged) -> UTF-8 strings [batch]. ``<pad>`` and ``<|endoftext|>``
        decode to nothing; ``<unk>`` and ids outside the vocabulary to U+FFFD."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        size = tf.constant(self.vocab_size, tf.int64)
        flat = ids.flat_values
        flat = tf.where((flat < 0) | (flat >= size), tf.constant(1, tf.int64), flat)
        codes = ids.with_flat_values(tf.gather(self._code_points, flat))
        codes = tf.ragged.boolean_mask(codes, codes >= 0)
        return tf.strings.unicode_encode(codes, "UTF-8")
