"""SentencePiece BPE (Kudo & Richardson, 2018) as a `tf.Module`, for models trained from scratch.

The vocabulary is learned with the ``sentencepiece`` package (:func:`train_sentencepiece`, BPE merges as
in Sennrich et al. 2016) and run in graph by ``tensorflow_text.SentencepieceTokenizer``, which links the
same C++ library: the ids are the package's own ``encode`` ids, and an exported SavedModel needs only
TensorFlow and tensorflow-text.

How the model is set up for language modelling on plain text (not SentencePiece's defaults, which are
meant for sentence-level translation):

* ids 0, 1, 2 are ``<pad>`` (never a real token: the LM loss ignores label 0 and the generation engine
  never produces it), ``<unk>`` and the end-of-text token ``<|endoftext|>`` (GPT-2's name; a control
  symbol, so the text "<|endoftext|>" is spelled with ordinary pieces and never becomes it);
* identity normalization, no dummy prefix, whitespace kept as it is, and ``"\\n"`` a piece of its own, so
  ``detokenize(tokenize(text)) == text`` for any valid UTF-8 text (tested);
* byte fallback: a character outside the vocabulary becomes its UTF-8 bytes (``<0x..>`` pieces) rather
  than ``<unk>``.

A tokenizer knows normalization and vocabulary only: ``tokenize`` adds no special token (the job puts
``<|endoftext|>`` between documents).

    path = train_sentencepiece(open("input.txt").read().splitlines(), vocab_size=8000, model_prefix="spm")
    tok = SentencePieceTokenizer(path)
    ids = tok.tokenize(tf.constant(["To be, or not to be"]))     # ragged int64
    tok.detokenize(ids)                                           # [b"To be, or not to be"]
"""
import io
import os
import re
import tempfile

import tensorflow as tf
import tensorflow_text as tf_text

from kerasplm.runs.serialization import asset_name, asset_path, serializable
from kerasplm.text.vocabulary import VocabularyLookup
from kerasplm.text.wordpiece import sanitize_utf8

PAD, UNK, END_OF_TEXT = "<pad>", "<unk>", "<|endoftext|>"
NEWLINE = "\n"
# Sentences longer than this many bytes are left out of training (SentencePiece's own limit is 4192).
MAX_SENTENCE_BYTES = 16384


def _training_lines(texts_or_path):
    """Non-empty lines of a text file or of a list of strings (each string may hold several lines)."""
    if isinstance(texts_or_path, (str, os.PathLike)) and os.path.isfile(texts_or_path):
        with open(texts_or_path, encoding="utf-8", errors="replace") as f:
            texts = f.read().split(NEWLINE)
    elif isinstance(texts_or_path, (str, os.PathLike)):
        raise FileNotFoundError(f"corpus file not found: {os.fspath(texts_or_path)[:200]} (pass a list of strings "
                                f"to train on texts)")
    else:
        texts = [line for text in texts_or_path for line in str(text).split(NEWLINE)]
    return [line for line in texts if line.strip()]


def train_sentencepiece(texts_or_path, vocab_size=8000, model_prefix=None, seed=0, byte_fallback=True,
                        max_sentences=2_000_000, num_threads=1):
    """Learns a SentencePiece BPE model; returns its serialized bytes, also written to
    ``model_prefix + ".model"`` when ``model_prefix`` is given.

    Args:
      texts_or_path: a UTF-8 text file, or a list of strings; training uses their non-empty lines.
      vocab_size: pieces in the model, the 3 special tokens, "\\n" and (with ``byte_fallback``) 256 byte
        pieces included. ValueError when the corpus cannot fill it (the message gives the largest size
        that works).
      seed: seeds SentencePiece's sampling of ``max_sentences`` lines (the only random step); the same
        corpus, seed and options give the same bytes.
      num_threads: 1 by default: BPE training is then deterministic whatever the machine.
    """
    import sentencepiece as spm  # noqa: PLC0415 (only training needs the package's trainer)

    lines = _training_lines(texts_or_path)
    if not lines:
        raise ValueError("empty corpus: train_sentencepiece needs at least one non-empty line")
    minimum = 4 + (256 if byte_fallback else 0)
    if not isinstance(vocab_size, int) or vocab_size <= minimum:
        raise ValueError(f"vocab_size must be an integer > {minimum} (3 special tokens, newline"
                         f"{', 256 byte pieces' if byte_fallback else ''}), got {vocab_size!r}")
    model = io.BytesIO()
    spm.set_random_generator_seed(int(seed))
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size, model_type="bpe",
            pad_id=0, unk_id=1, eos_id=2, bos_id=-1, pad_piece=PAD, unk_piece=UNK, eos_piece=END_OF_TEXT,
            user_defined_symbols=[NEWLINE], normalization_rule_name="identity", remove_extra_whitespaces=False,
            add_dummy_prefix=False, byte_fallback=byte_fallback, character_coverage=1.0,
            input_sentence_size=max_sentences, shuffle_input_sentence=True, max_sentence_length=MAX_SENTENCE_BYTES,
            num_threads=num_threads, minloglevel=2)
    except RuntimeError as e:  # e.g. "... Vocabulary size too high (8000). Please set it to a value <= 650."
        largest = re.search(r"value <= (\d+)", str(e))
        if largest:
            raise ValueError(f"vocab_size={vocab_size} is too large for this corpus: SentencePiece can learn at "
                             f"most {largest.group(1)} pieces from it") from None
        raise ValueError(f"SentencePiece training failed: {e}") from None
    data = model.getvalue()
    if model_prefix is not None:
        path = os.fspath(model_prefix) + ".model"
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-spm-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # atomic: a reader never sees half a model
    return data


