"""GPT-2's byte-level BPE tokenizer as a `tf.Module` of plain TensorFlow ops, so it exports with a model.

Radford et al. 2019, section 2.2 ("Input Representation"): BPE runs on UTF-8 **bytes**, so every string
has a tokenization and no token is unknown; to keep merges within word-like pieces, text is first split by
a regular expression, and BPE merges never cross two pieces. The steps, as :meth:`BytePairTokenizer.tokenize`
runs them on a batch:

1. Invalid UTF-8 is replaced by U+FFFD (what Python's ``bytes.decode("utf-8", "replace")`` does before a
   Hugging Face tokenizer sees the text).
2. Special tokens written literally in the text (``<|endoftext|>``) are cut out and map to their ids, as
   Hugging Face's ``GPT2Tokenizer`` does.
3. Pre-tokenization with GPT-2's pattern (:data:`GPT2_SPLIT_PATTERN`). TensorFlow's regular expressions
   (RE2) have no lookahead, so ``\\s+(?!\\S)`` is emulated: a run of n >= 2 whitespace characters followed
   by a non-space is cut before its last character, which then starts the next piece (a plain space joins
   the following word, ``" world"``; a tab or newline stays a piece of its own).
4. Each piece's bytes become symbols of GPT-2's byte alphabet (:func:`byte_alphabet`: printable bytes are
   themselves, the others are shifted to printable characters, e.g. a space is ``Ġ``).
5. BPE: repeatedly merge, in every piece at once, the adjacent pair of symbols with the lowest rank in
   ``merges.txt`` (all its occurrences, left to right), until no pair of a piece has a rank.
6. The resulting symbols are vocabulary ids (``vocab.json``).

``detokenize`` joins the tokens' bytes, so ``detokenize(tokenize(x)) == x`` for every valid UTF-8 ``x``.

Typical use::

    tok = BytePairTokenizer("gpt2/vocab.json", "gpt2/merges.txt")
    ids = tok.tokenize(tf.constant(["Hello world"]))   # <tf.RaggedTensor [[15496, 995]]>
    tok.detokenize(ids)                                  # [b"Hello world"]
"""
import json
import os

import tensorflow as tf

from kerasplm.runs.serialization import asset_name, asset_path, serializable
from kerasplm.text.vocabulary import VocabularyLookup
from kerasplm.text.wordpiece import sanitize_utf8

__all__ = ["BPE_ASSETS", "BytePairTokenizer", "GPT2_SPLIT_PATTERN", "bpe_tokenizer_files", "byte_alphabet",
           "read_bpe_merges", "read_bpe_vocab"]

# GPT-2's pre-tokenization pattern (Python `regex` syntax): contractions, letters, digits, other symbols,
# each optionally after one space, then whitespace.
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Its character classes written out for RE2. \s is Unicode White_Space (RE2's \s is ASCII only). Hugging
# Face's tokenizers (Oniguruma) know Unicode 16.0, TensorFlow's RE2 an older version: the letters and
# digits added since are listed (checked against tokenizers 0.23 over every code point).
_SPACE = r"\t\n\x0b\x0c\r \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
_NEW_LETTERS = ("1c89-1c8a a7cb-a7cd a7da-a7dc 105c0-105f3 10d4a-10d65 10d6f-10d85 10ec2-10ec4 11380-11389 1138b "
                "1138e 11390-113b5 113b7 113d1 113d3 11bc0-11be0 13460-143fa 16100-1611d 16d40-16d6c 18cff "
                "1e5d0-1e5ed 1e5f0 2ebf0-2ee5d")
_NEW_DIGITS = "10d40-10d49 116d0-116e3 11bf0-11bf9 16130-16139 16d70-16d79 1ccf0-1ccf9 1e5f1-1e5fa"


def _re2_ranges(spec):
    """ "a-b c" (hex code points) -> RE2 class content r"\\x{a}-\\x{b}\\x{c}"."""
    return "".join("-".join(rf"\x{{{end}}}" for end in item.split("-")) for item in spec.split())


_LETTER = rf"\p{{L}}{_re2_ranges(_NEW_LETTERS)}"
_DIGIT = rf"\p{{N}}{_re2_ranges(_NEW_DIGITS)}"
# GPT2_SPLIT_PATTERN without the lookahead: whitespace runs were already cut where it matters (step 3).
_PIECE_PATTERN = (rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{_LETTER}]+| ?[{_DIGIT}]+| ?[^{_SPACE}{_LETTER}{_DIGIT}]+"
                  rf"|[{_SPACE}]+")
