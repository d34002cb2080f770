"""Export a GPT :class:`kerasplm.models.gpt.generator.TextGenerator` (or the model :func:`kerasplm.runs.load_run`
gives for a GPT run) as a TF Serving SavedModel.

The SavedModel is a :class:`GeneratorModule` (an :class:`kerasplm.export.base.ExportModule`): the Keras model,
the tokenizer (SentencePiece or GPT-2 BPE, a ``tf.Module`` whose files are assets) and these signatures
(``prompt``/``text`` are ``tf.string [None]``, one row each):

``serving_default``  prompt -> text string [B]: greedy continuation of ``max_new_tokens`` (the export's default)
                     tokens, the prompt not repeated, stopped at <|endoftext|>
``generate``         prompt, max_new_tokens int32 [B], temperature float32 [B], top_k int32 [B], top_p float32 [B],
                     seed int32 [B] -> text string [B]: one value of each option per prompt, so the signature is
                     batch-safe (TF Serving's batching concatenates requests along the 0th dimension of every
                     input). 0 means "the default" for every option: max_new_tokens 0 = the export's default (at
                     most its cap), temperature 0 = greedy, top_k 0 / top_p 0 (or 1) = no filter. Sampling is
                     seeded per row: a prompt's text depends on its own options and seed only, not on the other
                     rows of the batch, and equals ``TextGenerator.generate([prompt], seed=seed, ...)``.
``score``            text -> log_likelihood float32 [B] (nats, log P(text | <|endoftext|>)), num_tokens int32 [B],
                     perplexity float32 [B] (exp(-log P / num_tokens); 1 for text without tokens)
``metadata``         (no inputs) -> the export's JSON metadata (added by save_version)

TF Serving signatures have no optional inputs, hence two generation signatures: ``serving_default`` for the
plain call, ``generate`` with every option (REST's row format: each instance an object with every option).

Decoding is the engine of :mod:`kerasplm.generation`, the code ``TextGenerator.generate`` runs in process:
``causal_lm_search`` (one prefill, key/value cache) with its greedy path (the screened one,
:class:`kerasplm.generation.screened_argmax.ScreenedArgmax`, where the engine uses it: XLA-compiled, two or more
rows, a float32 tied output table) and its sampler, :func:`kerasplm.generation.sampling.make_sampler`, which
takes a group's options as scalar tensors and the rows' seeds (a request's rules, checked by
:func:`kerasplm.generation.options.request_checks`: 0 = off, temperature 0 = the greedy path), so a request
decodes the tokens ``TextGenerator.generate`` does for the same options and seed. Prompts are cut to their last
``max_prompt_tokens`` tokens and padded to the smallest of a few static widths (one traced decoding branch
each), because the cache size must be static. An empty prompt is <|endoftext|> alone (unconditional text).

XLA: with ``jit_compile=True`` the decoding loops are XLA-compiled (like ``TextGenerator.generate``'s; TF Serving
then needs ``--xla_cpu_compilation_enabled``, see export/README.md), and greedy decoding is screened as in
process; each new batch size (and ``top_k`` value) compiles once. The default is not to (``jit_compile=False``):
full float32 logits, as ``TextGenerator.generate(..., jit_compile=False)``.
"""
import os

import tensorflow as tf

from kerasplm.export import warmup
from kerasplm.export.base import ExportModule, save_version
from kerasplm.generation.engine import causal_lm_search
from kerasplm.generation.options import map_option_groups, request_checks
from kerasplm.generation.sampling import row_seeds
from kerasplm.models.gpt.generator import (TextGenerator, load_text_generator, perplexity, score_token_ids,
                                           trim_generated)

FAMILY = "gpt"
DEFAULT_MAX_NEW_TOKENS = 32  # the export's serving_default length and generate's largest (its decoding buffer)


