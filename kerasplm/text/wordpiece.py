"""WordPiece tokenizer as a `tf.Module` (tensorflow-text, fully in graph, SavedModel-exportable).

Normalization matches the seed translator's `preprocess_sentence` in spirit: Unicode NFD, accents
(\\p{Mn}) stripped, lower case, and every punctuation character (including ¿ and ¡) split into its
own token. `tensorflow_text.BertTokenizer(lower_case=True)` does all of that in graph.

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

PAD, UNK, START, END = "[PAD]", "[UNK]", "[START]", "[END]"
DEFAULT_RESERVED_TOKENS = (PAD, UNK, START, END)

# A reserved token looks like "[NAME]" (the learned vocabulary never holds such a token, because
# BERT splitting makes "[" and "]" tokens of their own).
_RESERVED_RE = re.compile(r"\[[A-Z_]+\]")


def sanitize_utf8(strings):
    """Replaces invalid UTF-8 byte sequences with U+FFFD so no later text op can fail on them."""
    return tf.strings.unicode_transcode(
        strings, input_encoding="UTF-8", output_encoding="UTF-8",
        errors="replace", replacement_char=0xFFFD)


def build_wordpiece_vocab(texts, vocab_size=8000, reserved_tokens=DEFAULT_RESERVED_TOKENS,
                          lower_case=True, learn_params=None, batch_size=1024):
    """Learns a WordPiece vocabulary (a list of str) from `texts`.

    `texts` is a list of str or a `tf.data.Dataset` of scalar (or batched) strings. The result starts
    with `reserved_tokens` in order ([PAD]=0, [UNK]=1, [START]=2, [END]=3 by default) followed by the
    learned tokens. The learner (tensorflow-text's `bert_vocab_from_dataset`) is deterministic, so
    the same input always gives the same vocabulary; there is no seed. `learn_params` is passed on to
    the learner (e.g. `dict(lower_thresh=5)` to keep rarer words on a small corpus). `vocab_size` is
    an upper bound: on a small corpus the learner stops when no word occurs often enough.
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
    """Writes a vocabulary, one token per line (UTF-8)."""
    with open(path, "w", encoding="utf-8") as f:
        for token in vocab:
            f.write(token + "\n")


def read_vocab(path):
    """Reads a vocabulary written by `write_vocab` (one token per line, UTF-8)."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").rstrip("\r") for line in f if line.strip()]


# Regex clean-up applied by detokenize (RE2 syntax, run in graph).
_CLEANUP_RULES = (
    (r" ##", ""),                       # join wordpieces of one word
    (r"^##", ""),                       # a continuation piece that lost its head
    (r"\s+([.,!?;:])", r"\1"),          # "it ." -> "it."
    (r"\s*'\s*", "'"),                  # "don ' t" -> "don't"
    (r"([¿¡])\s+", r"\1"),              # "¿ que" -> "¿que"
    (r"\s+", " "),
)


class WordPieceTokenizer(tf.Module):
    """Lower-casing, accent-folding WordPiece tokenizer; every method is a graph function.

    Token ids are int64. `tokenize` wraps each sentence in [START] ... [END]; `detokenize` drops
    [PAD]/[START]/[END] (and everything after the first [END]) and returns readable text. The
    vocabulary file is a `tf.saved_model.Asset`, so `tf.saved_model.save(tokenizer, dir)` copies
    it into `dir/assets/` and the reloaded module needs only tensorflow and tensorflow_text.
    """

    def __init__(self, vocab_path_or_list, lower_case=True, name=None):
        super().__init__(name=name)
        if isinstance(vocab_path_or_list, (str, os.PathLike)):
            vocab_path = os.fspath(vocab_path_or_list)
            if not os.path.exists(vocab_path):
                raise FileNotFoundError(f"vocabulary file not found: {vocab_path}")
            vocab = read_vocab(vocab_path)
        else:
            vocab = list(vocab_path_or_list)
            # The lookup table and the SavedModel asset both need a file.
            vocab_path = os.path.join(tempfile.mkdtemp(prefix="kerasplm_vocab_"), "vocab.txt")
            write_vocab(vocab, vocab_path)
        for token in DEFAULT_RESERVED_TOKENS:
            if token not in vocab:
                raise ValueError(f"vocabulary {vocab_path} lacks the reserved token {token!r}")
        if vocab[0] != PAD:
            raise ValueError(f"vocabulary {vocab_path}: id 0 must be {PAD!r}, found {vocab[0]!r}")

        self._vocab_list = vocab
        self._reserved_list = [t for t in vocab if _RESERVED_RE.fullmatch(t)]
        self.lower_case = lower_case
        self._vocab_path = tf.saved_model.Asset(vocab_path)
        self._tokenizer = tf_text.BertTokenizer(
            vocab_path, lower_case=lower_case, token_out_type=tf.int64, unknown_token=UNK)
        self._vocab = tf.Variable(vocab, trainable=False, dtype=tf.string, name="vocab")
        self._reserved = tf.Variable(self._reserved_list, trainable=False, dtype=tf.string,
                                     name="reserved_tokens")
        # detokenize/lookup accept dense or ragged ids: trace both so both survive export.
        for fn in (self.detokenize, self.lookup):
            fn.get_concrete_function(tf.TensorSpec([None, None], tf.int64))
            fn.get_concrete_function(tf.RaggedTensorSpec([None, None], tf.int64))

    # Python-side conveniences.
    @property
    def vocab_size(self):
        return len(self._vocab_list)

    @property
    def pad_id(self):
        return 0

    @property
    def unk_id(self):
        return self._vocab_list.index(UNK)

    @property
    def start_id(self):
        return self._vocab_list.index(START)

    @property
    def end_id(self):
        return self._vocab_list.index(END)

    @property
    def vocab(self):
        return list(self._vocab_list)

    # Graph functions (exported with the module).
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, strings):
        """Strings [batch] -> int64 RaggedTensor [batch, (tokens)] with [START] ... [END]."""
        pieces = self._tokenizer.tokenize(sanitize_utf8(strings))   # [batch, words, pieces]
        ids = pieces.merge_dims(-2, -1)
        batch = tf.shape(strings, out_type=tf.int64)[0]
        starts = tf.fill([batch, 1], tf.constant(self.start_id, tf.int64))
        ends = tf.fill([batch, 1], tf.constant(self.end_id, tf.int64))
        return tf.concat([starts, ids, ends], axis=1)

    def _as_ragged(self, ids):
        """Dense or ragged [batch, len] ids -> ragged ids, out-of-range ids mapped to [UNK]."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        size = tf.constant(self.vocab_size, tf.int64)
        return tf.ragged.map_flat_values(
            lambda v: tf.where((v < 0) | (v >= size), tf.constant(self.unk_id, tf.int64), v), ids)

    @tf.function
    def lookup(self, ids):
        """int64 ids [batch, len] (dense or ragged) -> string tokens, ragged [batch, (len)]."""
        return tf.gather(self._vocab, self._as_ragged(ids))

    @tf.function
    def detokenize(self, ids):
        """int64 ids [batch, len] (dense or ragged) -> readable strings [batch].

        Drops [PAD]/[START]/[END] and everything after the first [END]; keeps [UNK].
        """
        ids = self._as_ragged(ids).to_tensor(default_value=self.pad_id)
        # True from the first [END] of each row on.
        after_end = tf.math.cumsum(tf.cast(ids == self.end_id, tf.int32), axis=1) > 0
        drop = after_end | (ids == self.pad_id) | (ids == self.start_id)
        kept = tf.ragged.boolean_mask(ids, tf.logical_not(drop))
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
    def get_reserved_tokens(self):
        """The reserved tokens ([PAD], [UNK], [START], [END], ...) as a string vector."""
        return tf.identity(self._reserved)