# A whitespace character, then the last one of its run and the non-space after it: the cut goes between
# the two whitespace characters. (Matches cannot overlap: each ends on a non-space.)
_CUT_PATTERN = rf"([{_SPACE}])([{_SPACE}][^{_SPACE}])"
# Marks piece boundaries for tf.strings.split: never in sanitized UTF-8 text, never matched by RE2.
_CUT = b"\xff"

END_OF_TEXT = "<|endoftext|>"


def byte_alphabet():
    """GPT-2's 256 symbols, one per byte value (a list of str): printable Latin-1 bytes ("!" to "~", "¡" to
    "¬", "®" to "ÿ") are their own character; the other 68 (controls, space, DEL, NBSP, soft hyphen) become
    chr(256), chr(257), ... in byte order, so that no symbol is whitespace or a control character."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(others)) for b in range(256)]


def _read_text(path, what):
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: {what} not found") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read the {what} ({e.strerror})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ValueError(f"{path}: line {line} is not valid UTF-8 (byte {e.start}); the {what} is damaged") from None


def read_bpe_vocab(path):
    """``vocab.json`` -> list of tokens (str), index = id. Raises ValueError naming the file (and the line
    or token) unless it is a JSON object {token: id} whose ids are exactly 0 .. n-1."""
    try:
        vocab = json.loads(_read_text(path, "BPE vocabulary"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: line {e.lineno} column {e.colno}: not valid JSON ({e.msg})") from None
    if not isinstance(vocab, dict) or not vocab:
        raise ValueError(f"{path}: expected a non-empty JSON object {{token: id}} (GPT-2's vocab.json)")
    tokens = [None] * len(vocab)
    for token, token_id in vocab.items():
        if not isinstance(token_id, int) or isinstance(token_id, bool) or not 0 <= token_id < len(vocab):
            raise ValueError(f"{path}: token {token!r} has id {token_id!r}; ids must be the integers "
                             f"0 .. {len(vocab) - 1}")
        if tokens[token_id] is not None:
            raise ValueError(f"{path}: tokens {tokens[token_id]!r} and {token!r} share id {token_id}")
        tokens[token_id] = token
    return tokens


def read_bpe_merges(path):
    """``merges.txt`` -> list of (line number, left, right) in rank order. An optional first line
    ``#version: ...`` is skipped; every other non-final line must be two symbols separated by one space.
    Raises ValueError naming the file and line otherwise (or for a merge listed twice)."""
    merges, seen = [], {}
    lines = _read_text(path, "BPE merges file").split("\n")
    for lineno, line in enumerate(lines, start=1):
        line = line.rstrip("\r")
        if (lineno == 1 and line.startswith("#version")) or (not line and lineno == len(lines)):
            continue
        pair = tuple(line.split(" "))
        if len(pair) != 2 or "" in pair:
            raise ValueError(f"{path}: line {lineno}: expected two symbols separated by one space, got {line!r}")
        if pair in seen:
            raise ValueError(f"{path}: line {lineno}: the merge {line!r} repeats line {seen[pair]}")
        seen[pair] = lineno
        merges.append((lineno, *pair))
    return merges



# A run directory's byte-level BPE files (its preprocessor, a BytePairTokenizer, reads them): asset -> file name.
BPE_ASSETS = {"bpe_vocab": "vocab.json", "bpe_merges": "merges.txt"}


def bpe_tokenizer_files(source, model_vocab_size):
    """{file name: text} of the byte-level BPE tokenizer in the directory ``source`` (``vocab.json`` and
    ``merges.txt``, checked: they parse, and the vocabulary's ids fit a model of ``model_vocab_size``), to copy
    into a run directory (assets :data:`BPE_ASSETS`); {} when ``source`` has neither file."""
    paths = {name: os.path.join(source, name) for name in BPE_ASSETS.values()}
    present = [name for name, path in paths.items() if os.path.exists(path)]
    if not present:
        return {}
    if len(present) < len(paths):
        missing = next(path for name, path in paths.items() if name not in present)
        raise ValueError(f"{missing}: not found (a GPT-2 tokenizer needs both vocab.json and merges.txt)")
    vocab_size = len(read_bpe_vocab(paths["vocab.json"]))
    read_bpe_merges(paths["merges.txt"])
    if vocab_size > model_vocab_size:
        raise ValueError(f"{paths['vocab.json']}: {vocab_size} tokens, but the model embeds only "
                         f"{model_vocab_size}: not this model's tokenizer")
    files = {}
    for name, path in paths.items():
        with open(path, encoding="utf-8", newline="") as f:
            files[name] = f.read()
    return files

def _merge_table(merges_txt, ids, vocab_json):
    """(keys, values) of the merge table: the pair of symbol ids (left * V + right) -> rank * V + the id of
    the merged symbol (V the vocabulary size), so one int64 lookup per pair gives both."""
    size, keys, values = len(ids), [], []
    for rank, (lineno, left, right) in enumerate(read_bpe_merges(merges_txt)):
        for symbol in (left, right, left + right):
            if symbol not in ids:
                raise ValueError(f"{merges_txt}: line {lineno}: {symbol!r} (of the merge {left} {right}) is "
                                 f"not in the vocabulary {vocab_json}")
        keys.append(ids[left] * size + ids[right])
        values.append(rank * size + ids[left + right])
    return keys, values


def _default_special_tokens(vocab):
    return {"end_of_text": END_OF_TEXT} if END_OF_TEXT in vocab else {}


@serializable
class BytePairTokenizer(VocabularyLookup, tf.Module):
    """GPT-2's byte-level BPE over a ``vocab.json`` + ``merges.txt`` pair; ``tokenize`` and ``detokenize`` are
    graph functions of TensorFlow ops only (they run in a SavedModel without kerasplm).

    Ids are those of Hugging Face's ``GPT2Tokenizer`` on the same files (no special token added; a special
    token written in the text maps to its id). Every merge's two symbols and its result must be in the
    vocabulary, as must the 256 byte symbols, so no token is ever unknown.

    Merges follow GPT-2's procedure (all occurrences of the best pair per step). Hugging Face's Rust BPE
    merges one occurrence at a time by rank; the two agree whenever every merge's symbols come from earlier
    merges or bytes, as in every trained ``merges.txt`` (a hand-made file that merges a symbol before
    creating it could differ).

    Args:
      vocab_json: path of ``vocab.json`` ({token: id}, ids 0 .. n-1).
      merges_txt: path of ``merges.txt`` (one merge per line, in rank order; an optional ``#version`` line).
      special_tokens: {name: token} of the special tokens recognised in the text; default
        ``{"end_of_text": "<|endoftext|>"}`` when the vocabulary has it. Each must be in the vocabulary and
        hold no whitespace. ``{}`` reads them as plain text (Hugging Face's ``split_special_tokens=True``),
        e.g. for untrusted input.

    ``get_config``/``from_config`` round-trip it through its two files (named relative to the run being written:
    :func:`kerasplm.runs.serialization.asset_name`); ``vocabulary_file`` is ``vocab_json``.
    """

    id_functions = ("detokenize",)   # dense or ragged ids; traced for export (VocabularyLookup)

    def __init__(self, vocab_json, merges_txt, special_tokens=None, name=None):
        super().__init__(name=name)
        self._files = (os.fspath(vocab_json), os.fspath(merges_txt))
        tokens = read_bpe_vocab(vocab_json)
        ids = {token: i for i, token in enumerate(tokens)}
        self._set_vocabulary(tokens)
        special = _default_special_tokens(ids) if special_tokens is None else dict(special_tokens)
        missing = {name: token for name, token in special.items() if token not in ids}
        if missing:
            raise ValueError(f"{vocab_json}: special tokens {missing} are not in the vocabulary")
        if any(not token or any(c.isspace() for c in token) for token in special.values()):
            raise ValueError(f"special tokens must be non-empty and without whitespace, got {special}")
        self._special = special
        alphabet = byte_alphabet()
        absent = [symbol for symbol in alphabet if symbol not in ids]
        if absent:
            raise ValueError(f"{vocab_json}: {len(absent)} of GPT-2's 256 byte symbols are not in the vocabulary "
                             f"(first: {absent[0]!r}); it is not a byte-level BPE vocabulary")
        keys, values = _merge_table(merges_txt, ids, vocab_json)
        self.num_merges = len(keys)
        self._merges = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(keys, tf.int64, shape=[len(keys)]),
                                                tf.constant(values, tf.int64, shape=[len(values)])), -1)
        self._byte_symbols = tf.constant([ids[symbol] for symbol in alphabet], tf.int64)
        # Longest first, so that a special token containing another one wins (as Hugging Face's splitter).
        literals = sorted(special.values(), key=len, reverse=True)
        self._special_pattern = "|".join(_re2_escape(token) for token in literals)
        self._piece_pattern = "|".join(filter(None, [self._special_pattern, _PIECE_PATTERN]))
        if special:
            self._special_ids = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(tf.constant(literals), tf.constant([ids[t] for t in literals],
                                                                                       tf.int64)), -1)
        # Each token's bytes: byte symbols map back to their byte; a character outside the alphabet (only
        # in added tokens) stands for itself, UTF-8 encoded.
        byte_of = {symbol: bytes([b]) for b, symbol in enumerate(alphabet)}
        self._token_bytes = tf.constant([b"".join(byte_of.get(c) or c.encode("utf-8") for c in token)
                                         for token in tokens])

    # Python-side conveniences (vocab_size, token_to_id, id_to_token: VocabularyLookup; a token is a
    # vocabulary entry in GPT-2's byte alphabet, where a space is "Ġ").
    @property
    def special_tokens(self):
        """``{name: token}`` of the special tokens, e.g. ``{"end_of_text": "<|endoftext|>"}``."""
        return dict(self._special)

    def _special_token_strings(self):
        return list(self._special.values())

    @property
    def vocabulary_file(self):
        """The ``vocab.json`` this tokenizer reads."""
        return self._files[0]

    def get_config(self):
        return {"vocab_json": asset_name(self._files[0]), "merges_txt": asset_name(self._files[1]),
                "special_tokens": dict(self._special), "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(asset_path(config["vocab_json"]), asset_path(config["merges_txt"]),
                   special_tokens=config.get("special_tokens"), name=config.get("name"))

    # Graph functions (exported with the module).
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, strings):
        """Strings [batch] -> int64 RaggedTensor [batch, (tokens)]; no special token is added."""
        pieces = self.pre_tokenize(strings)                              # [batch, (pieces)]
        return pieces.with_flat_values(self._bpe(pieces.flat_values)).merge_dims(1, 2)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def pre_tokenize(self, strings):
        """Strings [batch] -> the pieces BPE works within, ragged [batch, (pieces)] (steps 1-3).

        Every boundary is marked with the byte 0xFF, then the text is split there once. Sanitized text never
        holds that byte and RE2 matches no character class on it, so a mark also stops every later match:
        special tokens are marked first, then the whitespace cuts, then the end of every piece.
        """
        text = sanitize_utf8(strings)
        if self._special:
            text = tf.strings.regex_replace(text, self._special_pattern, _CUT + b"\\0" + _CUT)
        text = tf.strings.regex_replace(text, _CUT_PATTERN, b"\\1" + _CUT + b"\\2")
        text = tf.strings.regex_replace(text, self._piece_pattern, b"\\0" + _CUT)
        pieces = tf.strings.split(text, sep=_CUT)                       # [batch, (pieces)], some empty
        return tf.ragged.boolean_mask(pieces, tf.strings.length(pieces) > 0)

    def _bpe(self, pieces):
        """Pieces [n] (strings) -> token ids, ragged [n, (tokens)] (steps 4-6)."""
        if self._special:                                               # a special token is one symbol
            special_ids = self._special_ids.lookup(pieces)
            pieces = tf.where(special_ids >= 0, tf.constant(b"\x00"), pieces)
        piece_bytes = tf.strings.bytes_split(pieces)                     # [n, (bytes)]
        byte_values = tf.reshape(tf.io.decode_raw(piece_bytes.flat_values, tf.uint8), [-1])
        symbols = tf.gather(self._byte_symbols, tf.cast(byte_values, tf.int32))
        rows = piece_bytes.value_rowids()
        if self._special:
            symbols = tf.where(tf.gather(special_ids, rows) >= 0, tf.gather(special_ids, rows), symbols)
        num_pieces = tf.shape(pieces, out_type=tf.int64)[0]
        # A fixpoint over merges, not a decoding loop: the generation engine's tf.while_loop (a model step,
        # token choosers, a fixed length) has nothing to offer it. Pieces leave the loop once nothing in them
        # merges (their symbols are stored per step and put back in piece order at the end), so each step
        # works only on the pieces still merging.
        done = tf.TensorArray(tf.int64, size=0, dynamic_size=True, infer_shape=False, element_shape=[None])

        def step(i, symbols, rows, done_symbols, done_rows):
            symbols, rows, finished = self._merge_best_pairs(symbols, rows)
            (symbols, finished_symbols), (rows, finished_rows) = (
                tf.dynamic_partition(x, tf.cast(finished, tf.int32), 2) for x in (symbols, rows))
            return (i + 1, symbols, rows, done_symbols.write(i, finished_symbols),
                    done_rows.write(i, finished_rows))

        *_, done_symbols, done_rows = tf.while_loop(
            lambda i, symbols, *_: (i == 0) | (tf.size(symbols) > 0), step,
            (tf.constant(0), symbols, rows, done, done),
            shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]), tf.TensorShape([None]), None, None))
        rows = done_rows.concat()
        order = tf.argsort(rows, stable=True)                           # a piece's symbols stay in order
        return tf.RaggedTensor.from_value_rowids(tf.gather(done_symbols.concat(), order), tf.gather(rows, order),
                                                 nrows=num_pieces)

    def _merge_best_pairs(self, symbols, rows):
        """One BPE step over all pieces at once. ``symbols`` [m] int64 (flat, piece by piece), ``rows`` [m]
        their piece. In every piece, the adjacent pair with the lowest merge rank is merged wherever it
        occurs, left to right. Returns (symbols, rows, finished [m]: the symbol's piece had nothing to merge).
        """
        size = tf.constant(self.vocab_size, tf.int64)
        no_rank = tf.constant(tf.int64.max, tf.int64)
        # Pair i = symbols i and i + 1 (the last symbol is paired with a dummy: row -1, never the same piece).
        next_symbols = tf.concat([symbols[1:], tf.zeros_like(symbols[:1])], 0)
        next_rows = tf.concat([rows[1:], -tf.ones_like(rows[:1])], 0)
        merge = self._merges.lookup(symbols * size + next_symbols)     # [m]
        rank = tf.where((rows == next_rows) & (merge >= 0), merge // size, no_rank)
        best = tf.math.segment_min(rank, rows)                          # [pieces] (rows are sorted)
        candidate = (rank < no_rank) & (rank == tf.gather(best, rows))
        chosen = tf.cond(tf.reduce_any(candidate[1:] & candidate[:-1]), lambda: _every_other(candidate),
                         lambda: candidate)                              # symbol i becomes the merged symbol
        absorbed = tf.concat([tf.zeros_like(chosen[:1]), chosen[:-1]], 0)   # symbol i + 1 disappears
        symbols = tf.where(chosen, merge % size, symbols)
        finished = tf.gather(best == no_rank, rows)
        kept = tf.where(~absorbed)[:, 0]
        return tf.gather(symbols, kept), tf.gather(rows, kept), tf.gather(finished, kept)

    @tf.function
    def detokenize(self, ids):
        """int64 ids [batch, len] (dense or ragged) -> strings [batch]: the tokens' bytes joined, invalid
        UTF-8 (from an arbitrary id sequence) replaced by U+FFFD as Hugging Face's decode does. Ids outside
        [0, vocab_size) (e.g. -1 padding) are skipped. Special tokens are kept as text."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        ids = tf.cast(ids, tf.int64)
        valid = tf.ragged.boolean_mask(ids, (ids >= 0) & (ids < self.vocab_size))
        return sanitize_utf8(tf.strings.reduce_join(tf.gather(self._token_bytes, valid), axis=-1))

    @tf.function(input_signature=[])
    def get_vocab_size(self):
        """Number of tokens in the vocabulary (int32 scalar)."""
        return tf.shape(self._token_bytes)[0]


def _every_other(candidate):
    """Occurrences of one pair overlap only in a run of one repeated symbol ("a a a"): there, as in GPT-2's
    left-to-right scan, only the 1st, 3rd, ... pair of each run of consecutive ``candidate`` pairs merges."""
    run = tf.cumsum(tf.cast(~candidate, tf.int64))                      # run id: a non-candidate starts one
    seen = tf.cumsum(tf.cast(candidate, tf.int64))                      # candidates so far, inclusive
    seen_at_run_start = tf.where(candidate, tf.zeros_like(seen), seen)
    before_run = tf.math.unsorted_segment_max(seen_at_run_start, run, tf.size(run, tf.int64) + 1)
    return candidate & ((seen - tf.gather(before_run, run)) % 2 == 1)


def _re2_escape(literal):
    """``literal`` as an RE2 pattern that matches exactly it."""
    return "".join(c if c.isalnum() else rf"\x{{{ord(c):x}}}" for c in literal)

