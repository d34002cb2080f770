"""Export a GPT :class:`kerasplm.jobs.language_model.TextGenerator` as a TF Serving SavedModel.

The SavedModel is a :class:`GeneratorModule` (an :class:`kerasplm.export.base.ExportModule`): the Keras model,
the tokenizer (SentencePiece or GPT-2 BPE, a ``tf.Module`` whose files are assets) and these signatures
(``prompt``/``text`` are ``tf.string [None]``, one row each):

``serving_default``  prompt -> text string [B]: greedy continuation of ``max_new_tokens`` (the export's default)
                     tokens, the prompt not repeated, stopped at <|endoftext|>
``generate``         prompt, max_new_tokens int32 [], temperature float32 [], top_k int32 [], top_p float32 [],
                     seed int32 [] -> text string [B]. 0 means "the default" for every option: max_new_tokens 0 =
                     the export's default (at most its cap), temperature 0 = greedy, top_k 0 / top_p 0 (or 1) =
                     no filter. Sampling is seeded: the same request gives the same text.
``score``            text -> log_likelihood float32 [B] (nats, log P(text | <|endoftext|>)), num_tokens int32 [B],
                     perplexity float32 [B] (exp(-log P / num_tokens); 1 for text without tokens)
``metadata``         (no inputs) -> the export's JSON metadata (added by save_version)

TF Serving signatures have no optional inputs, hence two generation signatures: ``serving_default`` for the
plain call, ``generate`` with every option (the REST API's row format takes a scalar option once per request).

Decoding is the engine of :mod:`kerasplm.generation` (``causal_lm_search``: one prefill, key/value cache); the
only export-specific piece is the token chooser, whose options are tensors here (:func:`runtime_chooser`, the
same draws as the engine's sampler for equal options). Prompts are cut to their last ``max_prompt_tokens``
tokens and padded to the smallest of a few static widths (one traced decoding branch each), because the cache
size must be static. An empty prompt is <|endoftext|> alone (unconditional text).
"""
import os

import tensorflow as tf

from kerasplm.export.base import ExportModule, save_version
from kerasplm.generation.sampling import NEG_INF, inverse_cdf_sample, nucleus_mask
from kerasplm.generation.search import argmax_token
from kerasplm.jobs.language_model import load_text_generator, perplexity, score_token_ids, trim_generated

FAMILY = "gpt"
DEFAULT_MAX_NEW_TOKENS = 32


def top_k_padded(logits, k):
    """The ``k`` (a tensor) largest logits in decreasing order and their ids, padded with -inf (id 0) back to
    ``(n, V)``: a static shape for any k, and the same draw as the unpadded ``(n, k)`` values (-inf entries
    have probability 0: the nucleus and the inverse-CDF draw never pick them)."""
    values, ids = tf.math.top_k(logits, k=k)
    padding = [[0, 0], [0, tf.shape(logits)[-1] - k]]
    values = tf.ensure_shape(tf.pad(values, padding, constant_values=NEG_INF), logits.shape)
    return values, tf.ensure_shape(tf.pad(ids, padding), logits.shape)


def runtime_chooser(seed, temperature, top_k, top_p):
    """A token chooser (``fn(logits (n, V), step) -> int32 (n,)``) whose options are scalar tensors.

    temperature <= 0: argmax; else a draw from softmax(logits / temperature) restricted to the ``top_k`` most
    probable tokens (``top_k`` in [1, V)) and to the ``top_p`` nucleus (``top_p`` in (0, 1)), with the same
    random numbers, token order and nucleus rule as :func:`kerasplm.generation.sampling.make_sampler`, so a
    request equals ``TextGenerator.generate`` with the same options. ``seed``: int32 (2,).
    """
    def choose(logits, step):
        def sample():
            scaled = logits / temperature
            vocab = tf.shape(scaled)[-1]
            step_seed = tf.random.experimental.stateless_fold_in(seed, step, alg="philox")
            values, ids = tf.cond(
                (top_k > 0) & (top_k < vocab),
                lambda: top_k_padded(scaled, top_k),
                lambda: (scaled, tf.broadcast_to(tf.range(vocab), tf.shape(scaled))))
            values = tf.cond(
                (top_p > 0.0) & (top_p < 1.0),
                lambda: tf.where(nucleus_mask(tf.nn.softmax(values, axis=-1), top_p), values, NEG_INF),
                lambda: values)
            return tf.gather(ids, inverse_cdf_sample(values, step_seed), batch_dims=1)

        return tf.cond(temperature > 0.0, sample, lambda: argmax_token(logits, step))

    return choose


