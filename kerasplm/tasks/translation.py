"""Train, reload and use the Transformer translator; the ``kerasplm train translator`` main job.

A *run directory* holds everything needed to resume, translate and export::

    RUN_DIR/config.json        model config, preset, data and training options, kerasplm version
    RUN_DIR/src_vocab.txt      WordPiece vocabularies (reserved [PAD]=0 [UNK] [START] [END])
    RUN_DIR/tgt_vocab.txt
    RUN_DIR/checkpoints/       tf.train.CheckpointManager: model, optimizer, step, RNG state
    RUN_DIR/logs/              TensorBoard summaries
    RUN_DIR/history.json       loss / accuracy / learning rate per logged step (for plots)
    RUN_DIR/metrics.json       held-out BLEU and sample translations

Example:
>>> summary = train_translator("runs/demo", steps=200)              # bundled Tatoeba sample
>>> translator = load_translator("runs/demo")
>>> translator.translate(["¿Puedo tomar prestado este libro?"])
"""
import dataclasses
import functools
import json
import os
import tempfile
import time

import keras
import numpy as np
import sacrebleu
import tensorflow as tf

import kerasplm
from kerasplm.data import (group_references, make_translation_dataset, read_parallel_tsv, sample_path,
                           train_dev_split)
from kerasplm.models.transformer import Transformer, TransformerConfig, get_preset
from kerasplm.text import WordPieceTokenizer, build_wordpiece_vocab, write_vocab
from kerasplm.training import BudgetSchedule, CustomSchedule, Trainer, fused_masked_cross_entropy

DEFAULT_PRESET = "transformer_seed"
# The job's default learning-rate schedule ("budget"): BudgetSchedule fitted to the steps the run will
# make; "seed" is the seed's CustomSchedule(d_model, warmup_steps). Measured in benchmarks/RESULTS.md.
SCHEDULES = ("budget", "seed")
DEFAULT_PEAK_LEARNING_RATE = 1e-3
DEFAULT_WARMUP_FRACTION = 0.1
# A time-budgeted run first makes TRACE_STEPS steps (tracing the train step's bucket shapes), then times
# TIMED_STEPS steps to estimate how many steps the rest of the budget allows.
TRACE_STEPS, TIMED_STEPS = 20, 100
SEED_SENTENCES = ["¿Puedo tomar prestado este libro?", "Hace mucho frío aquí.", "Esta es mi vida.",
                  "¿Todavía están en casa?", "Trata de averiguarlo."]


def translation_loss(model, batch, training, label_smoothing=0.0):
    """Sums for :class:`kerasplm.training.Trainer`: masked cross-entropy and token accuracy.

    ``batch = ((src_ids (B, S), tgt_in (B, T)), tgt_out (B, T))``; padding (0) is excluded.
    """
    (src, tgt_in), tgt_out = batch
    logits, _ = model((src, tgt_in), training=training)
    loss_sum, num_tokens, correct = fused_masked_cross_entropy(tgt_out, logits,
                                                               label_smoothing=label_smoothing)
    return {"loss": loss_sum, "weight": num_tokens, "accuracy": correct}


