"""Train, reload and use GPT language models; the ``kerasplm train gpt`` / ``generate`` / ``score`` jobs.

Training (:func:`train_gpt`) is causal language modelling on plain text (GPT-1 §3.1, eq. 1):

    L(θ) = -(1/N) Σ_i log P(u_i | u_{i-k}, ..., u_{i-1}; θ)      over packed windows of k = seq_len tokens

* the corpus is one UTF-8 text file; the held-out text is ``--valid-corpus`` or the last
  ``valid_fraction`` of the corpus (cut at a line boundary);
* the vocabulary is a SentencePiece BPE model trained on the training text
  (:mod:`kerasplm.text.sentencepiece`), or an existing ``.model`` file (``--tokenizer``);
* the token stream ``<|endoftext|> text`` is cut into windows of ``seq_len + 1`` tokens (inputs and
  next-token labels), each epoch at a seeded random offset and in a seeded order that is a pure function
  of (seed, epoch) (``tf.random.experimental.index_shuffle``), so a resumed run sees exactly the batches an
  uninterrupted one would;
* AdamW (β = 0.9, 0.95, GPT-3 §B) with decoupled weight decay on the Dense kernels only: LayerNorm
  gains/biases, every bias and the (tied) token and position embeddings are not decayed; gradient
  clipping at global norm 1; linear warmup then cosine decay to 10 % of the peak
  (:class:`kerasplm.training.WarmupCosineDecay`) over ``decay_steps`` (default: ``steps``);
* held-out loss and perplexity exp(loss) (per SentencePiece token) go to ``metrics.json``, with samples.

The run directory (:mod:`kerasplm.runs`) has family ``gpt``, task ``causal_lm`` and the asset
``{"spm_model": "spm.model"}``. :func:`load_text_generator` also loads converted GPT-2 runs whose assets
are ``{"bpe_vocab": ..., "bpe_merges": ...}`` (GPT-2's byte-level BPE, :mod:`kerasplm.text.bpe`).

Using a model: :class:`TextGenerator` (prompts in, text out, through the one generation engine of
:mod:`kerasplm.generation`; per-line log-likelihood and perplexity).

>>> summary = train_gpt("runs/gpt", corpus="../shared/data/tiny_shakespeare/input.txt", steps=500)
>>> generator = load_text_generator("runs/gpt")
>>> generator.generate(["ROMEO:"], max_new_tokens=40, temperature=0.8, top_k=40, seed=1)
"""
import dataclasses
import math
import os
import sys
import time

import numpy as np
import tensorflow as tf

from kerasplm.generation.engine import generate
from kerasplm.generation.options import DEFAULT_MAX_NEW_TOKENS, DEFAULT_SEED, resolve_request
from kerasplm.models.gpt import GPT, PRESETS, GPTBackbone, GPTConfig
from kerasplm.families.gpt import GPTOptions
from kerasplm.jobs.job import fit_recorded, open_run, restores_global_policy, training_summary
from kerasplm.options import RUN
from kerasplm.runs import RunDir
from kerasplm.text.bpe import load_bpe_tokenizer
from kerasplm.text.sentencepiece import (END_OF_TEXT, SentencePieceTokenizer, load_sentencepiece_tokenizer,
                                         train_sentencepiece)
from kerasplm.training import Trainer, WarmupCosineDecay
from kerasplm.training.optimizers import FusedAdamW

FAMILY = "gpt"
TASK = "causal_lm"
ASSETS = {"spm_model": "spm.model"}
# Not decayed (GPT-2 practice as in most reimplementations): LayerNorm gains/biases, biases, embeddings.
NO_WEIGHT_DECAY = ["^gamma$", "^beta$", "^bias$", "^embeddings$"]
PRESET_NAMES = sorted(name for name, config in PRESETS.items() if not name.startswith("gpt3"))


# ---------------------------------------------------------------------------------------------- data
def _read_text(path, max_chars):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read() if max_chars is None else f.read(max_chars)
    if not text.strip():
        raise ValueError(f"{path}: no text")
    return text