class GeneratorModule(ExportModule):
    """The exported GPT: model + tokenizer + decoding and scoring, all graph functions (see the module docstring).

    Args:
      generator: a :class:`kerasplm.jobs.language_model.TextGenerator`.
      max_new_tokens: ``serving_default``'s length and the largest ``generate`` accepts (the decoding buffer).
      max_prompt_tokens: prompts keep their last this many tokens (default: the rest of the model's context).
      prompt_widths: the static prompt widths traced (each <= max_prompt_tokens; the largest is added).
    """

    family = FAMILY

    def __init__(self, generator, max_new_tokens=DEFAULT_MAX_NEW_TOKENS, max_prompt_tokens=None,
                 prompt_widths=(16, 64, 256)):
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

    def _decode(self, prompt, max_new_tokens, choose):
        """Text of the continuations: prompts padded to the smallest traced width that holds them."""
        from kerasplm.generation.engine import causal_lm_search

        ids = self._prompt_ids(prompt)
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        longest = tf.reduce_max(tf.concat([lengths, [1]], axis=0))
        branch = tf.reduce_sum(tf.cast(tf.constant(self.prompt_widths) < longest, tf.int32))
        batch = tf.shape(lengths)[0]
        row_caps = tf.fill([batch], max_new_tokens)

        def decode_at(width):
            def run():
                dense = tf.cast(ids.to_tensor(self.pad_id, shape=tf.stack([tf.cast(batch, tf.int64), width])), tf.int32)
                dense = tf.ensure_shape(dense, [None, width])
                out, _, _ = causal_lm_search(self.model, dense, lengths, self.max_new_tokens, choose=choose,
                                             max_lengths=row_caps, end_id=self.stop_ids, pad_id=self.pad_id)
                return tf.ensure_shape(out[:, 1:], [None, self.max_new_tokens])
            return run

        tokens = tf.switch_case(branch, [decode_at(w) for w in self.prompt_widths])
        return self.tokenizer.detokenize(trim_generated(tokens, self.stop_ids, max_new_tokens))

    # ---- signatures ----
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="prompt")])
    def serving_default(self, prompt):
        """Greedy continuation: ``prompt string [B]`` -> ``{"text": string [B]}``."""
        return {"text": self._decode(prompt, tf.constant(self.max_new_tokens), argmax_token)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="prompt"),
                                  tf.TensorSpec([], tf.int32, name="max_new_tokens"),
                                  tf.TensorSpec([], tf.float32, name="temperature"),
                                  tf.TensorSpec([], tf.int32, name="top_k"),
                                  tf.TensorSpec([], tf.float32, name="top_p"),
                                  tf.TensorSpec([], tf.int32, name="seed")])
    def generate(self, prompt, max_new_tokens, temperature, top_k, top_p, seed):
        """Greedy or seeded sampling with every option (0 = default, see the module docstring) -> ``{"text"}``."""
        checks = [
            tf.debugging.assert_greater_equal(max_new_tokens, 0, message="max_new_tokens must be >= 0 (0 = default)"),
            tf.debugging.assert_less_equal(max_new_tokens, self.max_new_tokens,
                                           message=f"max_new_tokens must be <= {self.max_new_tokens}"),
            tf.debugging.assert_greater_equal(temperature, 0.0, message="temperature must be >= 0 (0 = greedy)"),
            tf.debugging.assert_greater_equal(top_k, 0, message="top_k must be >= 0 (0 = no top-k filter)"),
            tf.debugging.assert_greater_equal(top_p, 0.0, message="top_p must be in [0, 1] (0 = no nucleus)"),
            tf.debugging.assert_less_equal(top_p, 1.0, message="top_p must be in [0, 1] (0 = no nucleus)"),
        ]
        with tf.control_dependencies(checks):
            steps = tf.where(max_new_tokens > 0, max_new_tokens, self.max_new_tokens)
        choose = runtime_chooser(tf.stack([0, seed]), temperature, top_k, top_p)
        return {"text": self._decode(prompt, steps, choose)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def score(self, text):
        """``text string [B]`` -> ``{"log_likelihood": float32 [B], "num_tokens": int32 [B], "perplexity": float32 [B]}``."""
        log_likelihood, num_tokens = score_token_ids(self.model, self.tokenizer.tokenize(text), self.end_of_text_id,
                                                     self.max_positions)
        return {"log_likelihood": log_likelihood, "num_tokens": num_tokens,
                "perplexity": perplexity(log_likelihood, num_tokens)}

    def signatures(self):
        return {"serving_default": self.serving_default, "generate": self.generate, "score": self.score}


def export_generator(generator, model_base_path, version=None, overwrite=False, max_new_tokens=DEFAULT_MAX_NEW_TOKENS,
                     max_prompt_tokens=None, prompt_widths=(16, 64, 256)):
    """Writes ``model_base_path/<version>/`` (SavedModel + ``assets.extra/kerasplm.json``) atomically; returns
    the version directory. Options: see :class:`GeneratorModule`; ``version``/``overwrite`` as
    :func:`kerasplm.export.base.save_version`."""
    module = GeneratorModule(generator, max_new_tokens=max_new_tokens, max_prompt_tokens=max_prompt_tokens,
                             prompt_widths=prompt_widths)
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
                       "stop_ids": list(module.stop_ids), "options_zero_means_default": True},
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
                         max_prompt_tokens=None):
    """``kerasplm export generator``: export a GPT run (trained or converted); prints and returns the version
    directory."""
    path = export_generator(load_text_generator(run), to, version=version, overwrite=overwrite,
                            max_new_tokens=max_new_tokens, max_prompt_tokens=max_prompt_tokens)
    print(path)
    return path
