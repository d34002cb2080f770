"""BERT's tokenizer and preprocessor, in graph, equal to HuggingFace's ``BertTokenizer`` id for id.

:class:`BertTokenizer` reproduces the basic + WordPiece tokenization of google-research/bert
(``tokenization.py``) as HuggingFace's Python ``BertTokenizer`` (``BertTokenizerLegacy`` in
transformers 5) does it, with TensorFlow ops only, so it exports with the model:

1. special tokens written in the text (``[CLS] [SEP] [PAD] [UNK] [MASK]``) stay single tokens;
2. clean-up: ``\\t \\n \\r`` and every space separator (Zs) become a space; control, format, private-use,
   surrogate and unassigned characters (``\\p{C}``) and U+FFFD are removed (not replaced by a space);
3. a space on each side of every CJK ideograph;
4. Unicode NFC;
5. uncased: lower case (full Unicode mapping, ``str.lower``'s), then NFD and nonspacing marks (Mn)
   removed (the accents); cased: nothing (``strip_accents=True`` strips accents without lower-casing);
6. words split on whitespace (Z*) and every punctuation character (ASCII non-alphanumerics and P*) its
   own word;
7. WordPiece: greedy longest match with ``##`` continuation pieces; a word that cannot be covered, or one
   longer than ``max_chars_per_word`` (100) characters, becomes ``[UNK]``.

tensorflow-text's ``BertTokenizer`` differs from this in several places, which is why only its WordPiece
step is used here: its case folding is ICU's NFKC_Casefold (``ß`` -> ``ss``, ``ﬁ`` -> ``fi``, full-width
letters -> ASCII), it applies no NFC, it replaces control and zero-width characters by a space where BERT
deletes them (``"ab\\u200bcd"`` is one word for BERT), keeps unassigned and private-use characters, splits
only on ASCII whitespace (not U+00A0, U+3000, U+2028 ...), splits ``[MASK]`` into three words, and caps
words in UTF-8 bytes rather than characters. ``tests/text/test_bert_tokenizer.py`` checks each case.

:class:`BertPreprocessor` packs ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` with segment ids, truncated
like HuggingFace's ``truncation=True`` (``longest_first``) and padded, as the backbone's input dict.
"""
import keras
import tensorflow as tf
import tensorflow_text as tf_text

from kerasplm.runs.serialization import serializable
from kerasplm.text.preprocessing import Preprocessor, pack_segments
from kerasplm.text.wordpiece import UNK, WordPieceTokenizer, sanitize_utf8

# The special tokens HuggingFace keeps whole when they appear in the text (its "all_special_tokens").
BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# RE2 patterns of the basic tokenizer (google-research/bert tokenization.py, HuggingFace's BasicTokenizer).
_WHITESPACE_TO_SPACE = r"[\t\n\r\p{Zs}]"
# Everything outside the assigned, non-"C" categories is dropped: Cc, Cf, Co, Cs and unassigned (Cn,
# which RE2 cannot name), plus U+FFFD (what invalid UTF-8 became).
_REMOVED = r"[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Z}]|\x{FFFD}"
# The "CJK Unified Ideographs" ranges of the reference's _is_chinese_char.
_CJK = (r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}"
        r"\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]")
# _is_punctuation: every non-alphanumeric ASCII character, and the Unicode punctuation categories.
_PUNCTUATION = r"[!-/:-@\[-`{-~]|\p{P}"
_WHITESPACE = r"\p{Z}+"   # after the clean-up: the space, U+2028 and U+2029 (str.split splits on them too)
_RAW_WHITESPACE = r"[\t\n\r\p{Z}]+"   # the same separators before the clean-up turns them into spaces


def _literal(token):
    """RE2 pattern matching ``token`` literally."""
    return "".join("\\" + c if not c.isalnum() else c for c in token)


