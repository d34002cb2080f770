"""GPT run directories and text generation: :class:`TextGenerator` (prompts in, text out, through the one
generation engine of :mod:`kerasplm.generation`; per-line log-likelihood and perplexity) and its loader.

A ``gpt`` run (``kerasplm train gpt`` or ``kerasplm convert gpt2``) stores a :class:`kerasplm.models.gpt.model.GPT` and,
as its preprocessor, its tokenizer: a SentencePiece model or GPT-2's byte-level BPE (or none: a converted GPT-2
directory without tokenizer files). :func:`kerasplm.runs.load_run` rebuilds both; :func:`load_text_generator`
wraps them. Jobs, exporters and the command line reach it here, without importing one another.
"""

import numpy as np
import tensorflow as tf

from kerasplm.generation.engine import generate
from kerasplm.generation.options import DEFAULT_SEED, max_new_tokens_for, resolve_request
from kerasplm.runs import RunDirError, load_run
from kerasplm.text.sentencepiece import END_OF_TEXT

__all__ = ["RUN_FAMILY", "TextGenerator", "end_of_text_id", "load_text_generator", "perplexity", "run_tokenizer",
           "score_token_ids", "trim_generated"]

RUN_FAMILY = "gpt"
# The runs a TextGenerator uses: any language model with the engine's decoder-only protocol and a tokenizer.
GENERATOR_FAMILIES = (RUN_FAMILY, "char_rnn")
WHAT = "a GPT run (kerasplm train gpt / convert gpt2) or a character RNN run (kerasplm train char-rnn)"


def end_of_text_id(tokenizer):
    """The id of the tokenizer's end-of-text token ("<|endoftext|>" or special token "end_of_text"), or None."""
    candidates = [END_OF_TEXT, tokenizer.special_tokens.get("end_of_text"), tokenizer.special_tokens.get("eos")]
    for token in candidates:
        if token is None:
            continue
        try:
            return int(tokenizer.token_to_id(token))
        except KeyError:
            continue
    return None


def score_token_ids(model, ids, start_id, max_positions):
    """Log-likelihood of each row of ``ids`` (int RaggedTensor ``[B, (n)]``) under a causal LM, in graph.

        log P(u_1..u_n) = Σ_t log softmax(logits(u_0..u_{t-1}))[u_t],   u_0 = ``start_id``

    (with ``start_id=None`` the first token is context only and n - 1 tokens are scored). Rows longer
    than the model's context are scored in consecutive windows of ``max_positions`` predictions, each
    seeing only its own window. Returns ``(log_likelihood float32 [B], num_tokens int32 [B])``.
    """
    ids = tf.cast(ids, tf.int32)
    batch = ids.nrows(out_type=tf.int32)
    if start_id is not None:
        ids = tf.concat([tf.fill(tf.stack([batch, 1]), tf.constant(start_id, tf.int32)), ids], axis=1)
    n = tf.maximum(tf.cast(ids.row_lengths(), tf.int32) - 1, 0)             # predictions per row
    width = tf.maximum(tf.minimum(max_positions, tf.reduce_max(tf.concat([n, [1]], 0))), 1)
    chunks = (n + width - 1) // width                                    # windows per row
    row = tf.repeat(tf.range(batch), chunks)                             # [C]
    position = (tf.ragged.range(chunks).flat_values[:, tf.newaxis] * width
                + tf.range(width)[tf.newaxis])                           # [C, width] input positions
    dense = ids.to_tensor(0)
    dense = tf.pad(dense, [[0, 0], [0, width + 1]])                      # every gather below is in range
    inputs = tf.gather(dense, row, axis=0)                               # [C, M]
    tokens = tf.gather(inputs, position, batch_dims=1)
    targets = tf.gather(inputs, position + 1, batch_dims=1)
    valid = position < tf.gather(n, row)[:, tf.newaxis]
    logits = model(tokens, training=False)
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    token_log_probs = tf.where(valid, tf.gather(log_probs, targets, batch_dims=2), 0.0)
    per_row = tf.math.unsorted_segment_sum(tf.reduce_sum(token_log_probs, axis=1), row, batch)
    return per_row, n


