"""Export a :class:`kerasplm.jobs.translation.Translator` as a TF Serving SavedModel (strings in, strings out).

The SavedModel is a :class:`TranslatorModule` (an :class:`kerasplm.export.base.ExportModule`) holding the Keras
model, the preprocessor with both WordPiece tokenizers (vocabularies as ``tf.saved_model.Asset``) and the
decoding functions. Signatures (every
``inputs`` is ``tf.string [None]``, one sentence per row):

``serving_default``           inputs -> translation string [batch]                 (greedy)
``translate``                 inputs, beam_size int32 [], max_length int32 [] -> translation, score float32
                              (0 = default for both options: greedy / the length rule)
``translate_with_attention``  inputs -> translation, tokens string [batch, T], source_tokens string
                              [batch, S], attention float32 [batch, heads, T, S], target_length int32,
                              source_length int32
``metadata``                  (no inputs) -> metadata string [] (the JSON of assets.extra/kerasplm.json;
                              added by :func:`kerasplm.export.base.save_version`)

Variable tracking, metadata and the atomic versioned save are :mod:`kerasplm.export.base`'s; this module holds
only the translator's signatures and decoding glue. [START]/[END] and the source cut are the
:class:`kerasplm.text.TranslatorPreprocessor`'s, the same as in training and ``Translator.translate``.
Tokenize/detokenize (tensorflow-text ops) run in the plain signature functions; the decoding loop is
an inner ``tf.function`` that is XLA-compiled only with ``jit_compile=True``. See export/README.md.
"""
import os

import tensorflow as tf

from kerasplm.export.base import ExportModule, save_version
from kerasplm.runs import load_run
from kerasplm.text.preprocessing import TranslatorPreprocessor

FAMILY = "transformer_translator"
MAX_BEAM_SIZE = 8
DEFAULT_ALPHA = 0.6


def _ceil_div_rule(width, ratio, offset):
    """ceil(ratio * width + offset) as int32 (the generation module's rule for the buffer size)."""
    return tf.cast(tf.math.ceil(ratio * tf.cast(width, tf.float32) + offset), tf.int32)


