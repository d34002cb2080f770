"""Export a :class:`kerasplm.tasks.translation.Translator` as a TF Serving SavedModel (strings in, strings out).

The SavedModel is a :class:`TranslatorModule` (a ``tf.Module``) holding the Keras model, both WordPiece
tokenizers (vocabularies as ``tf.saved_model.Asset``) and the decoding functions. Signatures (every
``inputs`` is ``tf.string [None]``, one sentence per row):

``serving_default``           inputs -> translation string [batch]                 (greedy)
``translate``                 inputs, beam_size int32 [], max_length int32 [] -> translation, score float32
                              (0 = default for both options: greedy / the length rule)
``translate_with_attention``  inputs -> translation, tokens string [batch, T], source_tokens string
                              [batch, S], attention float32 [batch, heads, T, S], target_length int32,
                              source_length int32
``metadata``                  (no inputs) -> metadata string [] (the JSON of assets.extra/kerasplm.json)

Tokenize/detokenize (tensorflow-text ops) run in the plain signature functions; the decoding loop is
an inner ``tf.function`` that is XLA-compiled only with ``jit_compile=True``. See export/README.md.
"""
import datetime
import json
import os
import shutil

import tensorflow as tf

from kerasplm.export import atomic

FAMILY = "transformer_translator"
METADATA_FILE = "kerasplm.json"
MAX_BEAM_SIZE = 8
DEFAULT_ALPHA = 0.6


def _ceil_div_rule(width, ratio, offset):
    """ceil(ratio * width + offset) as int32 (the generation module's rule for the buffer size)."""
    return tf.cast(tf.math.ceil(ratio * tf.cast(width, tf.float32) + offset), tf.int32)


def _tf_variable(variable):
    """The ``tf.Variable`` behind a Keras 3 variable (or the variable itself)."""
    if isinstance(variable, tf.Variable):
        return variable
    value = getattr(variable, "_value", None)
    if isinstance(value, tf.Variable):
        return value
    raise TypeError(f"cannot export variable {variable!r}: no tf.Variable behind it")


class TranslatorModule(tf.Module):
    """The exported translator: model + tokenizers + decoding, all graph functions.

    Decoding is the cached search of :mod:`kerasplm.generation` (same length rule, stopping and beam
    scoring as ``Translator.translate``), driven with a buffer size computed in graph from the padded
    source width, so one trace serves every batch shape.
    """

    def __init__(self, translator, max_source_length=None, max_decode_length=None, alpha=DEFAULT_ALPHA,
                 max_beam_size=MAX_BEAM_SIZE, jit_compile=False, metadata=None):
        super().__init__(name="translator")
        from kerasplm.generation.seq2seq import DEFAULT_OFFSET, DEFAULT_RATIO

        # The Keras model is NOT tracked as a child: a Keras 3 variable exports as a *copy* ("Variable_N") that
        # the checkpoint restores, while the traced functions read the tf.Variable inside it. TF2's loader
        # copes, but TF1-style loaders (TF Serving, saved_model_cli run) then leave those tf.Variables
        # uninitialized ("Could not find variable ..."). So track the underlying tf.Variables directly, as
        # keras.export.ExportArchive does, and keep the model as an untracked attribute.
        self.__dict__["model"] = translator.model
        self.model_variables = [_tf_variable(v) for v in translator.model.variables]
        self.src_tokenizer = translator.src_tokenizer
        self.tgt_tokenizer = translator.tgt_tokenizer
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
        self._start, self._end = self.tgt_tokenizer.start_id, self.tgt_tokenizer.end_id
        self._src_end = self.src_tokenizer.end_id
        self._metadata_json = json.dumps(metadata or {}, ensure_ascii=False, sort_keys=True)
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
        """Strings [B] -> (src_ids int32 [B, S] capped at max_source_length with [END] kept,
        has_words bool [B]: False for empty / whitespace-only / punctuation-free-of-tokens inputs)."""
        ids = self.src_tokenizer.tokenize(inputs)                   # ragged int64, [START] ... [END]
        lengths = ids.row_lengths()
        limit = self.max_source_length
        dense = ids[:, :limit].to_tensor(default_value=0)
        # Every sentence has [START] and [END], so width >= 2, except in an empty batch ([0, 0]): pad that
        # one to [0, 2] so the model's reshapes stay well-defined.
        dense = tf.pad(dense, [[0, 0], [0, tf.maximum(0, 2 - tf.shape(dense)[1])]])
        width = tf.shape(dense)[1]
        cut = (lengths > limit)[:, tf.newaxis] & (tf.range(width)[tf.newaxis, :] == limit - 1)
        dense = tf.where(cut, tf.constant(self._src_end, tf.int64), dense)
        return tf.cast(dense, tf.int32), lengths > 2

    def _buffer(self, src_ids, max_length):
        """int32 (T + 1,) zeros; T = min(max_length or ceil(ratio * S + offset), max_decode_length)."""
        rule = tf.maximum(1, _ceil_div_rule(tf.shape(src_ids)[1], self.ratio, self.offset))
        cap = tf.where(max_length > 0, max_length, rule)
        cap = tf.minimum(cap, self.max_decode_length)
        return tf.zeros(tf.reshape(cap + 1, [1]), tf.int32)

    def _detokenize(self, ids, has_words):
        text = self.tgt_tokenizer.detokenize(tf.cast(ids, tf.int64))
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
        tokens = self.tgt_tokenizer.lookup(tf.cast(generated, tf.int64)).to_tensor(
            default_value="", shape=tf.shape(generated, out_type=tf.int64))
        tokens = tf.where(valid_t > 0, tokens, empty)
        source_tokens = self.src_tokenizer.lookup(tf.cast(src_ids, tf.int64)).to_tensor(
            default_value="", shape=tf.shape(src_ids, out_type=tf.int64))
        source_tokens = tf.where(src_ids != 0, source_tokens, empty)
        return {"translation": self._detokenize(ids, has_words), "tokens": tokens, "source_tokens": source_tokens,
                "attention": attention,
                "target_length": tf.reduce_sum(tf.cast(valid_t, tf.int32), axis=1),
                "source_length": tf.reduce_sum(tf.cast(valid_s, tf.int32), axis=1)}

    @tf.function(input_signature=[])
    def metadata(self):
        """``{"metadata": string []}``: the export metadata as JSON (same as assets.extra/kerasplm.json)."""
        return {"metadata": tf.constant(self._metadata_json)}

    def signatures(self):
        return {"serving_default": self.serving_default, "translate": self.translate,
                "translate_with_attention": self.translate_with_attention, "metadata": self.metadata}