class GeneratorModule(ExportModule):
    """The exported GPT: model + tokenizer + decoding and scoring, all graph functions (see the module docstring).

    Args:
      generator: a :class:`kerasplm.models.gpt.generator.TextGenerator`, or a GPT model with its tokenizer attached
        (``kerasplm.runs.load_run`` of a GPT run).
      max_new_tokens: ``serving_default``'s length and the largest ``generate`` accepts (the decoding buffer).
      max_prompt_tokens: prompts keep their last this many tokens (default: the rest of the model's context).
      prompt_widths: the static prompt widths traced (each <= max_prompt_tokens; the largest is added).
      jit_compile: XLA-compile the decoding loops (see the module docstring).
    """

    family = FAMILY

    def __init__(self, generator, max_new_tokens=DEFAULT_MAX_NEW_TOKENS, max_prompt_tokens=None,
                 prompt_widths=(16, 64, 256), jit_compile=False):
        generator = as_text_generator(generator)
        super().__init__(generator.model, family=(generator.config or {}).get("family", FAMILY), name="generator")
        positions = generator.max_positions
        if not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens < positions:
            raise ValueError(f"max_new_tokens must be in [1, {positions - 1}], got {max_new_tokens!r}")
        limit = positions - max_new_tokens + 1
        self.max_prompt_tokens = int(max_prompt_tokens or limit)
        if not 1 <= self.max_prompt_tokens <= limit:
            raise ValueError(f"max_prompt_tokens must be in [1, {limit}] (max_positions {positions} - "
                             f"max_new_tokens {max_new_tokens} + 1), got {max_prompt_tokens}")
        self.max_new_tokens = max_new_tokens
        self.prompt_widths = sorted({w for w in prompt_widths if w < self.max_prompt_tokens} | {self.max_prompt_tokens})
        self.tokenizer = generator.tokenizer
        self.end_of_text_id = generator.end_of_text_id
        self.pad_id = generator.pad_id
        self.stop_ids = () if self.end_of_text_id is None else (self.end_of_text_id,)
        self.max_positions = positions
        self.jit_compile = bool(jit_compile)
        # The decoding loops (token ids in and out), XLA-compiled with jit_compile; not tracked (plain callables
        # of the model): the signatures trace them, once per prompt width.
        compiled = (lambda fn: tf.function(fn, jit_compile=True)) if self.jit_compile else (lambda fn: fn)
        self.__dict__["_greedy_search"] = compiled(self._greedy_impl)
        self.__dict__["_request_search"] = compiled(self._request_impl)

    # ---- decoding loops: the engine's causal_lm_search ----
    def _search(self, prompt_ids, prompt_lengths, max_lengths, **options):
        """Generated tokens int32 ``(B, max_new_tokens)`` (then ``pad_id``)."""
        # The screen needs XLA, as in TextGenerator.generate (engine.make_generate_fn).
        ids, _, _ = causal_lm_search(self.model, prompt_ids, prompt_lengths, self.max_new_tokens,
                                     max_lengths=max_lengths, end_id=self.stop_ids, pad_id=self.pad_id,
                                     screened_greedy=self.jit_compile, **options)
        return ids[:, 1:]

    def _greedy_impl(self, prompt_ids, prompt_lengths, max_lengths):
        return self._search(prompt_ids, prompt_lengths, max_lengths, strategy="greedy")

    def _request_impl(self, prompt_ids, prompt_lengths, max_lengths, temperature, top_k, top_p, seed):
        """A request's options as scalar tensors (0 = off; temperature 0 = the greedy path); ``seed`` one pair per
        row (:func:`kerasplm.generation.sampling.row_seeds`)."""
        return self._search(prompt_ids, prompt_lengths, max_lengths, strategy="sample", temperature=temperature,
                            top_k=top_k, top_p=top_p, seed=seed)

    # ---- graph helpers ----
    def _prompt_ids(self, prompt):
        """Ragged int64 prompt ids: the last ``max_prompt_tokens`` tokens; <|endoftext|> for an empty prompt."""
        ids = self.tokenizer.tokenize(prompt)
        lengths = ids.row_lengths()
        start = tf.maximum(lengths - self.max_prompt_tokens, 0)
        ids = tf.ragged.boolean_mask(ids, tf.ragged.range(lengths) >= start[:, tf.newaxis])
        first = self.end_of_text_id if self.end_of_text_id is not None else self.pad_id
        column = tf.fill(tf.stack([tf.shape(prompt, out_type=tf.int64)[0], 1]), tf.constant(first, tf.int64))
        empty = tf.cast(tf.equal(ids.row_lengths(), 0), tf.int64)
        return tf.concat([tf.RaggedTensor.from_tensor(column, lengths=empty), ids], axis=1)

    def _decode(self, prompt, max_new_tokens, request=None):
        """Text of the continuations: prompts padded to the smallest traced width that holds them;
        ``max_new_tokens`` a scalar or one per row; greedy, or ``request = (temperature, top_k, top_p, seeds)``:
        scalar tensors and per-row seeds ``(B, 2)``."""
        ids = self._prompt_ids(prompt)
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        longest = tf.reduce_max(tf.concat([lengths, [1]], axis=0))
        branch = tf.reduce_sum(tf.cast(tf.constant(self.prompt_widths) < longest, tf.int32))
        batch = tf.shape(lengths)[0]
        row_caps = max_new_tokens if max_new_tokens.shape.rank else tf.fill([batch], max_new_tokens)

        def decode_at(width):
            def run():
                dense = tf.cast(ids.to_tensor(self.pad_id, shape=tf.stack([tf.cast(batch, tf.int64), width])), tf.int32)
                dense = tf.ensure_shape(dense, [None, width])
                if request is None:
                    tokens = self._greedy_search(dense, lengths, row_caps)
                else:
                    tokens = self._request_search(dense, lengths, row_caps, *request)
                return tf.ensure_shape(tokens, [None, self.max_new_tokens])
            return run

        tokens = tf.switch_case(branch, [decode_at(w) for w in self.prompt_widths])
        return self.tokenizer.detokenize(trim_generated(tokens, self.stop_ids, max_new_tokens))

    # ---- signatures ----
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="prompt")])
    def serving_default(self, prompt):
        """Greedy continuation: ``prompt string [B]`` -> ``{"text": string [B]}``."""
        return {"text": self._decode(prompt, tf.constant(self.max_new_tokens))}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="prompt"),
                                  tf.TensorSpec([None], tf.int32, name="max_new_tokens"),
                                  tf.TensorSpec([None], tf.float32, name="temperature"),
                                  tf.TensorSpec([None], tf.int32, name="top_k"),
                                  tf.TensorSpec([None], tf.float32, name="top_p"),
                                  tf.TensorSpec([None], tf.int32, name="seed")])
    def generate(self, prompt, max_new_tokens, temperature, top_k, top_p, seed):
        """Greedy or seeded sampling with every option, one value per row (0 = default, see the module
        docstring) -> ``{"text": string [B]}``. Rows are decoded in groups of equal temperature, top_k and top_p
        (:func:`kerasplm.generation.options.map_option_groups`); ``max_new_tokens`` and ``seed`` act per row."""
        rows = tf.shape(prompt)[0]
        checks = [
            tf.debugging.assert_equal(tf.stack([tf.size(o) for o in (max_new_tokens, temperature, top_k, top_p, seed)]),
                                      rows, message="every option needs one value per prompt (a [batch] vector)"),
            tf.debugging.assert_greater_equal(max_new_tokens, 0, message="max_new_tokens must be >= 0 (0 = default)"),
            tf.debugging.assert_less_equal(max_new_tokens, self.max_new_tokens,
                                           message=f"max_new_tokens must be <= {self.max_new_tokens}"),
            *request_checks(temperature, top_k, top_p),
        ]
        with tf.control_dependencies(checks):
            steps = tf.where(max_new_tokens > 0, max_new_tokens, self.max_new_tokens)

        def decode_group(rows_of_group, options):
            group_prompt, group_steps, group_seed = rows_of_group
            return {"text": self._decode(group_prompt, group_steps, (*options, row_seeds(group_seed)))}

        return map_option_groups(decode_group, [prompt, steps, seed], [temperature, top_k, top_p],
                                 {"text": tf.string})

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def score(self, text):
        """``text string [B]`` -> ``{"log_likelihood": float32 [B], "num_tokens": int32 [B], "perplexity": float32 [B]}``."""
        log_likelihood, num_tokens = score_token_ids(self.model, self.tokenizer.tokenize(text), self.end_of_text_id,
                                                     self.max_positions)
        return {"log_likelihood": log_likelihood, "num_tokens": num_tokens,
                "perplexity": perplexity(log_likelihood, num_tokens)}

    def warmup_requests(self):
        """Every signature (:func:`kerasplm.export.warmup.default_requests`: greedy) and a sampled ``generate``. The
        prompt widths are branches of one ``tf.switch_case``, all built by the first call; with ``jit_compile`` each
        width is XLA-compiled when it first runs, so a prompt of about each width's length is then replayed through
        ``serving_default`` and the sampled ``generate``."""
        requests = super().warmup_requests()
        sample = {"max_new_tokens": [0], "temperature": [1.0], "top_k": [0], "top_p": [0.0], "seed": [0]}
        if not self.jit_compile:
            return requests + [warmup.WarmupRequest("generate", {"prompt": [warmup.WARMUP_SENTENCES[1]], **sample})]
        tokens_per_word = max(1.0, len(self.tokenizer.tokenize(tf.constant(["the"] * 64)).flat_values) / 64)
        for width in self.prompt_widths:
            prompt = " ".join(["the"] * max(1, int((width - 1) / tokens_per_word)))
            requests += [warmup.WarmupRequest("serving_default", {"prompt": [prompt]}),
                         warmup.WarmupRequest("generate", {"prompt": [prompt], **sample})]
        return requests

    def signatures(self):
        return {"serving_default": self.serving_default, "generate": self.generate, "score": self.score}