def trim_generated(tokens, stop_ids, max_new_tokens):
    """Ragged int64 ``[B, (k)]``: each row of generated ``tokens (B, steps)`` up to (not including) its first
    stop id and at most ``max_new_tokens`` (scalar or ``[B]``) tokens; the padding after them is dropped.
    (Counting non-padding ids would not do: GPT-2's id 0 is a real token.)"""
    tokens = tf.cast(tokens, tf.int64)
    steps = tf.shape(tokens, out_type=tf.int64)[1]
    length = tf.fill(tf.shape(tokens, out_type=tf.int64)[:1], steps)
    if stop_ids:
        is_stop = tf.reduce_any(tokens[:, :, tf.newaxis] == tf.constant(list(stop_ids), tf.int64), axis=-1)
        first_stop = tf.argmax(tf.cast(is_stop, tf.int32), axis=1, output_type=tf.int64)
        length = tf.where(tf.reduce_any(is_stop, axis=1), first_stop, length)
    length = tf.minimum(length, tf.cast(max_new_tokens, tf.int64))
    return tf.RaggedTensor.from_tensor(tokens, lengths=length)


def perplexity(log_likelihood, num_tokens):
    """exp(-log P / n); 1.0 for a line without tokens (an empty mean taken as 0)."""
    return tf.exp(-log_likelihood / tf.cast(tf.maximum(num_tokens, 1), tf.float32))


def run_tokenizer(model):
    """The tokenizer of a GPT run's model (its preprocessor); a one-line :class:`RunDirError` when the run has none."""
    tokenizer = getattr(model, "preprocessor", None)
    if tokenizer is None:
        run_info = getattr(model, "run_info", None)
        where = f"{run_info.path}/config.json: " if run_info else ""
        raise RunDirError(f"{where}the run has no tokenizer (its 'preprocessor' is null: the converted directory had "
                          f"no vocab.json/merges.txt): it can be loaded as a model (load_run) but not used on text")
    return tokenizer


