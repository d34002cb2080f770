"""Export a :class:`kerasplm.models.translator.job.Translator` as a TF Serving SavedModel (strings in, strings out): the
Transformer or the RNN encoder-decoder (:class:`kerasplm.models.RNNSeq2Seq`), the same signatures.

The SavedModel is a :class:`TranslatorModule` (an :class:`kerasplm.export.base.ExportModule`) holding the Keras
model, the preprocessor with both WordPiece tokenizers (vocabularies as ``tf.saved_model.Asset``) and the
decoding functions. Signatures (every
``inputs`` is ``tf.string [None]``, one sentence per row):

``serving_default``           inputs -> translation string [batch]                 (greedy)
``translate``                 inputs, beam_size int32 [batch], max_length int32 [batch] -> translation, score
                              float32 (one value of each option per sentence, so that the signature is
                              batch-safe; 0 = default for both: greedy / the length rule)
``translate_with_attention``  inputs -> translation, tokens string [batch, T], source_tokens string
                              [batch, S], attention float32 [batch, heads, T, S], target_length int32,
                              source_length int32 (the RNN's: heads = 1, its Bahdanau weights; an RNN
                              without attention has no such signature)
``metadata``                  (no inputs) -> metadata string [] (the JSON of assets.extra/kerasplm.json;
                              added by :func:`kerasplm.export.base.save_version`)

Variable tracking, metadata and the atomic versioned save are :mod:`kerasplm.export.base`'s; decoding (source ids,
search, detokenization, attention weights) is :class:`kerasplm.generation.Seq2SeqDecoder`'s, the client
``Translator.translate`` runs in process; this module holds only the translator's signatures. [START]/[END] and
the source cut are the :class:`kerasplm.text.TranslatorPreprocessor`'s, the same as in training.
Tokenize/detokenize (tensorflow-text ops) run in the plain signature functions; the decoding loop is
an inner ``tf.function`` that is XLA-compiled only with ``jit_compile=True``. See export/README.md.
"""
import os

import keras
import tensorflow as tf

from kerasplm.export import warmup
from kerasplm.export.base import ExportModule, save_version
from kerasplm.generation.options import DEFAULT_ALPHA, map_option_groups
from kerasplm.generation.seq2seq import Seq2SeqDecoder
from kerasplm.runs import load_run
from kerasplm.text.preprocessing import TranslatorPreprocessor

FAMILY = "transformer_translator"
FAMILIES = (FAMILY, "rnn_translator")
MAX_BEAM_SIZE = 8