def as_text_generator(generator):
    """``generator`` itself, or the :class:`TextGenerator` of a GPT model loaded by :func:`kerasplm.runs.load_run`."""
    return generator if isinstance(generator, TextGenerator) else TextGenerator(generator)


def export_generator(generator, model_base_path, version=None, overwrite=False, max_new_tokens=DEFAULT_MAX_NEW_TOKENS,
                     max_prompt_tokens=None, prompt_widths=(16, 64, 256), jit_compile=False):
    """Writes ``model_base_path/<version>/`` (SavedModel + ``assets.extra/kerasplm.json``) atomically; returns
    the version directory. Options: see :class:`GeneratorModule`; ``version``/``overwrite`` as
    :func:`kerasplm.export.base.save_version`."""
    generator = as_text_generator(generator)
    module = GeneratorModule(generator, max_new_tokens=max_new_tokens, max_prompt_tokens=max_prompt_tokens,
                             prompt_widths=prompt_widths, jit_compile=jit_compile)
    config = generator.config or {}
    model_config = generator.model.backbone.config
    metadata = {
        "preset": config.get("preset", generator.model.name),
        "model": {k: getattr(model_config, k) for k in model_config.__dataclass_fields__},
        "vocab_size": generator.tokenizer.vocab_size,
        "tokenizer": type(generator.tokenizer).__name__,
        "training_step": generator.step,
        "generation": {"default": "greedy", "max_new_tokens": module.max_new_tokens,
                       "max_prompt_tokens": module.max_prompt_tokens, "prompt_widths": module.prompt_widths,
                       "stop_ids": list(module.stop_ids), "options_zero_means_default": True,
                       "jit_compile": module.jit_compile},
    }
    return save_version(module, model_base_path, version=version, overwrite=overwrite, metadata=metadata)