def corpus_bleu(hypotheses, references):
    """Case-insensitive corpus BLEU (sacrebleu, 13a tokenization) with any number of references each.

    Args:
      hypotheses: list of str.
      references: list (same length) of lists of reference strings.
    Returns a ``sacrebleu.metrics.BLEUScore`` (``.score`` is BLEU in 0..100).
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} reference lists")
    width = max(len(r) for r in references)
    streams = [[refs[j] if j < len(refs) else None for refs in references] for j in range(width)]
    return sacrebleu.corpus_bleu(hypotheses, streams, lowercase=True)


def _atomic_write_json(path, payload):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2, ensure_ascii=False)
    os.replace(tmp, path)


class Translator:
    """A trained translator: tokenizers + model + decoding, all in TensorFlow.

    ``translate(texts, beam_size=1)`` returns one string per input. Decoding is the cached,
    XLA-compiled search of :mod:`kerasplm.generation`.
    """

    def __init__(self, model, src_tokenizer, tgt_tokenizer, config=None, step=None):
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.config = config or {}
        self.step = step

    # Sources are padded to a multiple of this many tokens, so decoding compiles once per bucket.
    length_bucket = 16

    def encode(self, texts):
        """Tokenized, 0-padded source ids ``(batch, S)``: S rounded up to a multiple of ``length_bucket``
        (bounding recompiles of the decoder), sentences cut to the model's position limit (keeping [END])."""
        ids = self.src_tokenizer.tokenize(tf.constant(list(texts), tf.string))
        limit = self.model.config.pe_input
        lengths = ids.row_lengths()
        longest = int(tf.reduce_max(lengths)) if len(texts) else 1
        width = min(limit, -(-longest // self.length_bucket) * self.length_bucket)
        dense = ids[:, :width].to_tensor(shape=[None, width])
        # A cut sentence still ends with [END].
        cut_end = tf.logical_and(lengths[:, None] > width, tf.range(width, dtype=tf.int64)[None, :] == width - 1)
        return tf.where(cut_end, tf.constant(self.src_tokenizer.end_id, tf.int64), dense)

    def translate_ids(self, src_ids, beam_size=1, **options):
        from kerasplm.generation import beam_search_decode, greedy_decode

        if beam_size <= 1:
            return greedy_decode(self.model, src_ids, start_id=self.tgt_tokenizer.start_id,
                                 end_id=self.tgt_tokenizer.end_id, **options)
        ids, _ = beam_search_decode(self.model, src_ids, beam_size=beam_size, start_id=self.tgt_tokenizer.start_id,
                                    end_id=self.tgt_tokenizer.end_id, **options)
        return ids

    def translate(self, texts, beam_size=1, batch_size=64, **options):
        """Translate a list of source sentences; returns a list of str in input order.

        Sentences are decoded in batches of similar length (sorted by character count), which wastes
        less work on padding; each result is independent of its batch-mates.
        """
        texts = list(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = [None] * len(texts)
        for start in range(0, len(texts), batch_size):
            chunk = order[start:start + batch_size]
            ids = self.translate_ids(self.encode([texts[i] for i in chunk]), beam_size=beam_size, **options)
            decoded = self.tgt_tokenizer.detokenize(tf.cast(ids, tf.int64)).numpy()
            for i, text in zip(chunk, decoded):
                out[i] = text.decode("utf-8")
        return out


def load_translator(run_dir):
    """Rebuild the translator of a run directory from its config, vocabularies and latest checkpoint."""
    config_path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"{run_dir} is not a translator run directory (no config.json)")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    model = Transformer.from_config_object(TransformerConfig(**config["model"]), name=config["preset"])
    checkpoint_dir = os.path.join(run_dir, "checkpoints")
    latest = tf.train.latest_checkpoint(checkpoint_dir)
    if latest is None:
        raise FileNotFoundError(f"no checkpoint in {checkpoint_dir}: train first")
    step = tf.Variable(0, dtype=tf.int64)
    try:
        tf.train.Checkpoint(model=model, step=step).restore(latest).expect_partial()
    except (tf.errors.OpError, ValueError) as e:
        raise ValueError(f"unreadable checkpoint {latest}: {e}") from e
    src = WordPieceTokenizer(os.path.join(run_dir, "src_vocab.txt"))
    tgt = WordPieceTokenizer(os.path.join(run_dir, "tgt_vocab.txt"))
    return Translator(model, src, tgt, config=config, step=int(step.numpy()))


def _prepare_data(data, src_col, tgt_col, dev_data, dev_size, max_pairs, seed):
    """Returns train (src, tgt) lists and dev (sources, reference lists)."""
    if data is None:
        train_src, train_tgt = read_parallel_tsv(sample_path("spa-eng-train.tsv"), src_col=1, tgt_col=0)
        dev_src, dev_tgt = read_parallel_tsv(sample_path("spa-eng-dev.tsv"), src_col=1, tgt_col=0)
    else:
        src, tgt = read_parallel_tsv(data, src_col=src_col, tgt_col=tgt_col, max_pairs=max_pairs)
        if dev_data:
            train_src, train_tgt = src, tgt
            dev_src, dev_tgt = read_parallel_tsv(dev_data, src_col=src_col, tgt_col=tgt_col)
        else:
            split = train_dev_split(src, tgt, dev_size=min(dev_size, max(1, len(set(src)) // 10)), seed=seed)
            train_src, train_tgt, dev_src, dev_tgt = split
    dev_sources, dev_refs = group_references(dev_src, dev_tgt)
    return (train_src, train_tgt), (dev_src, dev_tgt), (dev_sources, dev_refs)


def _make_schedule(train_config, d_model):
    """The optimizer's schedule from a run config's "train" section (configs without "schedule" predate
    the option and used the seed's)."""
    if train_config.get("schedule", "seed") == "seed":
        return CustomSchedule(d_model, train_config["warmup_steps"])
    # Until a time-budgeted run has timed its first steps, warmup spans twice the timing steps.
    provisional = 2 * (TRACE_STEPS + TIMED_STEPS) / max(train_config["warmup_fraction"], 1e-3)
    return BudgetSchedule(train_config["peak_learning_rate"], train_config.get("schedule_steps") or provisional,
                          warmup_fraction=train_config["warmup_fraction"])


def _fit_schedule_to_budget(trainer, train_ds, schedule, time_budget):
    """Make TRACE_STEPS untimed steps, time TIMED_STEPS more (again if one of them traced a new bucket
    shape), then fit ``schedule`` to the steps the rest of ``time_budget`` allows.

    Returns ``(total_steps, seconds_per_step)``; the run stops early if the budget runs out first.
    """
    started = time.monotonic()
    trainer.fit(train_ds, steps=trainer.step + TRACE_STEPS, time_budget=time_budget, log_every=0)
    seconds_per_step = None
    for _ in range(2):
        if trainer.stop_reason != "steps":
            break
        first, traces, t = trainer.step, trainer.trace_count, time.monotonic()
        remaining = time_budget - (t - started)
        trainer.fit(train_ds, steps=first + TIMED_STEPS, time_budget=remaining, log_every=0)
        seconds_per_step = (time.monotonic() - t) / max(trainer.step - first, 1)
        if trainer.trace_count == traces:
            break
    if seconds_per_step is None or trainer.stop_reason != "steps":  # the budget ran out while timing
        total = trainer.step
    else:
        remaining = time_budget - (time.monotonic() - started)
        total = trainer.step + max(int(remaining / seconds_per_step), 1)
    schedule.set_total_steps(total)
    return total, seconds_per_step


def _mean_target_tokens(tgt_tokenizer, tgt_texts, sample=2000):
    """Mean predicted target tokens per pair (length with [START], [END] minus one) over a sample."""
    lengths = tgt_tokenizer.tokenize(tf.constant(list(tgt_texts[:sample]), tf.string)).row_lengths()
    return float(tf.reduce_mean(tf.cast(lengths, tf.float32))) - 1.0


def _schedule_summary(lr_schedule, train_config):
    if isinstance(lr_schedule, BudgetSchedule):
        return {"name": "budget", "peak_learning_rate": lr_schedule.peak_learning_rate,
                "warmup_steps": int(max(1, round(lr_schedule.warmup_fraction * lr_schedule.total_steps))),
                "total_steps": lr_schedule.total_steps, "seconds_per_step": train_config.get("seconds_per_step")}
    return {"name": "seed", "warmup_steps": lr_schedule.warmup_steps, "d_model": lr_schedule.d_model}


def _describe_run(summary, train_config, time_budget):
    """One paragraph a user on a slow machine can read: what the run did and why it ended there."""
    lines = [f"trained {summary['steps_this_run']} steps in {summary['train_seconds']:.0f}s "
             f"({summary['steps_per_second']:.2f} steps/s, ~{summary['target_tokens_per_second']:,.0f} target "
             f"tokens/s; stopped by {summary['stop_reason']}), now at step {summary['step']}"]
    if train_config.get("schedule", "seed") == "budget":
        sched = summary["schedule"]
        fitted = (f"fitted to the {time_budget:.0f}s budget at {1 / sched['seconds_per_step']:.2f} steps/s"
                  if sched.get("seconds_per_step") else "fitted to the run's steps")
        lines.append(f"learning rate: warmup to {sched['peak_learning_rate']:g} over "
                     f"{sched['warmup_steps']} steps, linear decay to 0 at step {sched['total_steps']} ({fitted})")
    else:
        lines.append(f"learning rate: seed CustomSchedule, warmup {train_config['warmup_steps']} steps "
                     f"(now {summary['final_learning_rate']:.2e})")
    lines.append(f"held-out BLEU {summary['bleu']:.2f} on {summary['bleu_sentences']} sentences "
                 f"(beam {summary['bleu_beam_size']}; {summary['bleu_signature']})")
    return "\n".join(lines)


def _restores_global_policy(fn):
    """Run ``fn`` and put the caller's global dtype policy back afterwards (models keep their own)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        previous = keras.mixed_precision.global_policy()
        try:
            return fn(*args, **kwargs)
        finally:
            keras.mixed_precision.set_global_policy(previous)
    return wrapper


@_restores_global_policy
def train_translator(out, data=None, src_col=1, tgt_col=0, dev_data=None, preset=DEFAULT_PRESET, steps=None,
                     time_budget=None, batch_size=64, vocab_size=8000, max_length=40, warmup_steps=4000,
                     schedule="budget", peak_learning_rate=DEFAULT_PEAK_LEARNING_RATE,
                     warmup_fraction=DEFAULT_WARMUP_FRACTION, schedule_steps=None, label_smoothing=0.1,
                     dev_size=1000, max_pairs=None, eval_every=None, bleu_beam_size=1,
                     bleu_max_sentences=None, jit_compile="auto", mixed_precision=None, seed=0, verbose=1,
                     log=print):
    """Train (or resume) a translator in run directory ``out``; report held-out BLEU.

    With ``data=None`` it trains Spanish→English on the Tatoeba sample bundled in the package and scores
    the bundled held-out split. ``src_col``/``tgt_col`` are 0-based TSV columns. Training stops at
    ``steps`` (absolute: a resumed run continues to the same total) or after ``time_budget`` seconds.
    Returns a summary dict (steps, BLEU, timings, sample translations), also written to metrics.json.

    Learning rate (``schedule``): "budget" (default) is :class:`BudgetSchedule` -- linear warmup to
    ``peak_learning_rate`` over ``warmup_fraction`` of the run, linear decay to 0 at its last step -- fitted
    to ``schedule_steps``, else to ``steps``, else to the steps ``time_budget`` allows (timed on the first
    steps). "seed" is the seed's ``CustomSchedule(d_model, warmup_steps)``. A new run records the fitted
    total in config.json; a resumed run keeps the recorded schedule and stops at its end.
    """
    if steps is None and time_budget is None:
        raise ValueError("give steps or time_budget (or both)")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if mixed_precision:
        keras.mixed_precision.set_global_policy(mixed_precision)
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    (train_src, train_tgt), (dev_src, dev_tgt), (dev_sources, dev_refs) = _prepare_data(
        data, src_col, tgt_col, dev_data, dev_size, max_pairs, seed)
    log(f"data: {len(train_src)} training pairs, {len(dev_sources)} held-out source sentences "
        f"({'bundled Tatoeba sample' if data is None else data})")

    config_path = os.path.join(out, "config.json")
    src_vocab_path, tgt_vocab_path = (os.path.join(out, n) for n in ("src_vocab.txt", "tgt_vocab.txt"))
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
        log(f"resuming run in {out} (preset {config['preset']})")
    else:
        for texts, path in ((train_src, src_vocab_path), (train_tgt, tgt_vocab_path)):
            write_vocab(build_wordpiece_vocab(texts, vocab_size=vocab_size), path)
        config = None
    src_tok, tgt_tok = WordPieceTokenizer(src_vocab_path), WordPieceTokenizer(tgt_vocab_path)
    if config is None:
        model_config = get_preset(preset, input_vocab_size=src_tok.vocab_size, target_vocab_size=tgt_tok.vocab_size)
        config = {"family": "transformer_translator", "preset": preset, "model": dataclasses.asdict(model_config),
                  "data": {"path": data and os.path.abspath(data), "src_col": src_col, "tgt_col": tgt_col,
                           "max_length": max_length},
                  "train": {"batch_size": batch_size, "warmup_steps": warmup_steps, "label_smoothing": label_smoothing,
                            "seed": seed, "vocab_size": vocab_size, "schedule": schedule,
                            "peak_learning_rate": peak_learning_rate, "warmup_fraction": warmup_fraction,
                            "schedule_steps": schedule_steps or steps},
                  "kerasplm_version": kerasplm.__version__}
        _atomic_write_json(config_path, config)
    model_config = TransformerConfig(**config["model"])
    log(f"vocabularies: source {src_tok.vocab_size}, target {tgt_tok.vocab_size} WordPiece tokens; "
        f"{time.time() - t0:.1f}s")

    train_ds = make_translation_dataset(train_src, train_tgt, src_tok, tgt_tok, batch_size=batch_size,
                                        max_length=max_length, shuffle=True, seed=seed, repeat=True)
    dev_ds = make_translation_dataset(dev_src, dev_tgt, src_tok, tgt_tok, batch_size=batch_size,
                                      max_length=max_length, shuffle=False, drop_long=False)
    ls = config["train"]["label_smoothing"]
    lr_schedule = _make_schedule(config["train"], model_config.d_model)
    trainer = Trainer(
        model=lambda: Transformer.from_config_object(model_config, name=config["preset"]),
        optimizer=lambda: keras.optimizers.Adam(lr_schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        compute_loss=lambda m, b, training: translation_loss(m, b, training, label_smoothing=ls if training else 0.0),
        jit_compile=jit_compile, checkpoint_dir=os.path.join(out, "checkpoints"), checkpoint_every=1000,
        log_dir=os.path.join(out, "logs"), seed=seed, verbose=verbose)
    t_train = time.time()
    trainer.fit(train_ds, steps=0)  # builds the model and optimizer and restores the latest checkpoint
    first_step, train_config = trainer.step, config["train"]
    if isinstance(lr_schedule, BudgetSchedule):
        if not train_config.get("schedule_steps"):  # a new time-budgeted run: time it, then fit the schedule
            total, seconds_per_step = _fit_schedule_to_budget(trainer, train_ds, lr_schedule, time_budget)
            train_config.update(schedule_steps=total, seconds_per_step=seconds_per_step and round(seconds_per_step, 5))
            _atomic_write_json(config_path, config)
            log(f"timed {1 / seconds_per_step:.2f} steps/s: learning-rate schedule fitted to {total} steps"
                if seconds_per_step else f"the time budget ran out while timing the first steps (step {total})")
        elif steps is not None and steps > lr_schedule.total_steps:
            log(f"note: the learning rate reached 0 at step {lr_schedule.total_steps} (recorded schedule); "
                f"training stops there. Start a new run (or --schedule seed) to train longer.")
        steps = min(steps or lr_schedule.total_steps, lr_schedule.total_steps)
    remaining = None if time_budget is None else time_budget - (time.time() - t_train)
    stop_reason, before = trainer.stop_reason, trainer.step
    history = trainer.fit(train_ds, steps=steps, time_budget=remaining, eval_dataset=dev_ds,
                          eval_every=eval_every, log_every=50)
    if trainer.step > before or stop_reason == "steps":  # else the budget ran out while timing
        stop_reason = trainer.stop_reason
    train_seconds = time.time() - t_train
    _atomic_write_json(os.path.join(out, "history.json"), history)

    translator = Translator(trainer.model, src_tok, tgt_tok, config=config, step=trainer.step)
    sources, refs = dev_sources, dev_refs
    if bleu_max_sentences:
        sources, refs = sources[:bleu_max_sentences], refs[:bleu_max_sentences]
    t_dec = time.time()
    hyps = translator.translate(sources, beam_size=bleu_beam_size)
    bleu = corpus_bleu(hyps, refs)
    samples = dict(zip(SEED_SENTENCES, translator.translate(SEED_SENTENCES, beam_size=bleu_beam_size)))
    steps_this_run = trainer.step - first_step
    summary = {"step": trainer.step, "stop_reason": stop_reason, "train_seconds": round(train_seconds, 1),
               "steps_this_run": steps_this_run, "steps_per_second": round(steps_this_run / train_seconds, 3),
               "target_tokens_per_second": round(steps_this_run * batch_size
                                                 * _mean_target_tokens(tgt_tok, train_tgt) / train_seconds),
               "final_learning_rate": trainer.learning_rate, "schedule": _schedule_summary(lr_schedule, train_config),
               "bleu": round(bleu.score, 2), "bleu_signature": str(bleu), "bleu_sentences": len(sources),
               "bleu_beam_size": bleu_beam_size, "decode_seconds": round(time.time() - t_dec, 1),
               "final_loss": history["loss"][-1] if history.get("loss") else None,
               "eval_loss": history["eval_loss"][-1] if history.get("eval_loss") else None,
               "samples": samples,
               "dev_examples": [{"source": s, "translation": h, "references": r}
                                for s, h, r in list(zip(sources, hyps, refs))[:10]]}
    _atomic_write_json(os.path.join(out, "metrics.json"), summary)
    log(_describe_run(summary, train_config, time_budget))
    for s, t in samples.items():
        log(f"  {s}  ->  {t}")
    trainer.close()
    summary["translator"] = translator
    return summary
