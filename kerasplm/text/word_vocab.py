"""A word vocabulary in graph, and the word-sequence preprocessor of a recurrent classifier (ULMFiT's).

:class:`WordTokenizer` normalizes and splits text into words with TensorFlow ops only, so an export tokenizes as
training did: invalid UTF-8 is replaced (U+FFFD), the text lowercased (``lowercase``), every ASCII punctuation
character but ``<`` and ``>`` made a word of its own (so ``<unk>`` stays one token), and the rest split on
whitespace. Ids come from a static hash table:

* 0 ``<pad>`` (never a real token; the loss ignores label 0), 1 ``<unk>`` (a word outside the vocabulary),
  2 ``<bos>`` (the start of a text, fastai's ``xxbos``), 3 ``<eos>`` (the end of a line of a corpus);
* 4 ... the words, most frequent first (ties alphabetical): :func:`build_word_vocab`.

The vocabulary file holds one token per line (:func:`write_word_vocab`; read back with
:func:`kerasplm.text.wordpiece.read_vocab`, which names file and line of a damaged one).

The word-vocabulary helpers are every family's (one of each): :func:`build_word_vocab` (ULMFiT's, and with its
``special_tokens`` and ``split`` ELMo's biLM and classifier vocabularies), :func:`word_vocab_text` /
:func:`write_word_vocab` (one token per line) and :func:`read_word_list` (a file's lines, as written).

:class:`WordSequencePreprocessor` turns strings into ``<bos> w_1 ... w_n`` ids cut to ``sequence_length``, right
padded, with their padding mask; ``reverse`` reads each text backwards (``w_n ... w_1 <bos>``):
the input of a backward language model and of its classifier.
"""
import collections

import tensorflow as tf

from kerasplm.runs.serialization import asset_name, asset_path, serializable
from kerasplm.text.vocabulary import VocabularyLookup
from kerasplm.text.wordpiece import read_vocab, sanitize_utf8

__all__ = ["PAD", "UNK", "BOS", "EOS", "SPECIAL_TOKENS", "WordTokenizer", "WordSequencePreprocessor",
           "build_word_vocab", "read_word_list", "word_vocab_text", "write_word_vocab"]

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)
# ASCII punctuation but < and >, which stay inside a word: WikiText's "<unk>" is one token (the special one).
_PUNCTUATION = r"([!-/:;=?@\[-`{-~])"


def split_words(strings, lowercase=True):
    """Strings ``[batch]`` -> ragged words ``[batch, (words)]`` (see the module docstring)."""
    text = sanitize_utf8(strings)
    if lowercase:
        text = tf.strings.lower(text, encoding="utf-8")
    text = tf.strings.regex_replace(text, _PUNCTUATION, r" \1 ")
    return tf.strings.split(text)


def build_word_vocab(lines, max_size=None, min_count=1, lowercase=True, batch=4096, special_tokens=SPECIAL_TOKENS,
                     split="words", max_words=None):
    """``special_tokens`` (default: :class:`WordTokenizer`'s four), then the words of ``lines`` seen at least
    ``min_count`` times, most frequent first (ties alphabetical); at most ``max_size`` tokens in all (special tokens
    included) and at most ``max_words`` words. A special token in the text (WikiText's ``<unk>``) counts as the
    special token, not as a word.

    ``split``: how a line becomes words: ``"words"``, as :class:`WordTokenizer` splits it (in graph, ``lowercase``,
    ``batch`` lines per call); ``"whitespace"``, ``str.split`` (ELMo's classifier); None, each line is already a
    list of words (ELMo's tokenized sentences)."""
    counts = collections.Counter()
    if split == "words":
        lines = list(lines)
        for i in range(0, len(lines), batch):
            words = split_words(tf.constant(lines[i:i + batch], tf.string), lowercase).flat_values.numpy()
            counts.update(w.decode("utf-8") for w in words)
    elif split == "whitespace":
        for line in lines:
            counts.update(line.split())
    elif split is None:
        for words in lines:
            counts.update(words)
    else:
        raise ValueError(f"split must be 'words', 'whitespace' or None, got {split!r}")
    for token in special_tokens:
        counts.pop(token, None)
    words = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
    vocab = list(special_tokens) + (words if max_words is None else words[:max_words])
    if max_size is not None:
        if max_size <= len(special_tokens):
            raise ValueError(f"max_size={max_size} leaves no room for a word after the {len(special_tokens)} special "
                             f"tokens")
        vocab = vocab[:max_size]
    return vocab


def word_vocab_text(vocab):
    """A word vocabulary file's text: one token per line (line i, 0-based, is token i)."""
    return "".join(token + "\n" for token in vocab)