def read_corpus(options):
    """(training text, held-out text) of the options (see the module docstring)."""
    o = options
    if o.corpus is None:
        raise ValueError("give a training corpus: corpus=PATH / --corpus PATH (a UTF-8 text file, e.g. "
                         "../shared/data/tiny_shakespeare/input.txt)")
    text = _read_text(o.corpus, o.max_chars)
    if o.valid_corpus:
        return text, _read_text(o.valid_corpus, o.max_chars)
    cut = int(len(text) * (1.0 - o.valid_fraction))
    newline = text.rfind("\n", 0, cut)
    cut = newline + 1 if newline > 0 else cut  # at a line boundary when there is one
    train, held_out = text[:cut], text[cut:]
    if not train.strip() or not held_out.strip():
        raise ValueError(f"{o.corpus}: too little text to hold out {o.valid_fraction:.0%} of it "
                         f"({len(text)} characters)")
    return train, held_out


def encode_text(tokenizer, text, start_id=None, lines_per_call=4096):
    """The token ids (int32 numpy) of ``text``, preceded by ``start_id`` if given. Tokenized line by line
    (each line keeps its "\\n"; SentencePiece pieces never cross a newline, so this equals tokenizing the
    whole text at once) in calls of ``lines_per_call`` lines."""
    lines = text.splitlines(keepends=True)
    parts = [np.array([] if start_id is None else [start_id], np.int32)]
    for i in range(0, len(lines), lines_per_call):
        ids = tokenizer.tokenize(tf.constant(lines[i:i + lines_per_call], tf.string))
        parts.append(ids.flat_values.numpy().astype(np.int32))
    return np.concatenate(parts)


