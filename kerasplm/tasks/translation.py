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
from kerasplm.text import TranslatorPreprocessor, WordPieceTokenizer, build_wordpiece_vocab, write_vocab
from kerasplm.training import CustomSchedule, Trainer, fused_masked_cross_entropy

DEFAULT_PRESET = "transformer_seed"
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

    ``translate(texts, beam_size=1)`` returns one string per input. The
    :class:`kerasplm.text.TranslatorPreprocessor` (``self.preprocessor``) owns [START]/[END] and the source
    cut at the model's position limit; decoding is the cached, XLA-compiled search of
    :mod:`kerasplm.generation`.
    """

    def __init__(self, model, src_tokenizer, tgt_tokenizer, config=None, step=None):
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.preprocessor = TranslatorPreprocessor(src_tokenizer, tgt_tokenizer,
                                                   max_source_length=model.config.pe_input)
        self.config = config or {}
        self.step = step

    # Sources are padded to a multiple of this many tokens, so decoding compiles once per bucket.
    length_bucket = 16

    def encode(self, texts):
        """Source ids ``(batch, S)`` int64, 0-padded: ``[START] pieces [END]`` cut to the model's position limit
        (keeping [END]), S rounded up to a multiple of ``length_bucket`` (bounding recompiles of the decoder)."""
        ids = self.preprocessor.source_ids(tf.constant(list(texts), tf.string))
        longest = int(tf.reduce_max(ids.row_lengths())) if len(texts) else 1
        width = min(self.model.config.pe_input, -(-longest // self.length_bucket) * self.length_bucket)
        return ids.to_tensor(shape=[None, width])

    def translate_ids(self, src_ids, beam_size=1, **options):
        from kerasplm.generation import beam_search_decode, greedy_decode

        special = dict(start_id=self.preprocessor.start_id, end_id=self.preprocessor.end_id)
        if beam_size <= 1:
            return greedy_decode(self.model, src_ids, **special, **options)
        ids, _ = beam_search_decode(self.model, src_ids, beam_size=beam_size, **special, **options)
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
            decoded = self.preprocessor.detokenize_target(ids).numpy()
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
                     label_smoothing=0.1, dev_size=1000, max_pairs=None, eval_every=None, bleu_beam_size=1,
                     bleu_max_sentences=None, jit_compile="auto", mixed_precision=None, seed=0, verbose=1,
                     log=print):
    """Train (or resume) a translator in run directory ``out``; report held-out BLEU.

    With ``data=None`` it trains Spanish→English on the Tatoeba sample bundled in the package and scores
    the bundled held-out split. ``src_col``/``tgt_col`` are 0-based TSV columns. Training stops at
    ``steps`` (absolute: a resumed run continues to the same total) or after ``time_budget`` seconds.
    Returns a summary dict (steps, BLEU, timings, sample translations), also written to metrics.json.
    """
    if steps is None and time_budget is None:
        raise ValueError("give steps or time_budget (or both)")
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
            write_vocab(build_wordpiece_vocab(texts, vocab_size=vocab_size,
                                              reserved_tokens=TranslatorPreprocessor.special_tokens), path)
        config = None
    src_tok, tgt_tok = WordPieceTokenizer(src_vocab_path), WordPieceTokenizer(tgt_vocab_path)
    if config is None:
        model_config = get_preset(preset, input_vocab_size=src_tok.vocab_size, target_vocab_size=tgt_tok.vocab_size)
        config = {"family": "transformer_translator", "preset": preset, "model": dataclasses.asdict(model_config),
                  "data": {"path": data and os.path.abspath(data), "src_col": src_col, "tgt_col": tgt_col,
                           "max_length": max_length},
                  "train": {"batch_size": batch_size, "warmup_steps": warmup_steps, "label_smoothing": label_smoothing,
                            "seed": seed, "vocab_size": vocab_size},
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
    trainer = Trainer(
        model=lambda: Transformer.from_config_object(model_config, name=config["preset"]),
        optimizer=lambda: keras.optimizers.Adam(CustomSchedule(model_config.d_model, config["train"]["warmup_steps"]),
                                                beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        compute_loss=lambda m, b, training: translation_loss(m, b, training, label_smoothing=ls if training else 0.0),
        jit_compile=jit_compile, checkpoint_dir=os.path.join(out, "checkpoints"), checkpoint_every=1000,
        log_dir=os.path.join(out, "logs"), seed=seed, verbose=verbose)
    t_train = time.time()
    history = trainer.fit(train_ds, steps=steps, time_budget=time_budget, eval_dataset=dev_ds,
                          eval_every=eval_every, log_every=50)
    train_seconds = time.time() - t_train
    _atomic_write_json(os.path.join(out, "history.json"), history)
    log(f"trained to step {trainer.step} ({trainer.stop_reason}) in {train_seconds:.0f}s")

    translator = Translator(trainer.model, src_tok, tgt_tok, config=config, step=trainer.step)
    sources, refs = dev_sources, dev_refs
    if bleu_max_sentences:
        sources, refs = sources[:bleu_max_sentences], refs[:bleu_max_sentences]
    t_dec = time.time()
    hyps = translator.translate(sources, beam_size=bleu_beam_size)
    bleu = corpus_bleu(hyps, refs)
    samples = dict(zip(SEED_SENTENCES, translator.translate(SEED_SENTENCES, beam_size=bleu_beam_size)))
    summary = {"step": trainer.step, "stop_reason": trainer.stop_reason, "train_seconds": round(train_seconds, 1),
               "bleu": round(bleu.score, 2), "bleu_signature": str(bleu), "bleu_sentences": len(sources),
               "bleu_beam_size": bleu_beam_size, "decode_seconds": round(time.time() - t_dec, 1),
               "final_loss": history["loss"][-1] if history.get("loss") else None,
               "eval_loss": history["eval_loss"][-1] if history.get("eval_loss") else None,
               "samples": samples,
               "dev_examples": [{"source": s, "translation": h, "references": r}
                                for s, h, r in list(zip(sources, hyps, refs))[:10]]}
    _atomic_write_json(os.path.join(out, "metrics.json"), summary)
    log(f"held-out BLEU {bleu.score:.2f} on {len(sources)} sentences ({bleu})")
    for s, t in samples.items():
        log(f"  {s}  ->  {t}")
    trainer.close()
    summary["translator"] = translator
    return summary