def write_word_vocab(vocab, path):
    """One token per line, UTF-8 (:func:`word_vocab_text`)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(word_vocab_text(vocab))


def read_word_list(path):
    """The tokens of a word vocabulary file, one per line, as written (no check: a family checks its own special
    tokens); a ValueError names the file when it is not UTF-8."""
    try:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f]
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); the file is damaged") from None


@serializable
class WordTokenizer(VocabularyLookup, tf.Module):
    """Words <-> int64 ids in graph (see the module docstring).

    Args:
      vocabulary: a token list (:func:`build_word_vocab`: the special tokens first) or a vocabulary file; a run
        stores the file, named relative to the run (``get_config``).
      lowercase: lowercase the text before splitting it (the vocabulary is then lowercase too).
    """

    vocabulary_kind = "word vocabulary"

    def __init__(self, vocabulary, lowercase=True, name=None):
        super().__init__(name=name)
        if isinstance(vocabulary, str):
            self._vocabulary_file, vocab = vocabulary, read_vocab(vocabulary)
            where = vocabulary
        else:
            self._vocabulary_file, vocab = None, list(vocabulary)
            where = "the vocabulary"
        if tuple(vocab[:len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise ValueError(f"{where}: the first tokens must be {', '.join(SPECIAL_TOKENS)}, got "
                             f"{', '.join(vocab[:len(SPECIAL_TOKENS)])}")
        self._set_vocabulary(vocab)
        self.lowercase = bool(lowercase)
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(vocab, tf.string), tf.range(len(vocab), dtype=tf.int64)),
            default_value=tf.constant(1, tf.int64))

    @property
    def vocabulary_file(self):
        return self._vocabulary_file

    def get_config(self):
        vocabulary = self.vocab if self._vocabulary_file is None else asset_name(self._vocabulary_file)
        return {"vocabulary": vocabulary, "lowercase": self.lowercase, "name": self.name}

    @classmethod
    def from_config(cls, config):
        vocabulary = config["vocabulary"]
        return cls(asset_path(vocabulary) if isinstance(vocabulary, str) else vocabulary,
                   lowercase=config.get("lowercase", True), name=config.get("name"))

    def _special_token_strings(self):
        return list(SPECIAL_TOKENS)

    pad_id, unk_id, bos_id, eos_id = 0, 1, 2, 3

    def tokenize(self, strings):
        """Strings ``[batch]`` -> int64 RaggedTensor ``[batch, (words)]``; no special token added."""
        words = split_words(tf.convert_to_tensor(strings, tf.string), self.lowercase)
        return tf.ragged.map_flat_values(self._table.lookup, words)


@serializable
class WordSequencePreprocessor(tf.Module):
    """Strings -> ``{"token_ids": int64 (batch, T), "padding_mask": float32 (batch, T)}`` for a recurrent model.

    Each text becomes ``<bos> w_1 ... w_n``, cut to ``sequence_length`` tokens (the first ones), right-padded with 0
    to ``sequence_length`` (``pad=True``) or to the longest row (``pad=False``: :meth:`with_padding`, what an export
    uses). ``reverse=True`` reverses each row's real tokens (``w_n ... w_1 <bos>``; the padding stays on the right):
    a backward model reads the text from its end. Rows never have zero length (``<bos>`` alone for an empty text).
    ``pair`` (a second text) is not taken: a single-text classifier.
    """

    def __init__(self, tokenizer, sequence_length=512, reverse=False, pad=True, name=None):
        super().__init__(name=name)
        if sequence_length < 2:
            raise ValueError(f"sequence_length must be >= 2, got {sequence_length}")
        self.tokenizer = tokenizer
        self.sequence_length = int(sequence_length)
        self.reverse = bool(reverse)
        self.pad = bool(pad)

    def with_padding(self, pad):
        """The same preprocessor padding to ``sequence_length`` (True) or to each batch's longest row (False)."""
        return WordSequencePreprocessor(self.tokenizer, self.sequence_length, self.reverse, pad)

    def get_config(self):
        return {"tokenizer": {"class_name": type(self.tokenizer).__name__, "config": self.tokenizer.get_config()},
                "sequence_length": self.sequence_length, "reverse": self.reverse, "pad": self.pad}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["tokenizer"] = WordTokenizer.from_config(config["tokenizer"]["config"])
        return cls(**config)

    def __call__(self, text, pair=None):
        if pair is not None:
            raise ValueError("WordSequencePreprocessor takes one text per example (no text pairs)")
        ids = self.tokenizer.tokenize(tf.reshape(tf.convert_to_tensor(text, tf.string), [-1]))
        bos = tf.fill(tf.stack([ids.nrows(), 1]), tf.constant(self.tokenizer.bos_id, tf.int64))
        ids = tf.concat([bos, ids], axis=1)[:, :self.sequence_length]
        lengths = ids.row_lengths()
        width = self.sequence_length if self.pad else None
        dense = ids.to_tensor(0, shape=[None, width])
        if width is None:   # at least one column, also for an empty batch (a recurrent model needs a time step)
            dense = tf.pad(dense, [[0, 0], [0, tf.maximum(1 - tf.shape(dense)[1], 0)]])
        if self.reverse:
            dense = tf.reverse_sequence(dense, lengths, seq_axis=1, batch_axis=0)
        mask = tf.sequence_mask(lengths, tf.shape(dense)[1], tf.float32)
        return {"token_ids": dense, "padding_mask": mask}