@serializable
class SentencePieceTokenizer(VocabularyLookup, tf.Module):
    """A SentencePiece model (a ``.model`` file or its bytes); every method is a graph function.

    Token ids are int64. The model file is a ``tf.saved_model.Asset`` (``assets/`` of an export), and its
    bytes are baked into the graph functions' tokenizer op, so a reloaded SavedModel needs only tensorflow and
    tensorflow_text.

    Attributes (Python): ``vocab_size``, ``special_tokens`` (``{"pad": "<pad>", "unk": "<unk>",
    "end_of_text": "<|endoftext|>"}``: name -> token), ``token_to_id``, ``id_to_token``, ``pad_id``,
    ``end_of_text_id``, ``vocabulary_file`` (the ``.model`` file; a temporary copy when made from bytes).

    ``get_config``/``from_config`` round-trip it through the file (named relative to the run being written:
    :func:`kerasplm.runs.serialization.asset_name`).
    """

    id_functions = ("detokenize",)   # dense or ragged ids; traced for export (VocabularyLookup)

    def __init__(self, model, name=None):
        super().__init__(name=name)
        import sentencepiece as spm  # noqa: PLC0415

        if isinstance(model, (bytes, bytearray)):
            data = bytes(model)
            fd, path = tempfile.mkstemp(prefix="kerasplm_spm_", suffix=".model")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        else:
            path = os.fspath(model)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"SentencePiece model not found: {path}")
            with open(path, "rb") as f:
                data = f.read()
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(data)
        except (RuntimeError, OSError) as e:
            raise ValueError(f"{path}: not a SentencePiece model ({e})") from None
        self._pieces = [processor.IdToPiece(i) for i in range(processor.GetPieceSize())]
        self._set_vocabulary(self._pieces)
        roles = {"pad": processor.pad_id(), "unk": processor.unk_id(), "start_of_text": processor.bos_id(),
                 "end_of_text": processor.eos_id()}
        self._special = {name: self._pieces[i] for name, i in roles.items() if i >= 0}
        if processor.unk_id() < 0:
            raise ValueError(f"{path}: a SentencePiece model without an unknown token")
        self._unk_id = processor.unk_id()
        self._model_file = path
        self._model_path = tf.saved_model.Asset(path)
        self._model_bytes = data

    # Python-side conveniences (vocab_size, token_to_id, id_to_token: VocabularyLookup).
    vocabulary_kind = "SentencePiece vocabulary"

    @property
    def vocabulary_file(self):
        """The ``.model`` file this tokenizer reads (a temporary copy when it was made from bytes)."""
        return self._model_file

    def get_config(self):
        return {"model": asset_name(self._model_file), "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(asset_path(config["model"]), name=config.get("name"))

    @property
    def special_tokens(self):
        """``{name: token}`` of the model's special tokens (pad, unk, end_of_text; start_of_text if any)."""
        return dict(self._special)

    def _special_token_strings(self):
        return list(self._special.values())

    @property
    def pad_id(self):
        return self.token_to_id(self._special["pad"]) if "pad" in self._special else 0

    @property
    def end_of_text_id(self):
        return self.token_to_id(self._special["end_of_text"]) if "end_of_text" in self._special else None

    # Graph functions (exported with the module).
    def _op(self):
        """tensorflow-text's tokenizer, built inside each graph function. Its model resource is owned by the
        op's kernel: built eagerly, it is destroyed when TensorFlow clears its eager kernel cache (which
        ``tf.random.set_seed`` does); inside a function it lives as long as the function."""
        return tf_text.SentencepieceTokenizer(model=self._model_bytes, out_type=tf.int32)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, strings):
        """Strings [batch] -> int64 RaggedTensor [batch, (pieces)]; no special token added. Invalid UTF-8
        bytes become U+FFFD first."""
        return tf.cast(self._op().tokenize(sanitize_utf8(strings)), tf.int64)

    @tf.function
    def detokenize(self, ids):
        """int64 ids [batch, len] (dense or ragged) -> strings [batch]. Control tokens (<pad>,
        <|endoftext|>) decode to nothing; ids outside the vocabulary to ``<unk>`` (" ⁇ ")."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        size = tf.constant(self.vocab_size, tf.int64)
        unk = tf.constant(self._unk_id, tf.int64)
        ids = tf.ragged.map_flat_values(lambda v: tf.cast(tf.where((v < 0) | (v >= size), unk, v), tf.int32), ids)
        return self._op().detokenize(ids)

    @tf.function(input_signature=[])
    def get_vocab_size(self):
        """Number of pieces (int32 scalar)."""
        return self._op().vocab_size()

    @tf.function(input_signature=[])
    def get_model_path(self):
        """Path of the ``.model`` file (inside assets/ once exported)."""
        return self._model_path



@serializable
class AlbertSentencePieceTokenizer(SentencePieceTokenizer):
    """ALBERT's tokenizer: a pretrained SentencePiece model (``spiece.model``) after ALBERT's text normalization,
    in graph, as HuggingFace's ``AlbertTokenizer`` does it before the model's own normalizer::

        `` and '' -> "      (quotes as ALBERT's preprocessing wrote them)
        NFKD, then nonspacing marks (Mn) removed    unless keep_accents
        lower case                                   when lower_case

    Ids equal HuggingFace's on accents, CJK ideographs, emoji, control characters, long words and empty text
    (``tests/models/albert/test_convert.py``). One known difference: Hangul. NFKD splits a syllable into jamo;
    SentencePiece's normalizer composes them again (so does ALBERT's original Python tokenizer), while HuggingFace's
    ``tokenizers`` applies the same character map grapheme by grapheme and leaves them apart (an unknown piece).
    Special tokens written in the text (``[MASK]``) are not recognised: they are SentencePiece control symbols.
    NUL, which tensorflow-text's op takes as the end of the string, is read as U+E000 (a private-use character,
    unknown to ALBERT's vocabularies: one unknown piece, as SentencePiece makes of NUL).
    """

    def __init__(self, model, lower_case=True, keep_accents=False, name=None):
        self.lower_case, self.keep_accents = bool(lower_case), bool(keep_accents)
        super().__init__(model, name=name)

    def get_config(self):
        return {**super().get_config(), "lower_case": self.lower_case, "keep_accents": self.keep_accents}

    @classmethod
    def from_config(cls, config):
        return cls(asset_path(config["model"]), lower_case=config.get("lower_case", True),
                   keep_accents=config.get("keep_accents", False), name=config.get("name"))

    def normalize(self, strings):
        """ALBERT's normalization (the class docstring) of valid UTF-8 strings, any shape."""
        strings = tf.strings.regex_replace(strings, "``|''", '"')
        if not self.keep_accents:
            strings = tf.strings.regex_replace(tf_text.normalize_utf8(strings, "NFKD"), r"\p{Mn}", "")
        if self.lower_case:
            strings = tf.strings.lower(strings, encoding="utf-8")
        return strings

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, strings):
        """Strings [batch] -> int64 RaggedTensor [batch, (pieces)]; no special token added."""
        # tensorflow-text's op ends a string at NUL, which SentencePiece's normalizer keeps (an unknown piece):
        # U+E000 is read the same way (kept, unknown, merged with unknown neighbours as NUL is).
        strings = tf.strings.regex_replace(sanitize_utf8(strings), r"\x00", "\ue000")
        return tf.cast(self._op().tokenize(self.normalize(strings)), tf.int64)