@serializable
class BertTokenizer(WordPieceTokenizer):
    """BERT's tokenizer over a ``vocab.txt`` (see the module docstring for every normalization step).

    Args:
      vocab_path_or_list: a ``vocab.txt`` path (line i = id i) or a list of tokens.
      lower_case: uncased BERT (lower case, accents stripped) when True; cased when False.
      strip_accents: None follows ``lower_case`` (HuggingFace's default); True / False force it.
      unk_token: the unknown token.
      max_chars_per_word: words with more characters become ``unk_token`` (HF's ``max_input_chars_per_word``).
      keep_special_tokens: ``[CLS]`` etc. written in the text stay single tokens (HuggingFace's default);
        False tokenizes them as text (``[``, ``mask``, ``]``).
      tokenize_chinese_chars: put each CJK ideograph in a word of its own (HuggingFace's default).

    ``tokenize(strings [B]) -> int64 RaggedTensor [B, (pieces)]`` adds no special token; ``words`` gives the
    normalized words before WordPiece; ``detokenize``/``lookup``/``token_to_id`` are
    :class:`WordPieceTokenizer`'s.
    """

    def __init__(self, vocab_path_or_list, lower_case=True, strip_accents=None, unk_token=UNK,
                 max_chars_per_word=100, keep_special_tokens=True, tokenize_chinese_chars=True, name=None):
        if isinstance(max_chars_per_word, bool) or not isinstance(max_chars_per_word, int) or max_chars_per_word < 1:
            raise ValueError(f"max_chars_per_word must be a positive integer, got {max_chars_per_word!r}")
        self.strip_accents = bool(lower_case) if strip_accents is None else bool(strip_accents)
        self.max_chars_per_word = max_chars_per_word
        self.tokenize_chinese_chars = bool(tokenize_chinese_chars)
        # tensorflow-text caps words in bytes; a character is at most 4 bytes, so this cap never binds
        # before the character cap applied in tokenize().
        super().__init__(vocab_path_or_list, lower_case=lower_case, unk_token=unk_token,
                         max_bytes_per_word=4 * max_chars_per_word, name=name)
        self.options.update(strip_accents=self.strip_accents, max_chars_per_word=max_chars_per_word,
                            keep_special_tokens=bool(keep_special_tokens),
                            tokenize_chinese_chars=self.tokenize_chinese_chars)
        self._config = {"lower_case": self.lower_case, "strip_accents": self.strip_accents, "unk_token": unk_token,
                        "max_chars_per_word": max_chars_per_word, "keep_special_tokens": bool(keep_special_tokens),
                        "tokenize_chinese_chars": self.tokenize_chinese_chars}
        kept = [t for t in BERT_SPECIAL_TOKENS if t in self._ids] if keep_special_tokens else []
        self._special_pattern = "|".join(_literal(t) for t in kept) or None

    def get_config(self):
        return {"vocabulary": self._vocabulary_config(), **self._config, "name": self.name}

    def _make_tokenizer(self, vocab_path, options):
        """Only tensorflow-text's WordPiece step (the normalization and word splitting are this class's)."""
        table = tf.lookup.StaticVocabularyTable(
            tf.lookup.TextFileInitializer(vocab_path, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
                                          tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), num_oov_buckets=1)
        return tf_text.WordpieceTokenizer(table, max_bytes_per_word=options["max_bytes_per_word"],
                                          token_out_type=tf.int64, unknown_token=options["unk_token"])

    @staticmethod
    def clean(strings):
        """Step 2: whitespace to spaces, control/format/unassigned characters and U+FFFD removed (any shape).
        (Done before anything else: tensorflow-text's regex_split stops at a NUL character.)"""
        return tf.strings.regex_replace(tf.strings.regex_replace(strings, _WHITESPACE_TO_SPACE, " "), _REMOVED, "")

    def normalize(self, text, space_cjk=True):
        """Steps 3-5 of the module docstring on cleaned text of any shape (``space_cjk=False``: without step 3,
        for text already cut at the ideographs)."""
        if self.tokenize_chinese_chars and space_cjk:
            text = tf.strings.regex_replace(text, f"({_CJK})", r" \1 ")
        text = tf_text.normalize_utf8(text, "NFC")
        if self.lower_case:
            text = tf.strings.lower(text, encoding="utf-8")
        if self.strip_accents:
            text = tf.strings.regex_replace(tf_text.normalize_utf8(text, "NFD"), r"\p{Mn}", "")
        return text

    # autograph=False: straight-line TensorFlow code; converting it (and tensorflow-text's internals) cost
    # seconds per trace.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def words(self, strings):
        """Strings [B] -> the basic tokenizer's words, string RaggedTensor [B, (words)]."""
        strings = self.clean(sanitize_utf8(strings))
        if self._special_pattern is None:
            return tf_text.regex_split(self.normalize(strings), f"{_WHITESPACE}|{_PUNCTUATION}", _PUNCTUATION)
        # Special tokens first split out of the raw text, then every other piece normalized on its own.
        pieces = tf_text.regex_split(strings, self._special_pattern, self._special_pattern)   # [B, (pieces)]
        flat = pieces.flat_values
        special = tf.strings.regex_full_match(flat, self._special_pattern)
        flat = tf.where(special, flat, self.normalize(flat))
        keep = f"{self._special_pattern}|{_PUNCTUATION}"
        words = tf_text.regex_split(flat, f"{self._special_pattern}|{_WHITESPACE}|{_PUNCTUATION}", keep)
        return pieces.with_flat_values(words).merge_dims(-2, -1)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, strings):
        """Strings [B] -> int64 RaggedTensor [B, (pieces)]: word pieces only, no special tokens added."""
        words = self.words(strings)
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > self.max_chars_per_word
        capped = words.with_flat_values(tf.where(too_long, self.unk_token, words.flat_values))   # -> [UNK]
        return self._tokenizer.tokenize(capped).merge_dims(-2, -1)             # [B, (words), (pieces)] merged

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize_with_offsets(self, strings):
        """Strings [B] -> ``(ids, starts, ends)``, int64 RaggedTensors [B, (pieces)]: the ids of :meth:`tokenize`
        and each piece's character span ``[start, end)`` in its string (Unicode code points of the string with
        invalid UTF-8 replaced by U+FFFD, one per bad byte sequence, as the tagger export counts them).

        The raw text is cut into the basic tokenizer's words first (at whitespace, punctuation, CJK ideographs
        and written special tokens: the same cuts :meth:`words` makes after normalizing) and each word is
        normalized on its own, so every piece stays inside its word's span. A piece's span is its exact
        characters when normalization kept the word's length (lower case, stripped accents of composed
        letters: ``"Café"`` -> ``caf`` [0, 3), ``##e`` [3, 4)); otherwise (a length change, a word turned into
        ``[UNK]``) every piece of the word spans the whole word. The ids equal :meth:`tokenize`'s
        (``tests/text/test_bert_tokenizer.py`` checks it on the edge cases).
        """
        strings = sanitize_utf8(strings)
        keep = [_PUNCTUATION] + ([_CJK] if self.tokenize_chinese_chars else [])
        if self._special_pattern is not None:
            keep.insert(0, self._special_pattern)          # leftmost alternative wins: "[MASK]" before "["
        keep = "|".join(keep)
        words, byte_starts, byte_ends = tf_text.regex_split_with_offsets(
            strings, f"{keep}|{_RAW_WHITESPACE}", keep)                  # [B, (words)] of the raw text
        raw = words.flat_values
        special = (tf.strings.regex_full_match(raw, self._special_pattern) if self._special_pattern is not None
                   else tf.zeros_like(raw, tf.bool))
        normalized = tf.where(special, raw, self.normalize(self.clean(raw), space_cjk=False))
        length = tf.cast(tf.strings.length(normalized, unit="UTF8_CHAR"), tf.int64)
        too_long = length > self.max_chars_per_word
        normalized = tf.where(too_long, self.unk_token, normalized)
        ids, piece_starts, piece_ends = self._tokenizer.tokenize_with_offsets(normalized)  # [words, (pieces)]
        # A piece's characters within its word, mapped into the text where normalization kept the length.
        word_starts = _char_offsets(strings, byte_starts).flat_values
        word_ends = _char_offsets(strings, byte_ends).flat_values
        exact = ~too_long & tf.equal(length, word_ends - word_starts)
        per_piece = ids.value_rowids()
        inside_starts = _char_offsets(normalized, piece_starts).flat_values
        inside_ends = _char_offsets(normalized, piece_ends).flat_values
        exact = tf.gather(exact, per_piece)
        starts = tf.where(exact, tf.gather(word_starts, per_piece) + inside_starts, tf.gather(word_starts, per_piece))
        ends = tf.where(exact, tf.gather(word_starts, per_piece) + inside_ends, tf.gather(word_ends, per_piece))
        by_text = [words.with_flat_values(ids.with_flat_values(v)).merge_dims(-2, -1) for v in (ids.flat_values,
                                                                                                 starts, ends)]
        return tuple(by_text)