def load_and_generate(path, prompts, signature="serving_default", **options):
    """Continuations of ``prompts`` (list of str) from the SavedModel at ``path`` (``options`` for ``generate``:
    max_new_tokens, temperature, top_k, top_p, seed; 0 = default). Returns a list of str."""
    fn = tf.saved_model.load(os.fspath(path)).signatures[signature]
    kwargs = {"prompt": tf.constant(list(prompts), tf.string, shape=[len(prompts)])}
    for name, spec in fn.structured_input_signature[1].items():
        if name != "prompt":
            kwargs[name] = tf.constant(options.pop(name, 0) or 0, spec.dtype)
    if options:
        raise TypeError(f"signature {signature!r} takes no options {sorted(options)}")
    return [t.decode("utf-8", errors="replace") for t in fn(**kwargs)["text"].numpy()]


def export_generator_run(run, to, version=None, overwrite=False, max_new_tokens=DEFAULT_MAX_NEW_TOKENS,
                         max_prompt_tokens=None, jit_compile=False):
    """``kerasplm export generator``: export a GPT run (trained or converted); prints and returns the version
    directory. The run is read by :func:`kerasplm.runs.load_run` (:func:`load_text_generator`)."""
    path = export_generator(load_text_generator(run), to, version=version, overwrite=overwrite,
                            max_new_tokens=max_new_tokens, max_prompt_tokens=max_prompt_tokens,
                            jit_compile=jit_compile)
    print(path)
    return path