class TranslatorModule(ExportModule):
    """The exported translator: model + preprocessor (both tokenizers) + decoding, all graph functions.

    Decoding is :class:`kerasplm.generation.Seq2SeqDecoder`, the client ``Translator.translate`` uses (same
    compiled search, length rule, stopping and beam scoring), driven with a buffer size computed in graph from
    the padded source width, so one trace serves every batch shape.
    """

    family = FAMILY

    def __init__(self, translator, max_source_length=None, max_decode_length=None, alpha=DEFAULT_ALPHA,
                 max_beam_size=MAX_BEAM_SIZE, jit_compile=False):
        model, preprocessor, run_info = _translator_parts(translator)
        super().__init__(model, family=run_info.config.get("family", FAMILY) if run_info else FAMILY,
                         name="translator")
        limit = self.model.max_source_length
        self.max_source_length = int(max_source_length or limit)
        if not 3 <= self.max_source_length <= limit:
            raise ValueError(f"max_source_length must be in [3, {limit}] (the model's max_source_length), "
                             f"got {self.max_source_length}")
        self.preprocessor = TranslatorPreprocessor(preprocessor.src_tokenizer, preprocessor.tgt_tokenizer,
                                                   max_source_length=self.max_source_length)
        # Not tracked (like the model): a plain object holding the model; the signatures trace its functions.
        self.__dict__["decoder"] = Seq2SeqDecoder(self.model, self.preprocessor, max_decode_length=max_decode_length,
                                                  alpha=alpha, jit_compile=jit_compile)
        decoder = self.decoder
        self.max_decode_length = decoder.max_decode_length
        self.ratio, self.offset, self.alpha = decoder.max_length_ratio, decoder.max_length_offset, decoder.alpha
        self.max_beam_size = int(min(max_beam_size, self.model.vocab_size // 2))
        if self.max_beam_size < 1:
            raise ValueError(f"target vocabulary of {self.model.vocab_size} tokens is too small for beam search")
        self.jit_compile = decoder.jit_compile
        if not getattr(self.model, "has_attention", True):
            # An RNN without attention has no weights to show; the SavedModel would also trace this method (every
            # tf.function of the module is saved), so it is hidden on the instance.
            self.translate_with_attention = None

    # ---- graph helpers ----
    def _greedy(self, inputs):
        src_ids, has_words = self.decoder.encode(inputs)
        ids, _ = self.decoder.search(src_ids, self.decoder.decode_buffer(src_ids, tf.constant(0)))
        return src_ids, ids, has_words

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
        return {"translation": self.decoder.detokenize(ids, has_words)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs"),
                                  tf.TensorSpec([None], tf.int32, name="beam_size"),
                                  tf.TensorSpec([None], tf.int32, name="max_length")])
    def translate(self, inputs, beam_size, max_length):
        """Beam search (``beam_size`` 0 or 1: one beam, the greedy tokens) with an optional cap ``max_length``
        (0: length rule), one value of each per sentence (batch-safe) -> ``{"translation": string [B], "score":
        float32 [B]}`` (score = log P / GNMT length penalty). Sentences of equal options are decoded together
        (:func:`kerasplm.generation.options.map_option_groups`)."""
        rows = tf.shape(inputs)[0]
        checks = [tf.debugging.assert_equal(tf.stack([tf.size(beam_size), tf.size(max_length)]), rows,
                                            message="beam_size and max_length need one value per sentence "
                                                    "(a [batch] vector)"),
                  *self._check_options(beam_size, max_length)]
        with tf.control_dependencies(checks):
            inputs = tf.identity(inputs)

        def translate_group(rows_of_group, options):
            (texts,), (group_beam_size, group_max_length) = rows_of_group, options
            src_ids, has_words = self.decoder.encode(texts)
            buffer = self.decoder.decode_buffer(src_ids, group_max_length)
            ids, scores = self.decoder.search(src_ids, buffer, beam_size=group_beam_size,
                                              max_beam_size=self.max_beam_size)
            return {"translation": self.decoder.detokenize(ids, has_words),
                    "score": tf.where(has_words, scores, tf.zeros_like(scores))}

        return map_option_groups(translate_group, [inputs], [beam_size, max_length],
                                 {"translation": tf.string, "score": tf.float32})

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def translate_with_attention(self, inputs):
        """Greedy translation plus the last decoder layer's cross-attention for plotting.

        ``tokens [B, T]``: generated target wordpieces (row t: the token produced at step t, [END] included,
        "" after it); ``source_tokens [B, S]``: source wordpieces ([START]/[END] included, "" for padding);
        ``attention [B, heads, T, S]``: ``attention[b, h, t, s]`` = weight of source token s when producing
        token t (teacher-forced pass over the greedy output), 0 for padding rows/columns
        (``Seq2SeqDecoder.attention``).
        """
        src_ids, ids, has_words = self._greedy(inputs)
        return {"translation": self.decoder.detokenize(ids, has_words),
                **self.decoder.attention(src_ids, ids, has_words)}

    def warmup_requests(self):
        """Every signature (:func:`kerasplm.export.warmup.default_requests`). The first ``translate`` call builds
        every beam-size branch of the graph at once (``transformer_seed``: 15.6 s for the first call at beam 4, then
        0.08 s; benchmarks/RESULTS.md, ``bench_warmup.py``), so one call warms them all; with ``jit_compile`` each size is XLA-compiled when it
        first runs, so ``translate`` is then also replayed once per beam size 2..``max_beam_size``."""
        requests = super().warmup_requests()
        if self.jit_compile:
            sentence = [warmup.WARMUP_SENTENCES[1]]
            requests += [warmup.WarmupRequest("translate", {"inputs": sentence, "beam_size": [k], "max_length": [0]})
                         for k in range(2, self.max_beam_size + 1)]
        return requests

    def signatures(self):
        """Every signature; ``translate_with_attention`` only for a model with attention (not the RNN encoder-decoder
        without it, ``has_attention`` False)."""
        signatures = {"serving_default": self.serving_default, "translate": self.translate}
        if self.translate_with_attention is not None:
            signatures["translate_with_attention"] = self.translate_with_attention
        return signatures


def _translator_parts(translator):
    """``(model, preprocessor, run_info or None)`` of a ``Translator`` (model + preprocessor) or of a translator
    model with its preprocessor attached (what :func:`kerasplm.runs.load_run` returns)."""
    model = translator if isinstance(translator, keras.Model) else translator.model
    preprocessor = getattr(translator, "preprocessor", None) or getattr(model, "preprocessor", None)
    if preprocessor is None:
        raise ValueError("the translator model has no preprocessor (load it with kerasplm.runs.load_run)")
    return model, preprocessor, getattr(model, "run_info", None)


def _metadata(translator, module):
    """The translator's own metadata fields (save_version adds the common ones)."""
    model, preprocessor, run_info = _translator_parts(translator)
    model_config = model.config
    config = run_info.config if run_info else {}
    return {
        "preset": config.get("preset", model.name),
        "model": {k: getattr(model_config, k) for k in model_config.__dataclass_fields__},
        "source_vocab_size": preprocessor.src_tokenizer.vocab_size,
        "target_vocab_size": preprocessor.tgt_tokenizer.vocab_size,
        "training_step": run_info.step if run_info else None,
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
      translator: a :class:`kerasplm.models.translator.job.Translator`, or the model ``kerasplm.runs.load_run`` gives.
      model_base_path, version, overwrite: as :func:`kerasplm.export.base.save_version` (next free version by
        default; an existing one is refused unless ``overwrite=True``).
      jit_compile: XLA-compile the decoding loop (TF Serving then needs ``--xla_cpu_compilation_enabled``
        on CPU; see export/README.md). Tokenization always stays outside XLA.
      max_source_length: source tokens kept ([START]/[END] included; longer inputs are cut, [END] kept);
        default the model's ``max_source_length`` (``pe_input``).
      max_decode_length: cap on generated tokens; default the model's ``max_target_length`` (``pe_target``).
      max_beam_size: largest beam size the ``translate`` signature accepts (one traced branch each).
    Returns the version directory's path (str).
    """
    module = TranslatorModule(translator, max_source_length=max_source_length, max_decode_length=max_decode_length,
                              max_beam_size=max_beam_size, jit_compile=jit_compile)
    return save_version(module, model_base_path, version=version, overwrite=overwrite,
                        metadata=_metadata(translator, module))


def export_translator_run(run, to, version=None, overwrite=False, max_beam_size=MAX_BEAM_SIZE, jit_compile=False):
    """``kerasplm export translator``: export the translator run directory ``run``; prints the version path."""
    translator = load_run(run, family=FAMILIES, what="a translator run (kerasplm train translator)")
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
            kwargs[name] = tf.fill([len(sentences)], tf.constant(int(options.pop(name, 0) or 0), tf.int32))
    if options:
        raise TypeError(f"signature {signature!r} takes no options {sorted(options)}")
    return [s.decode("utf-8") for s in fn(**kwargs)["translation"].numpy()]