def make_lm_dataset(token_ids, seq_len, batch_size, seed=0, shuffle=True, repeat=True, max_windows=None):
    """Packed next-token windows: int32 ``(batch, seq_len + 1)`` (inputs ``[:, :-1]``, labels ``[:, 1:]``).

    Training (``shuffle=True``): epoch e cuts the stream at offset r_e + i·seq_len (r_e in [0, seq_len)
    drawn from (seed, e)) and visits the windows in the order ``index_shuffle(i, (seed, e))``: a pure
    function of (seed, position), so every iteration (or process) yields the same batches. Full batches
    only. Evaluation (``shuffle=False``): consecutive windows from offset 0, the last one 0-padded (label 0
    is ignored by the loss), at most ``max_windows``.
    """
    ids = tf.constant(np.asarray(token_ids, np.int32))
    total, width = int(ids.shape[0]), seq_len + 1
    if not shuffle:
        n = max(1, math.ceil((total - 1) / seq_len))
        if max_windows:
            n = min(n, max_windows)
        padded = tf.pad(ids, [[0, n * seq_len + 1 - min(total, n * seq_len + 1)]])[:n * seq_len + 1]
        starts = tf.range(n) * seq_len
        windows = tf.gather(padded, starts[:, tf.newaxis] + tf.range(width)[tf.newaxis])
        return tf.data.Dataset.from_tensor_slices(windows).batch(batch_size)
    n = (total - seq_len) // seq_len  # windows per epoch, whatever the offset
    if n < batch_size:
        raise ValueError(f"the training text has {total} tokens: {max(n, 0)} windows of {seq_len} + 1 tokens, "
                         f"fewer than one batch of {batch_size}; use a larger corpus or smaller seq_len/batch_size")
    positions = tf.data.Dataset.counter() if repeat else tf.data.Dataset.range(n)
    seed = tf.constant(seed, tf.int64)

    def window(position):
        epoch, index = position // n, position % n
        # Two independent streams of (seed, epoch): the window order and (epoch -1 - e) the offset.
        index = tf.random.experimental.index_shuffle(index, seed=tf.stack([seed, epoch]), max_index=n - 1)
        offset = tf.random.stateless_uniform([], seed=tf.stack([seed, -1 - epoch]), minval=0, maxval=seq_len,
                                             dtype=tf.int64, alg="philox")
        return tf.slice(ids, [tf.cast(offset + index * seq_len, tf.int32)], [width])

    dataset = positions.map(window, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


# ---------------------------------------------------------------------------------------------- model
def lm_loss(model, batch, training):
    """The Trainer's sums: next-token cross-entropy over the window (``GPT.compute_loss_sums``)."""
    return model.compute_loss_sums(batch, training)


def _model_config(run, config):
    try:
        return GPTConfig(**config["model"]).validate()
    except (TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"'model' is not a valid GPTConfig ({e})") from None


def _new_model_config(o, vocab_size):
    overrides = {"vocab_size": vocab_size}
    for name in ("num_layers", "d_model", "num_heads"):
        if getattr(o, name) is not None:
            overrides[name] = getattr(o, name)
    if o.d_model is not None:
        overrides["dff"] = 4 * o.d_model
    if o.dropout is not None:
        overrides["rate"] = overrides["attention_dropout"] = o.dropout
    from kerasplm.models.presets import get_preset

    config = get_preset(o.preset, **overrides).validate()
    if o.seq_len is not None and o.seq_len > config.max_positions:
        raise ValueError(f"seq_len={o.seq_len} exceeds the model's max_positions={config.max_positions}")
    return config


def adamw(learning_rate, weight_decay):
    """AdamW as GPT-3 trained (β2 = 0.95, ε = 1e-8), no decay on LayerNorm, biases and embeddings."""
    optimizer = FusedAdamW(learning_rate=learning_rate, weight_decay=weight_decay, beta_1=0.9,
                                       beta_2=0.95, epsilon=1e-8)
    optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    return optimizer


def build_gpt(model_config, name):
    return GPT(backbone=GPTBackbone.from_config_object(model_config, name=name))


# ---------------------------------------------------------------------------------------------- job
def _tokenizer_for(run, config, o, train_text, log):
    """The run's SentencePiece model: stored (resume), copied from --tokenizer, or trained."""
    path = run.file(ASSETS["spm_model"])
    if config is not None:
        return load_sentencepiece_tokenizer(run, config)
    os.makedirs(run.path, exist_ok=True)
    if o.tokenizer:
        with open(o.tokenizer, "rb") as f:
            data = f.read()
        SentencePieceTokenizer(data)  # a clear error before anything is written
        with open(path, "wb") as f:
            f.write(data)
    else:
        t0 = time.time()
        train_sentencepiece([train_text], vocab_size=o.vocab_size, model_prefix=path[:-len(".model")], seed=o.seed)
        log(f"trained a {o.vocab_size}-piece SentencePiece BPE model in {time.time() - t0:.1f}s")
    return SentencePieceTokenizer(path)


@restores_global_policy
def train_gpt(out, options=None, log=print, **overrides):
    """Train (or resume) a GPT language model in run directory ``out``; report held-out perplexity.

    ``options`` is a :class:`GPTOptions`; keyword ``overrides`` replace single options
    (``train_gpt(out, corpus="input.txt", steps=200, preset="gpt_tiny")``). Stops at ``steps`` (absolute:
    a resumed run continues to the same total), after ``time_budget`` seconds, or on SIGTERM. An existing
    run in ``out`` is resumed with its stored options. Returns a summary dict (also written to
    metrics.json, where "generator" is left out): steps, losses, ``eval_perplexity``, samples, and
    "generator", the trained :class:`TextGenerator`.
    """
    run, o, config, previous_history = open_run(out, FAMILY, GPTOptions, options, overrides, what="GPT",
                                                check_config=_model_config)
    t0 = time.time()
    train_text, held_out_text = read_corpus(o)
    tokenizer = _tokenizer_for(run, config, o, train_text, log)
    eot = tokenizer.end_of_text_id
    if config is not None:
        log(f"resuming run in {out} (preset {config['preset']})")
        model_config = _model_config(run, config)
    else:
        model_config = _new_model_config(o, tokenizer.vocab_size)
        decay_steps = o.decay_steps or o.steps
        if decay_steps is None:
            raise ValueError("a run with only a time budget needs decay_steps / --decay-steps (the length of the "
                             "cosine schedule)")
        o = o.replace(seq_len=o.seq_len or min(256, model_config.max_positions), decay_steps=decay_steps)
    if tokenizer.vocab_size > model_config.vocab_size:
        raise run.error(ASSETS["spm_model"], f"{tokenizer.vocab_size} pieces, more than the model's "
                                             f"vocab_size={model_config.vocab_size}")
    train_ids = encode_text(tokenizer, train_text, start_id=eot)
    held_out_ids = encode_text(tokenizer, held_out_text, start_id=eot)
    log(f"data: {len(train_ids):,} training and {len(held_out_ids):,} held-out tokens "
        f"({tokenizer.vocab_size} pieces; {time.time() - t0:.1f}s)")

    def train_ds():
        return make_lm_dataset(train_ids, o.seq_len, o.batch_size, seed=o.seed)

    def eval_ds():
        return make_lm_dataset(held_out_ids, o.seq_len, o.batch_size, shuffle=False,
                               max_windows=o.eval_max_windows)

    train_ds()  # fail on a too-small corpus before the run is written
    if config is None:
        config = run.write_config(FAMILY, TASK, o.preset, dataclasses.asdict(model_config), o.stored(RUN),
                                  assets=ASSETS)
    schedule = WarmupCosineDecay(o.learning_rate, min(o.warmup_steps, o.decay_steps), o.decay_steps, alpha=0.1)
    trainer = Trainer(model=lambda: build_gpt(model_config, config["preset"]),
                      optimizer=lambda: adamw(schedule, o.weight_decay), compute_loss=lm_loss,
                      clip_norm=1.0, jit_compile=o.jit_compile, checkpoint_dir=run.checkpoint_dir,
                      checkpoint_every=1000, log_dir=run.log_dir, seed=o.seed, verbose=o.verbose)
    history, train_seconds = fit_recorded(run, trainer, previous_history, train_ds, o, eval_dataset=eval_ds)
    log(f"trained to step {trainer.step} ({trainer.stop_reason}) in {train_seconds:.0f}s")
    generator = TextGenerator(trainer.model, tokenizer, config=config, step=trainer.step)
    summary = training_summary(trainer, history, train_seconds)
    summary["tokens_per_step"] = o.batch_size * o.seq_len
    if trainer.stop_reason == "sigterm":
        log(f"stopped by SIGTERM; checkpoint saved at step {trainer.step}: run the same command to resume")
        trainer.close()
        summary["generator"] = generator
        return summary
    if summary["eval_loss"] is not None:
        summary["eval_perplexity"] = round(math.exp(min(summary["eval_loss"], 50.0)), 3)
    if o.sample_tokens:
        prompts = ["", held_out_text.strip().splitlines()[0][:40]]
        texts = generator.generate(prompts, max_new_tokens=min(o.sample_tokens, model_config.max_positions - 16),
                                   temperature=0.8, top_k=40, seed=o.seed)
        summary["samples"] = [{"prompt": p, "continuation": t} for p, t in zip(prompts, texts)]
    run.write_json(run.METRICS, summary)
    log(f"held-out loss {summary['eval_loss']:.4f}, perplexity {summary.get('eval_perplexity')} "
        f"(per SentencePiece token)")
    for sample in summary.get("samples", []):
        log(f"  [sample] {sample['prompt']!r} -> {sample['continuation']!r}")
    trainer.close()
    summary["generator"] = generator
    return summary


# ---------------------------------------------------------------------------------------------- use
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


class TextGenerator:
    """A trained or converted GPT with its tokenizer: ``generate`` text and ``score`` lines.

    Decoding is :func:`kerasplm.generation.generate` (one prefill, key/value cache, XLA-compiled, prompts of
    different lengths right-padded in one batch). ``tokenizer`` follows kerasplm's tokenizer protocol
    (``tokenize``/``detokenize``/``special_tokens``/``token_to_id``): SentencePiece or GPT-2's BPE.
    """

    # Prompts are padded to a multiple of this many tokens, so decoding compiles once per bucket.
    length_bucket = 16

    def __init__(self, model, tokenizer, config=None, step=None):
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or {}
        self.step = step
        self.end_of_text_id = end_of_text_id(tokenizer)
        # The vocabulary's padding id (SentencePiece's <pad>), else -1: GPT-2's BPE has no padding token and
        # its id 0 ("!") must stay generable.
        pad_id = getattr(tokenizer, "pad_id", None)
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

    def generate_ids(self, prompts, max_new_tokens=DEFAULT_MAX_NEW_TOKENS, temperature=0.0, top_k=None, top_p=None,
                     num_beams=1, seed=DEFAULT_SEED, stop_ids=None, jit_compile=True):
        """:data:`kerasplm.generation.engine.GenerationOutput` for a list of prompt strings (options as
        :meth:`generate`)."""
        strategy, sampling = resolve_request(temperature, top_k, top_p, num_beams)
        if stop_ids is None:
            stop_ids = () if self.end_of_text_id is None else (self.end_of_text_id,)
        ids, lengths = self.encode_prompts(list(prompts), max_new_tokens)
        return generate(self.model, ids, lengths, max_new_tokens=max_new_tokens, seed=seed, strategy=strategy,
                        stop_ids=tuple(stop_ids), pad_id=self.pad_id, jit_compile=jit_compile, **sampling)

    def generate(self, prompts, max_new_tokens=DEFAULT_MAX_NEW_TOKENS, temperature=0.0, top_k=None, top_p=None,
                 num_beams=1, seed=DEFAULT_SEED, stop=None, stop_ids=None, jit_compile=True):
        """Continuations (list of str, the prompt not repeated) of ``prompts`` (list of str).

        ``temperature=0`` is greedy; ``temperature > 0`` samples (with ``top_k``/``top_p``) from ``seed``: the
        same seed gives the same text. ``num_beams > 1`` is beam search. The options follow a request's rules
        (:mod:`kerasplm.generation.options`: 0 = off), as the CLI's and the exported ``generate`` signature's,
        which decodes the same tokens for the same options and seed. Generation stops at
        ``<|endoftext|>`` (or ``stop_ids``) or after ``max_new_tokens``; the text is then cut before the first
        of the ``stop`` strings.
        """
        prompts = list(prompts)
        if not prompts:
            return []
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


def load_run_tokenizer(run, config):
    """The tokenizer named by a GPT run's assets: ``spm_model`` (SentencePiece) or ``bpe_vocab`` +
    ``bpe_merges`` (GPT-2's byte-level BPE)."""
    assets = config.get("assets") or {}
    if "spm_model" in assets:
        return load_sentencepiece_tokenizer(run, config)
    if "bpe_vocab" in assets or "bpe_merges" in assets:
        return load_bpe_tokenizer(run, config)
    raise run.error(run.CONFIG, "the run has no tokenizer ('assets' names neither 'spm_model' nor "
                                "'bpe_vocab'/'bpe_merges'): it can be loaded as a model (load_run) but not "
                                "used on text")


def load_text_generator(run_dir):
    """The :class:`TextGenerator` of a GPT run directory (trained by :func:`train_gpt` or converted)."""
    from kerasplm.models.gpt import load_gpt_from_run

    run = RunDir(run_dir)
    config = run.read_config(family=FAMILY, what="GPT")
    tokenizer = load_run_tokenizer(run, config)
    model = load_gpt_from_run(run, config)
    if tokenizer.vocab_size > model.vocab_size:
        raise run.error(run.CONFIG, f"the tokenizer has {tokenizer.vocab_size} tokens, more than the model's "
                                    f"vocab_size={model.vocab_size}; the assets are from another run")
    step = tf.Variable(0, dtype=tf.int64)
    tf.train.Checkpoint(step=step).read(run.latest_checkpoint()).expect_partial()
    return TextGenerator(model, tokenizer, config=config, step=int(step.numpy()))


def print_generations(run, prompts=(), max_new_tokens=64, temperature=0.0, top_k=None, top_p=None, num_beams=1,
                      seed=0):
    """``kerasplm generate``: print each prompt followed by its continuation (default prompts: stdin's lines)."""
    prompts = list(prompts) or [line.rstrip("\n") for line in sys.stdin]
    if not prompts:
        raise ValueError("no prompts (give them as arguments or on stdin)")
    texts = load_text_generator(run).generate(prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                                              top_k=top_k, top_p=top_p, num_beams=num_beams, seed=seed)
    for prompt, text in zip(prompts, texts):
        print(prompt + text)


def print_scores(run, file):
    """``kerasplm score``: per-line log-likelihood, token count and perplexity of ``file`` ('-': stdin)."""
    if file == "-":
        lines = [line.rstrip("\n") for line in sys.stdin]
    else:
        if not os.path.isfile(file):
            raise FileNotFoundError(f"no such file: {file}")
        with open(file, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    generator = load_text_generator(run)
    print("log_likelihood\tnum_tokens\tperplexity")
    for result in generator.score(lines):
        print(f"{result['log_likelihood']:.4f}\t{result['num_tokens']}\t{result['perplexity']:.4f}")
