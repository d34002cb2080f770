"""WordPiece tokenizer as a `tf.Module` (tensorflow-text, fully in graph, SavedModel-exportable).

A tokenizer knows only **normalization and its vocabulary**: text in, word-piece ids out, and back.
It adds no special tokens; which of them wrap a sentence ([START]/[END] for the translator,
[CLS]/[SEP] for BERT), and the truncation and padding around them, belong to a *preprocessor*
(:mod:`kerasplm.text.preprocessing`).

Normalization is tensorflow-text's `BertTokenizer` (BERT's basic + WordPiece tokenizer):

* ``lower_case=True`` (uncased): Unicode NFD, accents (\\p{Mn}) stripped, case folded, every
  punctuation character (including ¿ and ¡) its own token, CJK ideographs split;
* ``lower_case=False`` (cased): text kept as is, accents included, as BERT's cased tokenizer does
  (``normalization_form="NFC"`` etc. optionally normalizes first).

Any ``vocab.txt`` loads: ours ([PAD]=0 [UNK] [START] [END] ...) and Google's BERT vocabularies
([PAD]=0, [unused*], [UNK], [CLS], [SEP], [MASK] ...). Bracketed upper-case tokens are *special
tokens*, exposed by name (``tokenizer.special_tokens``, ``tokenizer.token_to_id("[CLS]")``).

Typical use::

    vocab = build_wordpiece_vocab(spanish_sentences, vocab_size=8000)
    write_vocab(vocab, "spa_vocab.txt")
    tok = WordPieceTokenizer("spa_vocab.txt")
    ids = tok.tokenize(tf.constant(["¿Puedo tomar prestado este libro?"]))   # ragged int64
    tok.detokenize(ids)   # [b"¿puedo tomar prestado este libro?"]
"""
import os
import re
import tempfile

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.tools.wordpiece_vocab.bert_vocab_from_dataset import bert_vocab_from_dataset

from kerasplm.runs.serialization import asset_name, asset_path, serializable
from kerasplm.text.vocabulary import VocabularyLookup

PAD, UNK, START, END = "[PAD]", "[UNK]", "[START]", "[END]"
# The translator's special tokens, in id order ([PAD]=0, [UNK]=1, [START]=2, [END]=3): the vocabulary
# builder's default (kerasplm.text.preprocessing.TranslatorPreprocessor.special_tokens is this tuple).
DEFAULT_RESERVED_TOKENS = (PAD, UNK, START, END)

# A special token looks like "[NAME]" in upper case: [PAD], [UNK], [CLS], [SEP], [MASK], [START], [END].
# BERT's "[unused0]" ... are ordinary (never produced) tokens. A learned vocabulary never holds such a
# token, because BERT splitting makes "[" and "]" tokens of their own.
SPECIAL_TOKEN_RE = re.compile(r"\[[A-Z][A-Z0-9_]*\]")


def sanitize_utf8(strings):
    """Replaces invalid UTF-8 byte sequences with U+FFFD so no later text op can fail on them."""
    return tf.strings.unicode_transcode(
        strings, input_encoding="UTF-8", output_encoding="UTF-8",
        errors="replace", replacement_char=0xFFFD)