class TranslatorModule(ExportModule):
    """The exported translator: model + preprocessor (both tokenizers) + decoding, all graph functions.

    Decoding is the cached search of :mod:`kerasplm.generation` (same length rule, stopping and beam
    scoring as ``Translator.translate``), driven with a buffer size computed in graph from the padded
    source width, so one trace serves every batch shape.
    """

    family = FAMILY

    def __init__(self, translator, max_source_length=None, max_decode_length=None, alpha=DEFAULT_ALPHA,
                 max_beam_size=MAX_BEAM_SIZE, jit_compile=False):
        super().__init__(translator.model, family=(translator.config or {}).get("family", FAMILY), name="translator")
        from kerasplm.generation.seq2seq import DEFAULT_OFFSET, DEFAULT_RATIO

        config = self.model.config
        self.max_source_length = int(max_source_length or config.pe_input)
        self.max_decode_length = int(max_decode_length or config.pe_target)
        if not 3 <= self.max_source_length <= config.pe_input:
            raise ValueError(f"max_source_length must be in [3, pe_input={config.pe_input}], "
                             f"got {self.max_source_length}")
        if not 1 <= self.max_decode_length <= config.pe_target:
            raise ValueError(f"max_decode_length must be in [1, pe_target={config.pe_target}], "
                             f"got {self.max_decode_length}")
        self.ratio, self.offset, self.alpha = float(DEFAULT_RATIO), float(DEFAULT_OFFSET), float(alpha)
        self.max_beam_size = int(min(max_beam_size, config.target_vocab_size // 2))
        if self.max_beam_size < 1:
            raise ValueError(f"target vocabulary of {config.target_vocab_size} tokens is too small for beam search")
        self.jit_compile = bool(jit_compile)
        self.preprocessor = TranslatorPreprocessor(translator.src_tokenizer, translator.tgt_tokenizer,
                                                   max_source_length=self.max_source_length)
        self._start, self._end = self.preprocessor.start_id, self.preprocessor.end_id
        self._greedy_core = tf.function(self._greedy_impl, jit_compile=self.jit_compile)
        self._beam_cores = [tf.function(self._beam_impl(k), jit_compile=self.jit_compile)
                            for k in range(1, self.max_beam_size + 1)]

    # ---- inner decoding functions (XLA-compilable; token ids only) ----
    def _greedy_impl(self, src_ids, buffer):
        """``src_ids int32 (B, S)``, ``buffer int32 (T + 1,)`` (only its static length T + 1 is used, so
        that XLA sees the buffer size as a compile-time constant) -> (ids (B, T + 1), steps)."""
        from kerasplm.generation.search import greedy_search
        from kerasplm.generation.seq2seq import source_max_lengths, transformer_step_fn

        cap = tf.shape(buffer)[0] - 1
        step_fn, cache = transformer_step_fn(self.model, src_ids, cap, 1, 0)
        max_lengths = source_max_lengths(src_ids, cap, self.ratio, self.offset, 0)
        return greedy_search(step_fn, cache, max_lengths, cap, self._start, self._end, 0)

    def _beam_impl(self, beam_size):
        def beam(src_ids, buffer):
            from kerasplm.generation.search import beam_search
            from kerasplm.generation.seq2seq import source_max_lengths, transformer_step_fn

            cap = tf.shape(buffer)[0] - 1
            step_fn, cache = transformer_step_fn(self.model, src_ids, cap, beam_size, 0)
            max_lengths = source_max_lengths(src_ids, cap, self.ratio, self.offset, 0)
            ids, scores, steps = beam_search(step_fn, cache, max_lengths, cap, beam_size, self.alpha,
                                             self._start, self._end, 0)
            return ids, scores, steps

        beam.__name__ = f"beam_search_{beam_size}"
        return beam

    # ---- graph helpers ----
    def _encode(self, inputs):
        """Strings [B] -> (src_ids int32 [B, S]: [START] pieces [END] capped at max_source_length with [END]
        kept, has_words bool [B]: False for empty / whitespace-only / punctuation-free-of-tokens inputs)."""
        ids = self.preprocessor.source_ids(inputs)
        dense = ids.to_tensor(default_value=0)
        # Every sentence has [START] and [END], so width >= 2, except in an empty batch ([0, 0]): pad that
        # one to [0, 2] so the model's reshapes stay well-defined.
        dense = tf.pad(dense, [[0, 0], [0, tf.maximum(0, 2 - tf.shape(dense)[1])]])
        return tf.cast(dense, tf.int32), ids.row_lengths() > 2

    def _buffer(self, src_ids, max_length):
        """int32 (T + 1,) zeros; T = min(max_length or ceil(ratio * S + offset), max_decode_length)."""
        rule = tf.maximum(1, _ceil_div_rule(tf.shape(src_ids)[1], self.ratio, self.offset))
        cap = tf.where(max_length > 0, max_length, rule)
        cap = tf.minimum(cap, self.max_decode_length)
        return tf.zeros(tf.reshape(cap + 1, [1]), tf.int32)

    def _detokenize(self, ids, has_words):
        text = self.preprocessor.detokenize_target(ids)
        return tf.where(has_words, text, tf.constant("", tf.string))

    def _greedy(self, inputs):
        src_ids, has_words = self._encode(inputs)
        ids, steps = self._greedy_core(src_ids, self._buffer(src_ids, tf.constant(0)))
        return src_ids, ids[:, :steps + 1], has_words

    def _check_options(self, beam_size, max_length):
        checks = [
            tf.debugging.assert_greater_equal(beam_size, 0, message="beam_size must be >= 0 (0 = greedy)"),
            tf.debugging.assert_less_equal(beam_size, self.max_beam_size,
                                           message=f"beam_size must be <= {self.max_beam_size}"),
            tf.debugging.assert_greater_equal(max_length, 0,
                                              message="max_length must be >= 0 (0 = the length rule)"),
            tf.debugging.assert_less_equal(max_length, self.max_decode_length,
                                           message=f"max_length must be <= {self.max_decode_length}"),
        ]
        return checks

    # ---- signatures ----
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def serving_default(self, inputs):
        """Greedy translation: ``inputs string [B]`` -> ``{"translation": string [B]}``."""
        _, ids, has_words = self._greedy(inputs)
        return {"translation": self._detokenize(ids, has_words)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs"),
                                  tf.TensorSpec([], tf.int32, name="beam_size"),
                                  tf.TensorSpec([], tf.int32, name="max_length")])
    def translate(self, inputs, beam_size, max_length):
        """Beam search (``beam_size`` 0 or 1: greedy) with an optional cap ``max_length`` (0: length rule)
        -> ``{"translation": string [B], "score": float32 [B]}`` (score = log P / GNMT length penalty)."""
        with tf.control_dependencies(self._check_options(beam_size, max_length)):
            src_ids, has_words = self._encode(inputs)
        buffer = self._buffer(src_ids, max_length)
        index = tf.clip_by_value(beam_size, 1, self.max_beam_size) - 1

        def branch(core):
            def run():
                ids, scores, steps = core(src_ids, buffer)
                ids = ids[:, :steps + 1]
                # One fixed static rank for every branch.
                return tf.ensure_shape(ids, [None, None]), tf.ensure_shape(scores, [None])
            return run

        ids, scores = tf.switch_case(index, [branch(core) for core in self._beam_cores])
        return {"translation": self._detokenize(ids, has_words),
                "score": tf.where(has_words, scores, tf.zeros_like(scores))}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def translate_with_attention(self, inputs):
        """Greedy translation plus the last decoder layer's cross-attention for plotting.

        ``tokens [B, T]``: generated target wordpieces (row t: the token produced at step t, [END] included,
        "" after it); ``source_tokens [B, S]``: source wordpieces ([START]/[END] included, "" for padding);
        ``attention [B, heads, T, S]``: ``attention[b, h, t, s]`` = weight of source token s when producing
        token t (teacher-forced pass over the greedy output), 0 for padding rows/columns.
        """
        src_ids, ids, has_words = self._greedy(inputs)
        # Every sentence generates >= 1 token, so ids has >= 2 columns, except in an empty batch (no step
        # runs): pad that one so the teacher-forced pass gets a non-empty target.
        ids = tf.pad(ids, [[0, 0], [0, tf.maximum(0, 2 - tf.shape(ids)[1])]])
        dec_in, generated = ids[:, :-1], ids[:, 1:]
        _, weights = self.model((src_ids, dec_in), training=False)
        attention = tf.cast(weights[f"decoder_layer{self.model.config.num_layers}_block2"], tf.float32)
        valid_t = tf.cast(generated != 0, tf.float32) * tf.cast(has_words, tf.float32)[:, tf.newaxis]
        valid_s = tf.cast(src_ids != 0, tf.float32)
        attention = attention * valid_t[:, tf.newaxis, :, tf.newaxis] * valid_s[:, tf.newaxis, tf.newaxis, :]
        empty = tf.constant("", tf.string)
        # to_tensor with an explicit shape: an empty batch would otherwise give [0, 0].
        tokens = self.preprocessor.tgt_tokenizer.lookup(tf.cast(generated, tf.int64)).to_tensor(
            default_value="", shape=tf.shape(generated, out_type=tf.int64))
        tokens = tf.where(valid_t > 0, tokens, empty)
        source_tokens = self.preprocessor.src_tokenizer.lookup(tf.cast(src_ids, tf.int64)).to_tensor(
            default_value="", shape=tf.shape(src_ids, out_type=tf.int64))
        source_tokens = tf.where(src_ids != 0, source_tokens, empty)
        return {"translation": self._detokenize(ids, has_words), "tokens": tokens, "source_tokens": source_tokens,
                "attention": attention,
                "target_length": tf.reduce_sum(tf.cast(valid_t, tf.int32), axis=1),
                "source_length": tf.reduce_sum(tf.cast(valid_s, tf.int32), axis=1)}

    def signatures(self):
        return {"serving_default": self.serving_default, "translate": self.translate,
                "translate_with_attention": self.translate_with_attention}


def _metadata(translator, module):
    """The translator's own metadata fields (save_version adds the common ones)."""
    model_config = translator.model.config
    config = translator.config or {}
    return {
        "preset": config.get("preset", translator.model.name),
        "model": {k: getattr(model_config, k) for k in model_config.__dataclass_fields__},
        "source_vocab_size": translator.src_tokenizer.vocab_size,
        "target_vocab_size": translator.tgt_tokenizer.vocab_size,
        "training_step": translator.step,
        "decoding": {
            "default": "greedy", "beam_sizes": [1, module.max_beam_size], "length_penalty_alpha": module.alpha,
            "max_length_ratio": module.ratio, "max_length_offset": module.offset,
            "max_source_length": module.max_source_length, "max_decode_length": module.max_decode_length,
            "options_zero_means_default": True, "jit_compile": module.jit_compile,
        },
    }


def export_translator(translator, model_base_path, version=None, overwrite=False, jit_compile=False,
                      max_source_length=None, max_decode_length=None, max_beam_size=MAX_BEAM_SIZE):
    """Writes ``model_base_path/<version>/`` (SavedModel + ``assets.extra/kerasplm.json``) atomically.

    Args:
      translator: a :class:`kerasplm.jobs.translation.Translator`.
      model_base_path, version, overwrite: as :func:`kerasplm.export.base.save_version` (next free version by
        default; an existing one is refused unless ``overwrite=True``).
      jit_compile: XLA-compile the decoding loop (TF Serving then needs ``--xla_cpu_compilation_enabled``
        on CPU; see export/README.md). Tokenization always stays outside XLA.
      max_source_length: source tokens kept ([START]/[END] included; longer inputs are cut, [END] kept);
        default the model's ``pe_input``.
      max_decode_length: cap on generated tokens; default the model's ``pe_target``.
      max_beam_size: largest beam size the ``translate`` signature accepts (one traced branch each).
    Returns the version directory's path (str).
    """
    module = TranslatorModule(translator, max_source_length=max_source_length, max_decode_length=max_decode_length,
                              max_beam_size=max_beam_size, jit_compile=jit_compile)
    return save_version(module, model_base_path, version=version, overwrite=overwrite,
                        metadata=_metadata(translator, module))


def export_translator_run(run, to, version=None, overwrite=False, max_beam_size=MAX_BEAM_SIZE, jit_compile=False):
    """``kerasplm export translator``: export the translator run directory ``run``; prints the version path."""
    translator = load_run(run, family=FAMILY, what="a translator run (kerasplm train translator)")
    path = export_translator(translator, to, version=version, overwrite=overwrite, jit_compile=jit_compile,
                             max_beam_size=max_beam_size)
    print(path)
    return path


def load_and_translate(path, sentences, signature="serving_default", **options):
    """Translates ``sentences`` (list of str) with the SavedModel at ``path`` via ``tf.saved_model.load``.

    ``options`` (``beam_size``, ``max_length``) go to signatures that take them (``translate``; 0 = default).
    Returns a list of str.
    """
    loaded = tf.saved_model.load(os.fspath(path))
    fn = loaded.signatures[signature]
    kwargs = {"inputs": tf.constant(list(sentences), tf.string, shape=[len(sentences)])}
    accepted = fn.structured_input_signature[1]
    for name in ("beam_size", "max_length"):
        if name in accepted:
            kwargs[name] = tf.constant(int(options.pop(name, 0) or 0), tf.int32)
    if options:
        raise TypeError(f"signature {signature!r} takes no options {sorted(options)}")
    return [s.decode("utf-8") for s in fn(**kwargs)["translation"].numpy()]