class TextGenerator:
    """A trained or converted GPT with its tokenizer: ``generate`` text and ``score`` lines.

    Decoding is :func:`kerasplm.generation.generate` (one prefill, key/value cache, XLA-compiled, prompts of
    different lengths right-padded in one batch). ``tokenizer`` (default: the model's ``preprocessor``, as
    :func:`kerasplm.runs.load_run` attaches it) follows kerasplm's tokenizer protocol
    (``tokenize``/``detokenize``/``special_tokens``/``token_to_id``): SentencePiece or GPT-2's BPE. ``config`` and
    ``step`` are the run's (``model.run_info``), when it has one.
    """

    # Prompts are padded to a multiple of this many tokens, so decoding compiles once per bucket.
    length_bucket = 16

    def __init__(self, model, tokenizer=None):
        self.model = model
        self.tokenizer = tokenizer if tokenizer is not None else run_tokenizer(model)
        run_info = getattr(model, "run_info", None)   # set by load_run and by the job
        self.config = run_info.config if run_info else {}
        self.step = run_info.step if run_info else None
        self.end_of_text_id = end_of_text_id(self.tokenizer)
        # The vocabulary's padding id (SentencePiece's <pad>), else -1: GPT-2's BPE has no padding token and
        # its id 0 ("!") must stay generable.
        pad_id = getattr(self.tokenizer, "pad_id", None)
        self.pad_id = -1 if pad_id is None else int(pad_id)
        self._score_fn = tf.function(self._score, reduce_retracing=True)

    @property
    def max_positions(self):
        return self.model.max_positions

    def encode_prompts(self, prompts, max_new_tokens):
        """Right-padded prompt ids int32 ``(batch, width)`` and lengths ``(batch,)``. An empty prompt is
        ``<|endoftext|>`` (unconditional text); a prompt longer than ``max_positions - max_new_tokens + 1``
        keeps its last tokens."""
        if not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens < self.max_positions:
            raise ValueError(f"max_new_tokens must be an integer in [1, {self.max_positions - 1}] (the model's "
                             f"context is {self.max_positions} tokens), got {max_new_tokens!r}")
        limit = self.max_positions - max_new_tokens + 1
        start = [self.end_of_text_id if self.end_of_text_id is not None else self.pad_id]
        rows = [ids[-limit:] or start for ids in self.tokenizer.tokenize(tf.constant(prompts, tf.string)).to_list()]
        width = min(limit, -(-max(len(r) for r in rows) // self.length_bucket) * self.length_bucket)
        ids = np.full((len(rows), width), self.pad_id, np.int32)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = r
        return ids, np.array([len(r) for r in rows], np.int32)

    def generate_ids(self, prompts, max_new_tokens=None, temperature=0.0, top_k=None, top_p=None,
                     num_beams=1, seed=DEFAULT_SEED, stop_ids=None, jit_compile=True):
        """:data:`kerasplm.generation.engine.GenerationOutput` for a list of prompt strings (options as
        :meth:`generate`)."""
        strategy, sampling = resolve_request(temperature, top_k, top_p, num_beams)
        max_new_tokens = max_new_tokens_for(max_new_tokens, self.max_positions)
        if stop_ids is None:
            stop_ids = () if self.end_of_text_id is None else (self.end_of_text_id,)
        ids, lengths = self.encode_prompts(list(prompts), max_new_tokens)
        return generate(self.model, ids, lengths, max_new_tokens=max_new_tokens, seed=seed, strategy=strategy,
                        stop_ids=tuple(stop_ids), pad_id=self.pad_id, jit_compile=jit_compile, **sampling)

    def generate(self, prompts, max_new_tokens=None, temperature=0.0, top_k=None, top_p=None,
                 num_beams=1, seed=DEFAULT_SEED, stop=None, stop_ids=None, jit_compile=True):
        """Continuations (list of str, the prompt not repeated) of ``prompts`` (list of str).

        ``temperature=0`` is greedy; ``temperature > 0`` samples (with ``top_k``/``top_p``) from ``seed``: the
        same seed gives the same text. ``num_beams > 1`` is beam search. The options follow a request's rules
        (:mod:`kerasplm.generation.options`: 0 = off), as the CLI's and the exported ``generate`` signature's,
        which decodes the same tokens for the same options and seed. Generation stops at
        ``<|endoftext|>`` (or ``stop_ids``) or after ``max_new_tokens``; the text is then cut before the first
        of the ``stop`` strings; ``max_new_tokens`` None is 64, or what the model's context leaves when fewer.
        """
        prompts = list(prompts)
        if not prompts:
            return []
        max_new_tokens = max_new_tokens_for(max_new_tokens, self.max_positions)
        out = self.generate_ids(prompts, max_new_tokens, temperature, top_k, top_p, num_beams, seed, stop_ids,
                                jit_compile)
        if stop_ids is None:
            stop_ids = () if self.end_of_text_id is None else (self.end_of_text_id,)
        ids = trim_generated(out.tokens, stop_ids, max_new_tokens)
        texts = [t.decode("utf-8", errors="replace") for t in self.tokenizer.detokenize(ids).numpy()]
        for s in stop or ():
            texts = [t.split(s, 1)[0] for t in texts]
        return texts

    def _score(self, texts):
        ids = self.tokenizer.tokenize(texts)
        return score_token_ids(self.model, ids, self.end_of_text_id, self.max_positions)

    def score(self, lines, batch_size=16):
        """Per line: ``{"log_likelihood": log P(line | <|endoftext|>) in nats, "num_tokens": n,
        "perplexity": exp(-log P / n)}`` (see :func:`score_token_ids`)."""
        lines, results = list(lines), []
        for i in range(0, len(lines), batch_size):
            ll, n = self._score_fn(tf.constant(lines[i:i + batch_size], tf.string))
            for value, count, ppl in zip(ll.numpy(), n.numpy(), perplexity(ll, n).numpy()):
                results.append({"log_likelihood": float(value), "num_tokens": int(count), "perplexity": float(ppl)})
        return results


def load_text_generator(run_dir):
    """The :class:`TextGenerator` of a GPT run directory (trained by ``kerasplm train gpt`` or converted) or of a
    character RNN run (``kerasplm train char-rnn``):
    :func:`kerasplm.runs.load_run`'s model and its tokenizer. One-line :class:`RunDirError` for a damaged run or a
    run without a tokenizer."""
    return TextGenerator(load_run(run_dir, family=GENERATOR_FAMILIES, what=WHAT))