def build_wordpiece_vocab(texts, vocab_size=8000, reserved_tokens=DEFAULT_RESERVED_TOKENS,
                          lower_case=True, learn_params=None, batch_size=1024):
    """Learns a WordPiece vocabulary (a list of str) from `texts`.

    `texts` is a list of str or a `tf.data.Dataset` of scalar (or batched) strings. The result starts
    with `reserved_tokens` in order (the translator's [PAD]=0, [UNK]=1, [START]=2, [END]=3 by default;
    pass a preprocessor's ``special_tokens`` for another model) followed by the learned tokens. The
    learner (tensorflow-text's `bert_vocab_from_dataset`) is deterministic, so the same input always
    gives the same vocabulary; there is no seed. `learn_params` is passed on to the learner (e.g.
    `dict(lower_thresh=5)` to keep rarer words on a small corpus). `vocab_size` is an upper bound: on
    a small corpus the learner stops when no word occurs often enough.
    """
    if isinstance(texts, tf.data.Dataset):
        dataset = texts
        if dataset.element_spec.shape.rank == 0:
            dataset = dataset.batch(batch_size)
    else:
        texts = [t for t in texts]
        if not texts:
            raise ValueError("empty corpus: build_wordpiece_vocab needs at least one sentence")
        dataset = tf.data.Dataset.from_tensor_slices(tf.constant(texts, tf.string)).batch(batch_size)
    dataset = dataset.map(sanitize_utf8)
    # count_words() inside the learner fails with StopIteration on an empty corpus: check first.
    if not any(tf.size(batch) > 0 for batch in dataset.take(1)):
        raise ValueError("empty corpus: build_wordpiece_vocab needs at least one sentence")
    reserved = list(reserved_tokens)
    if reserved[:1] != [PAD] or UNK not in reserved:
        raise ValueError(f"reserved_tokens must start with {PAD!r} and contain {UNK!r}, "
                         f"got {reserved!r}")
    vocab = bert_vocab_from_dataset(
        dataset, vocab_size=vocab_size, reserved_tokens=reserved,
        bert_tokenizer_params=dict(lower_case=lower_case), learn_params=learn_params or {})
    if len(vocab) <= len(reserved):
        raise ValueError("empty corpus: no token could be learned from the given texts")
    return vocab


def write_vocab(vocab, path):
    """Writes a vocabulary, one token per line (UTF-8); line i (0-based) is token id i."""
    with open(path, "w", encoding="utf-8") as f:
        for token in vocab:
            f.write(token + "\n")