def _char_offsets(strings, byte_offsets):
    """Byte offsets ragged [N, (k)] into ``strings`` [N] (valid UTF-8) -> the same offsets in characters: the
    number of characters that start before each byte offset (a sorted search over the character starts)."""
    _, char_starts = tf.strings.unicode_decode_with_offsets(strings, "UTF-8")         # [N, (chars)] byte starts
    limit = tf.int64.max
    sorted_starts = char_starts.to_tensor(default_value=limit)
    values = tf.cast(byte_offsets, tf.int64).to_tensor(default_value=limit)
    found = tf.searchsorted(sorted_starts, values, side="left")
    return tf.RaggedTensor.from_tensor(tf.cast(found, tf.int64), lengths=byte_offsets.row_lengths())


@serializable
class BertPreprocessor(Preprocessor):
    """Strings -> BERT's input dict: ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]``, truncated and padded.

    ``preprocessor(text)`` or ``preprocessor(text, text_pair)`` (string tensors [B]) returns
    ``{"token_ids", "segment_ids", "padding_mask"}``, int64 ``[B, L]``. Truncation keeps the special tokens
    and trims the word pieces to ``sequence_length`` as HuggingFace's ``truncation=True`` (the longer
    segment loses a piece first, the second one on ties). ``L`` is ``sequence_length`` with
    ``pad_to_length=True`` (fixed shapes for training), else the longest row of the batch (serving; at least 2).

    Args:
      tokenizer: a :class:`BertTokenizer` (its vocabulary must hold ``[CLS]`` and ``[SEP]``, ``[PAD]`` = 0), or any
        kerasplm tokenizer holding ``start_token``, ``end_token`` and ``pad_token``.
      sequence_length: the packed length cap, special tokens included (at most the model's positions).
      start_token, end_token, pad_token: ``[CLS]``, ``[SEP]``, ``[PAD]`` (RoBERTa: ``<s>``, ``</s>``, ``<pad>``).
      pair_separators: end tokens between the two texts of a pair: 1 (BERT) or 2 (RoBERTa's
        ``<s> A </s></s> B </s>``).
    """

    def __init__(self, tokenizer, sequence_length=128, pad_to_length=True, name=None, start_token="[CLS]",
                 end_token="[SEP]", pad_token="[PAD]", pair_separators=1):
        if isinstance(sequence_length, bool) or not isinstance(sequence_length, int) or sequence_length < 3:
            raise ValueError(f"sequence_length must be an integer >= 3 ([CLS] A [SEP] B [SEP] needs room), "
                             f"got {sequence_length!r}")
        if pair_separators not in (1, 2):
            raise ValueError(f"pair_separators must be 1 (BERT) or 2 (RoBERTa), got {pair_separators!r}")
        missing = [t for t in (start_token, end_token, pad_token) if t not in tokenizer.vocab]
        if missing:
            raise ValueError(f"the vocabulary lacks BERT's special token(s) {', '.join(missing)}")
        super().__init__(sequence_length=sequence_length, pad_id=tokenizer.token_to_id(pad_token), name=name)
        self.tokenizer = tokenizer
        self.cls_id, self.sep_id = tokenizer.token_to_id(start_token), tokenizer.token_to_id(end_token)
        self.pad_to_length = bool(pad_to_length)
        self.pair_separators = pair_separators
        # Only what differs from BERT's defaults is written to a config (BERT runs' configs stay as they were).
        self._special_config = {k: v for k, v, default in (
            ("start_token", start_token, "[CLS]"), ("end_token", end_token, "[SEP]"), ("pad_token", pad_token, "[PAD]"),
            ("pair_separators", pair_separators, 1)) if v != default}

    @property
    def special_token_ids(self):
        return {"pad": self.pad_id, "cls": self.cls_id, "sep": self.sep_id}

    def get_config(self):
        return {"tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                "sequence_length": self.sequence_length, "pad_to_length": self.pad_to_length, "name": self.name,
                **self._special_config}

    def with_length(self, sequence_length, pad_to_length):
        """The same packing (tokenizer, special tokens) at another length."""
        return type(self)(self.tokenizer, sequence_length, pad_to_length, **self._special_config)

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "tokenizer": keras.saving.deserialize_keras_object(config["tokenizer"])})

    @classmethod
    def for_tokenizer(cls, tokenizer, sequence_length=128, pad_to_length=True):
        """The packing of the model ``tokenizer`` belongs to, told by its vocabulary: BERT's ``[CLS] A [SEP] B
        [SEP]`` when it holds ``[CLS]`` (padding ``[PAD]``, or ``<pad>`` as ALBERT's SentencePiece), else RoBERTa's
        ``<s> A </s></s> B </s>`` (padding ``<pad>``)."""
        vocab = set(tokenizer.vocab)
        pad = "[PAD]" if "[PAD]" in vocab or "<pad>" not in vocab else "<pad>"
        if "[CLS]" in vocab or "<s>" not in vocab:
            return cls(tokenizer, sequence_length, pad_to_length, pad_token=pad)
        return cls(tokenizer, sequence_length, pad_to_length, start_token="<s>", end_token="</s>", pad_token=pad,
                   pair_separators=2)

    def packed(self, text, text_pair=None):
        """Ragged ``(token_ids, segment_ids)`` [B, (len)], len <= sequence_length."""
        segments = [self.tokenizer.tokenize(text)]
        if text_pair is not None:
            segments.append(self.tokenizer.tokenize(text_pair))
        if len(segments) == 1 or self.pair_separators == 1:
            return pack_segments(segments, self.cls_id, self.sep_id, self.sequence_length)
        # RoBERTa's "<s> A </s></s> B </s>": trimmed as HuggingFace's longest_first with its 4 special tokens,
        # then the second separator put before B.
        first, second = tf_text.RoundRobinTrimmer(max_seq_length=self.sequence_length - 4).trim(segments)
        separator = tf.fill(tf.stack([second.nrows(), 1]), tf.cast(self.sep_id, second.dtype))
        second = tf.concat([tf.RaggedTensor.from_tensor(separator), second], axis=1)
        return pack_segments([first, second], self.cls_id, self.sep_id)

    @tf.autograph.experimental.do_not_convert
    def __call__(self, text, text_pair=None):
        token_ids, segment_ids = self.packed(text, text_pair)
        width = self.sequence_length if self.pad_to_length else None
        shape = [None, width]
        inputs = {"token_ids": token_ids.to_tensor(default_value=tf.cast(self.pad_id, tf.int64), shape=shape),
                  "segment_ids": segment_ids.to_tensor(default_value=0, shape=shape),
                  "padding_mask": tf.ones_like(token_ids).to_tensor(default_value=0, shape=shape)}
        if not self.pad_to_length:
            # Every packed row holds [CLS] and [SEP]; only an empty batch is narrower ([0, 0]): widen it so that
            # a model's position slicing and [CLS] pooling stay well defined.
            inputs = {k: tf.pad(v, [[0, 0], [0, tf.maximum(0, 2 - tf.shape(v)[1])]]) for k, v in inputs.items()}
        return inputs