def _metadata(translator, module, version, jit_compile):
    import tensorflow_text

    import kerasplm

    model_config = translator.model.config
    config = translator.config or {}
    return {
        "family": config.get("family", FAMILY),
        "preset": config.get("preset", translator.model.name),
        "model": {k: getattr(model_config, k) for k in model_config.__dataclass_fields__},
        "source_vocab_size": translator.src_tokenizer.vocab_size,
        "target_vocab_size": translator.tgt_tokenizer.vocab_size,
        "training_step": translator.step,
        "version": version,
        "kerasplm_version": kerasplm.__version__,
        "tensorflow_version": tf.__version__,
        "tensorflow_text_version": tensorflow_text.__version__,
        "export_time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "decoding": {
            "default": "greedy", "beam_sizes": [1, module.max_beam_size], "length_penalty_alpha": module.alpha,
            "max_length_ratio": module.ratio, "max_length_offset": module.offset,
            "max_source_length": module.max_source_length, "max_decode_length": module.max_decode_length,
            "options_zero_means_default": True, "jit_compile": bool(jit_compile),
        },
        "signatures": ["serving_default", "translate", "translate_with_attention", "metadata"],
    }


def export_translator(translator, model_base_path, version=None, overwrite=False, jit_compile=False,
                      max_source_length=None, max_decode_length=None, max_beam_size=MAX_BEAM_SIZE):
    """Writes ``model_base_path/<version>/`` (SavedModel + ``assets.extra/kerasplm.json``) atomically.

    Args:
      translator: a :class:`kerasplm.tasks.translation.Translator`.
      model_base_path: TF Serving's model base path (created if missing).
      version: positive int; default the next free one (1 + the largest, 1 if none).
      overwrite: replace an existing ``version`` (atomically swapped in); else ``FileExistsError``.
      jit_compile: XLA-compile the decoding loop (TF Serving then needs ``--xla_cpu_compilation_enabled``
        on CPU; see export/README.md). Tokenization always stays outside XLA.
      max_source_length: source tokens kept ([START]/[END] included; longer inputs are cut, [END] kept);
        default the model's ``pe_input``.
      max_decode_length: cap on generated tokens; default the model's ``pe_target``.
    Returns the version directory's path (str).
    """
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise ValueError(f"version must be a positive integer, got {version!r}")
    base = os.path.abspath(os.fspath(model_base_path))
    if os.path.exists(base) and not os.path.isdir(base):
        raise NotADirectoryError(f"model base path {base} is not a directory")
    os.makedirs(base, exist_ok=True)
    atomic.clean_stale_tmp_dirs(base)
    auto = version is None
    version = atomic.next_version(base) if auto else version
    final = os.path.join(base, str(version))
    if os.path.exists(final) and not overwrite:
        raise FileExistsError(f"{final}: version {version} exists; pass overwrite=True / --overwrite")

    module = TranslatorModule(translator, max_source_length=max_source_length, max_decode_length=max_decode_length,
                              max_beam_size=max_beam_size, jit_compile=jit_compile)
    metadata = _metadata(translator, module, version, jit_compile)
    module._metadata_json = json.dumps(metadata, ensure_ascii=False, sort_keys=True)

    tmp = atomic.make_tmp_dir(base, version)
    try:
        tf.saved_model.save(module, tmp, signatures=module.signatures(),
                            options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
        extra = os.path.join(tmp, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        with open(os.path.join(extra, METADATA_FILE), "w", encoding="utf-8") as f:
            json.dump(metadata, f, indent=2, ensure_ascii=False, sort_keys=True)
        atomic.fsync_tree(tmp)
        return atomic.publish(tmp, base, version, overwrite=overwrite, auto_version=auto)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def read_metadata(path):
    """The ``assets.extra/kerasplm.json`` of a version directory, as a dict."""
    with open(os.path.join(path, "assets.extra", METADATA_FILE), encoding="utf-8") as f:
        return json.load(f)


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