def read_vocab(path):
    """Reads a vocabulary file (one token per line, UTF-8, ``\\n`` or ``\\r\\n``); id = 0-based line number.

    Raises ValueError naming the file and line for invalid UTF-8, an empty line or a repeated token
    (each would shift or break the ids), FileNotFoundError for a missing file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"vocabulary file not found: {path}")
    with open(path, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()                                          # the final newline ends the last token
    vocab, seen = [], {}
    for lineno, line in enumerate(lines, start=1):
        try:
            token = line.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: line {lineno} is not valid UTF-8 (byte {e.start})") from None
        if not token.strip():
            raise ValueError(f"{path}: line {lineno} is empty (every line is one token; ids are line numbers)")
        if token in seen:
            raise ValueError(f"{path}: token {token!r} on line {lineno} repeats line {seen[token]}")
        seen[token] = lineno
        vocab.append(token)
    if not vocab:
        raise ValueError(f"vocabulary file {path} is empty")
    return vocab


def _vocab_file(vocab_path_or_list):
    """(vocab list, path of a canonical vocab file: one token per line, "\\n" endings)."""
    if isinstance(vocab_path_or_list, (str, os.PathLike)):
        path = os.fspath(vocab_path_or_list)
        vocab = read_vocab(path)
        with open(path, "rb") as f:
            canonical = f.read() == "".join(t + "\n" for t in vocab).encode("utf-8")
        if canonical:
            return vocab, path
    else:
        vocab = [str(t) for t in vocab_path_or_list]
        if not vocab:
            raise ValueError("empty vocabulary")
        bad = [t for t in vocab if not t.strip() or "\n" in t or "\r" in t]
        if bad:
            raise ValueError(f"vocabulary tokens must be non-blank single lines, got {bad[0]!r}")
        if len(set(vocab)) != len(vocab):
            seen = set()
            repeated = next(t for t in vocab if t in seen or seen.add(t))
            raise ValueError(f"vocabulary token {repeated!r} repeats")
    # The lookup table and the SavedModel asset both read a file: write a canonical copy (a CRLF file
    # would otherwise give the table keys ending in "\r").
    path = os.path.join(tempfile.mkdtemp(prefix="kerasplm_vocab_"), "vocab.txt")
    write_vocab(vocab, path)
    return vocab, path


# Regex clean-up applied by detokenize (RE2 syntax, run in graph).
_CLEANUP_RULES = (
    (r" ##", ""),                       # join wordpieces of one word
    (r"^##", ""),                       # a continuation piece that lost its head
    (r"\s+([.,!?;:])", r"\1"),          # "it ." -> "it."
    (r"\s*'\s*", "'"),                  # "don ' t" -> "don't"
    (r"([¿¡])\s+", r"\1"),              # "¿ que" -> "¿que"
    (r"\s+", " "),
)


@serializable
class WordPieceTokenizer(VocabularyLookup, tf.Module):
    """WordPiece tokenizer over any ``vocab.txt``; every method is a graph function.

    Token ids are int64. ``tokenize`` returns the word pieces only (no special tokens added);
    ``detokenize`` drops every special token except ``unk_token`` and returns readable text. The
    vocabulary file is a ``tf.saved_model.Asset``, so ``tf.saved_model.save(tokenizer, dir)`` copies
    it into ``dir/assets/`` and the reloaded module needs only tensorflow and tensorflow_text.

    Args:
      vocab_path_or_list: a ``vocab.txt`` path (line i = id i) or a list of tokens.
      lower_case: uncased normalization (NFD, accents stripped, case folded); False keeps case and
        accents (BERT cased).
      unk_token: the token unknown words map to; must be in the vocabulary.
      max_bytes_per_word: longer words become ``unk_token`` (tensorflow-text's rule, in UTF-8 bytes).
      max_chars_per_token, normalization_form, preserve_unused_token, split_unknown_characters:
        passed to ``tensorflow_text.BertTokenizer`` (see its documentation); the defaults are BERT's.
    """

    id_functions = ("detokenize", "lookup")   # dense or ragged ids; traced for export (VocabularyLookup)

    def __init__(self, vocab_path_or_list, lower_case=True, unk_token=UNK, max_bytes_per_word=100,
                 max_chars_per_token=None, normalization_form=None, preserve_unused_token=False,
                 split_unknown_characters=False, name=None):
        super().__init__(name=name)
        # As given (a path or a list): what get_config stores, not a canonical temporary copy.
        self._vocabulary_source = (os.fspath(vocab_path_or_list) if isinstance(vocab_path_or_list, (str, os.PathLike))
                                   else [str(t) for t in vocab_path_or_list])
        vocab, vocab_path = _vocab_file(vocab_path_or_list)
        self._set_vocabulary(vocab)
        if unk_token not in self._ids:
            raise ValueError(f"vocabulary {vocab_path} lacks the unknown token {unk_token!r} "
                             f"(pass unk_token= to name another)")
        self.unk_token = unk_token
        self.lower_case = bool(lower_case)
        self.options = dict(lower_case=self.lower_case, unk_token=unk_token, max_bytes_per_word=max_bytes_per_word,
                            max_chars_per_token=max_chars_per_token, normalization_form=normalization_form,
                            preserve_unused_token=preserve_unused_token,
                            split_unknown_characters=split_unknown_characters)
        self._special = {t: i for t, i in self._ids.items() if SPECIAL_TOKEN_RE.fullmatch(t)}
        self._vocab_path = tf.saved_model.Asset(vocab_path)
        self._tokenizer = self._make_tokenizer(vocab_path, self.options)
        self._vocab = tf.Variable(vocab, trainable=False, dtype=tf.string, name="vocab")
        self._special_list = tf.Variable(tf.constant(list(self._special), tf.string, shape=[len(self._special)]),
                                         trainable=False, name="special_tokens")
        # detokenize drops these ids: every special token except the unknown one.
        dropped = [t in self._special and t != unk_token for t in vocab]
        self._dropped = tf.Variable(dropped, trainable=False, dtype=tf.bool, name="dropped_by_detokenize")

    @property
    def vocabulary_file(self):
        """The vocabulary file this tokenizer was made from (None when made from a list)."""
        return self._vocabulary_source if isinstance(self._vocabulary_source, str) else None

    def _vocabulary_config(self):
        source = self._vocabulary_source
        return asset_name(source) if isinstance(source, str) else list(source)

    def get_config(self):
        """The constructor's arguments (the vocabulary file named relative to the run being written)."""
        return {"vocabulary": self._vocabulary_config(), **self.options, "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        vocabulary = config.pop("vocabulary")
        return cls(asset_path(vocabulary) if isinstance(vocabulary, str) else vocabulary, **config)

    def _make_tokenizer(self, vocab_path, options):
        """The tensorflow-text tokenizer behind ``tokenize`` (subclasses replace it)."""
        o = options
        return tf_text.BertTokenizer(
            vocab_path, lower_case=o["lower_case"], token_out_type=tf.int64, unknown_token=o["unk_token"],
            max_bytes_per_word=o["max_bytes_per_word"], max_chars_per_token=o["max_chars_per_token"],
            normalization_form=o["normalization_form"], preserve_unused_token=o["preserve_unused_token"],
            split_unknown_characters=o["split_unknown_characters"])

    # Python-side conveniences (vocab_size, vocab, token_to_id, id_to_token: VocabularyLookup).
    @property
    def special_tokens(self):
        """``{token: id}`` of the special tokens present ([PAD], [UNK], [CLS], [SEP], [MASK], [START], ...)."""
        return dict(self._special)

    def _special_token_strings(self):
        return list(self._special)

    @property
    def pad_id(self):
        """The id of [PAD] (0 in BERT's vocabularies and ours)."""
        return self.token_to_id(PAD)

    @property
    def unk_id(self):
        return self._ids[self.unk_token]

    # Graph functions (exported with the module).
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, strings):
        """Strings [batch] -> int64 RaggedTensor [batch, (pieces)]: word pieces only, no special tokens."""
        pieces = self._tokenizer.tokenize(sanitize_utf8(strings))   # [batch, words, pieces]
        return pieces.merge_dims(-2, -1)

    def _as_ragged(self, ids):
        """Dense or ragged [batch, len] integer ids (any int dtype) -> ragged int64 ids, out-of-range ids mapped to
        the unknown token."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        size = tf.constant(self.vocab_size, tf.int64)
        return tf.ragged.map_flat_values(
            lambda v: tf.where((v < 0) | (v >= size), tf.constant(self.unk_id, tf.int64), v),
            tf.cast(ids, tf.int64))

    @tf.function
    def lookup(self, ids):
        """Integer ids [batch, len] (dense or ragged; int32 or int64) -> string tokens, ragged [batch, (len)]."""
        return tf.gather(self._vocab, self._as_ragged(ids))

    @tf.function
    def detokenize(self, ids):
        """int64 ids [batch, len] (dense or ragged) -> readable strings [batch].

        Drops every special token ([PAD], [CLS], [SEP], [START], [END], ...) except the unknown token,
        joins word pieces and tidies spaces around punctuation.
        """
        ids = self._as_ragged(ids)
        kept = tf.ragged.boolean_mask(ids, tf.logical_not(tf.gather(self._dropped, ids)))
        tokens = tf.gather(self._vocab, kept)
        text = tf.strings.reduce_join(tokens, separator=" ", axis=-1)
        for pattern, rewrite in _CLEANUP_RULES:
            text = tf.strings.regex_replace(text, pattern, rewrite)
        return tf.strings.strip(text)

    @tf.function(input_signature=[])
    def get_vocab_size(self):
        """Number of tokens in the vocabulary (int32 scalar)."""
        return tf.shape(self._vocab)[0]

    @tf.function(input_signature=[])
    def get_vocab_path(self):
        """Path of the vocabulary file (inside assets/ once exported)."""
        return self._vocab_path

    @tf.function(input_signature=[])
    def get_special_tokens(self):
        """The special tokens present ([PAD], [UNK], ...), in id order, as a string vector."""
        return tf.identity(self._special_list)
