"""Train, reload and use the Transformer translator; the ``kerasplm train translator`` main job.

Its run directory has the format of :mod:`kerasplm.tasks.run_dir` (family ``transformer_translator``,
task ``translation``), with the assets ``source_vocab`` = ``src_vocab.txt`` and ``target_vocab`` =
``tgt_vocab.txt`` (WordPiece vocabularies, reserved [PAD]=0 [UNK] [START] [END]). The job's options are
:class:`TranslatorOptions`, declared once for this Python API and the CLI's flags.

Example:
>>> summary = train_translator("runs/demo", steps=200)              # bundled Tatoeba data
>>> translator = load_translator("runs/demo")
>>> translator.translate(["¿Puedo tomar prestado este libro?"])
"""
import dataclasses
import os
import time

import sacrebleu
import tensorflow as tf

from kerasplm.data import (group_references, make_translation_dataset, read_parallel_tsv, sample_path,
                           train_dev_split)
from kerasplm.generation.seq2seq import Seq2SeqDecoder
from kerasplm.models.transformer import PRESETS, Transformer, TransformerConfig, get_preset
from kerasplm.tasks.job import (TrainingOptions, fit_recorded, fit_scheduled, open_run, provisional_total_steps,
                               restores_global_policy, training_summary)
from kerasplm.tasks.options import RUN, SESSION, option
from kerasplm.tasks.run_dir import RunDir
from kerasplm.text import (TranslatorPreprocessor, WordPieceTokenizer, build_wordpiece_vocab, read_vocab,
                           write_vocab)
from kerasplm.training import BudgetSchedule, CustomSchedule, Trainer, fused_masked_cross_entropy
from kerasplm.training.optimizers import FusedAdam

# The job's defaults (issue 10, measured in benchmarks/RESULTS.md): the transformer_quick preset (the seed's
# width, 2 pre-LN layers per stack, no dropout), 64 pairs per batch, the whole bundled Tatoeba corpus. The seed's
# own model is --preset transformer_seed (with --schedule seed for the seed's CustomSchedule too).
DEFAULT_PRESET = "transformer_quick"
DEFAULT_BATCH_SIZE = 64
DEFAULT_VOCAB_SIZE = 8000
# Learning-rate schedules: "budget" = BudgetSchedule fitted to the steps the run will make; "seed" = the seed's
# CustomSchedule(d_model, warmup_steps). By default pre-LN presets (transformer_quick) get "budget" and the
# seed's post-LN blocks (transformer_seed) the seed's schedule: on the 20-minute shared-corpus run the seed's
# model reached BLEU 30.05 under its own schedule against 26.02 under a budget schedule peaking at 1e-3
# (benchmarks/RESULTS.md, issue 10).
SCHEDULES = ("budget", "seed")
DEFAULT_SCHEDULE = {"pre-LN": "budget", "post-LN": "seed"}
# Peak of the budget schedule when --peak-learning-rate is not given: pre-LN blocks train stably at twice the
# rate that suits the seed's post-LN blocks (which plateaued at 2e-3 with batches of 64: RESULTS.md).
DEFAULT_PEAK_LEARNING_RATE = {"pre-LN": 2e-3, "post-LN": 1e-3}
DEFAULT_WARMUP_FRACTION = 0.1
FAMILY = "transformer_translator"
ASSETS = {"source_vocab": "src_vocab.txt", "target_vocab": "tgt_vocab.txt"}
# The training data when --data is not given (kerasplm/data/sample/, drawn by kerasplm/data/make_sample.py):
# "all" = the whole Tatoeba corpus less the held-out sentences (the default: at 165 s of training it scores
# 42.8 BLEU against 33.0 for the sample, the seed's five sentences all right; RESULTS.md, issue 10);
# "sample" = 20,000 short pairs (the default before). Both are scored on the same held-out split (spa-eng-dev.tsv).
BUNDLED_TRAIN = {"all": "spa-eng-all-train.tsv.gz", "sample": "spa-eng-train.tsv"}
# The WordPiece learner's time grows with its input (~40 s per language for the whole corpus): on the bundled
# data each vocabulary is learned from this many evenly spaced sentences unless --vocab-max-sentences says.
BUNDLED_VOCAB_MAX_SENTENCES = 30_000
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


class Translator:
    """A trained translator: tokenizers + model + decoding, all in TensorFlow.

    ``translate(texts, beam_size=1)`` returns one string per input. The
    :class:`kerasplm.text.TranslatorPreprocessor` (``self.preprocessor``) owns [START]/[END] and the source
    cut at the model's position limit (``model.max_source_length``); decoding is
    :class:`kerasplm.generation.Seq2SeqDecoder` (``self.decoder``: the cached, XLA-compiled search of
    :mod:`kerasplm.generation`), the same client as the exported SavedModel's.
    """

    # Sources are padded to a multiple of this many tokens, so decoding compiles once per bucket.
    length_bucket = 16

    def __init__(self, model, src_tokenizer, tgt_tokenizer, config=None, step=None):
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.preprocessor = TranslatorPreprocessor(src_tokenizer, tgt_tokenizer,
                                                   max_source_length=model.max_source_length)
        self.decoder = Seq2SeqDecoder(model, self.preprocessor, length_bucket=self.length_bucket)
        self.config = config or {}
        self.step = step

    def encode(self, texts):
        """Source ids ``(batch, S)`` int32, 0-padded: ``[START] pieces [END]`` cut to the model's position limit
        (keeping [END]), S rounded up to a multiple of ``length_bucket`` (bounding recompiles of the decoder)."""
        return self.decoder.encode(list(texts), length_bucket=self.length_bucket)[0]

    def translate_ids(self, src_ids, beam_size=1, **options):
        """Target ids ``[START] y_1 ... [END] 0 ...`` of source ids (``Seq2SeqDecoder.translate_ids``'s options)."""
        return self.decoder.translate_ids(src_ids, beam_size=beam_size, **options)[0]

    def translate(self, texts, beam_size=1, batch_size=64, **options):
        """Translate a list of source sentences; returns a list of str in input order (see
        :meth:`kerasplm.generation.Seq2SeqDecoder.translate`: batches of similar length, each result independent
        of its batch-mates; ``attention=True`` adds the cross-attention weights)."""
        return self.decoder.translate(texts, beam_size=beam_size, batch_size=batch_size,
                                      length_bucket=self.length_bucket, **options)


@dataclasses.dataclass(frozen=True)
class TranslatorOptions(TrainingOptions):
    """Options of the translator job (``train_translator`` keywords and ``kerasplm train translator`` flags).

    RUN options are stored in the run's config.json and kept on resume; SESSION options apply to one
    invocation (the common ones — steps, time budget, precision, XLA — come from
    :class:`kerasplm.tasks.job.TrainingOptions`). Adding an option is one line here (see
    :mod:`kerasplm.tasks.options`).
    """
    # data
    data: str = option(None, "tab-separated parallel corpus, .gz allowed (default: the bundled Tatoeba data, "
                       "see --bundled-data)", file=True, metavar="TSV")
    bundled_data: str = option("all", "bundled training data when --data is not given: 'all' = the whole Tatoeba "
                               "corpus less the held-out sentences (115,703 pairs), 'sample' = 20,000 short pairs",
                               choices=list(BUNDLED_TRAIN))
    src_col: int = option(1, "0-based source column", kind=int, minimum=0)
    tgt_col: int = option(0, "0-based target column", kind=int, minimum=0)
    dev_data: str = option(None, "held-out corpus (default: split off --data by source sentence)", file=True,
                           metavar="TSV")
    dev_size: int = option(1000, "held-out source sentences split off --data", kind=int, minimum=0, exclusive_minimum=True)
    max_pairs: int = option(None, "read at most this many pairs of --data", kind=int, minimum=0, exclusive_minimum=True)
    # model and training
    preset: str = option(DEFAULT_PRESET, "model preset", choices=lambda: sorted(PRESETS))
    dropout: float = option(None, "dropout rate of the model (default: the preset's: 0 for transformer_quick, "
                            "0.1 for transformer_seed)",
                            kind=float, minimum=0, maximum=1, exclusive_maximum=True)
    batch_size: int = option(DEFAULT_BATCH_SIZE, "sentence pairs per global batch", kind=int, minimum=0,
                             exclusive_minimum=True)
    vocab_size: int = option(DEFAULT_VOCAB_SIZE, "WordPiece vocabulary size per language", kind=int, minimum=0,
                             exclusive_minimum=True)
    vocab_max_sentences: int = option(None, "learn each vocabulary from at most this many training sentences, "
                                      "evenly spaced (the learner's time grows with the corpus; 0: all; default: "
                                      f"{BUNDLED_VOCAB_MAX_SENTENCES:,} on the bundled data, all of --data)",
                                      kind=int, minimum=0)
    max_length: int = option(40, "max tokens per sentence, [START]/[END] included", kind=int, minimum=3)
    schedule: str = option(None, "learning rate: 'budget' = linear warmup over --warmup-fraction of the run "
                           "to --peak-learning-rate, linear decay to 0 at its last step (fitted to --steps or "
                           "to the steps --time-budget allows); 'seed' = the seed's CustomSchedule (default: "
                           "'budget' for pre-LN presets such as transformer_quick, 'seed' for the seed's post-LN "
                           "blocks such as transformer_seed)", choices=list(SCHEDULES))
    peak_learning_rate: float = option(None, "peak learning rate of the budget schedule (default: "
                                       f"{DEFAULT_PEAK_LEARNING_RATE['pre-LN']:g} for pre-LN presets, "
                                       f"{DEFAULT_PEAK_LEARNING_RATE['post-LN']:g} for the seed's post-LN blocks)",
                                       kind=float, minimum=0, exclusive_minimum=True)
    warmup_fraction: float = option(DEFAULT_WARMUP_FRACTION, "warmup share of the budget schedule", kind=float,
                                    minimum=0, maximum=1)
    schedule_steps: int = option(None, "steps the budget schedule spans (default: --steps, else fitted to the "
                                 "time budget; recorded in the run)", kind=int, minimum=0, exclusive_minimum=True)
    warmup_steps: int = option(4000, "CustomSchedule warmup steps (--schedule seed)", kind=int, minimum=0,
                               exclusive_minimum=True)
    label_smoothing: float = option(0.1, "label smoothing ε of the training loss", kind=float, minimum=0,
                                    maximum=1, exclusive_maximum=True)
    # this invocation
    bleu_beam_size: int = option(1, "beam size for the BLEU evaluation", flag="--beam-size", kind=int, minimum=0, exclusive_minimum=True,
                                 scope=SESSION)
    bleu_max_sentences: int = option(None, "score BLEU on at most this many held-out sentences (0: no BLEU and no "
                                     "sample translations)", kind=int, minimum=0, scope=SESSION)

    def check(self):
        if self.src_col == self.tgt_col:
            raise ValueError(f"options src_col and tgt_col are both {self.src_col}")


def load_translator(run_dir):
    """Rebuild the translator of a run directory from its config, vocabularies and latest checkpoint.

    Raises :class:`kerasplm.tasks.run_dir.RunDirError` (a ValueError, one line naming the file) for a
    missing or damaged run file.
    """
    run = RunDir(run_dir)
    return load_translator_from_run(run, run.read_config(family=FAMILY, what="translator"))


def _model_config(run, config):
    try:
        return TransformerConfig(**config["model"])
    except (TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"'model' is not a valid TransformerConfig ({e})") from None


def _vocab_path(run, config, key, expected_size):
    """Path of vocabulary asset ``key``, checked against the model's vocabulary size."""
    path = run.asset(config, key)
    name = os.path.relpath(path, run.path)
    try:
        size = len(read_vocab(path))
    except UnicodeDecodeError as e:
        raise run.error(name, f"not UTF-8 text ({e.reason} at byte {e.start}); the file is damaged") from None
    if size != expected_size:
        raise run.error(name, f"{size} tokens, but the model was trained with {expected_size}; the file is "
                              f"damaged or from another run")
    return path


def load_translator_from_run(run, config):
    """The loader registered for family ``transformer_translator`` (see ``run_dir.load_run``)."""
    model_config = _model_config(run, config)
    src = WordPieceTokenizer(_vocab_path(run, config, "source_vocab", model_config.input_vocab_size))
    tgt = WordPieceTokenizer(_vocab_path(run, config, "target_vocab", model_config.target_vocab_size))
    model = Transformer.from_config_object(model_config, name=config["preset"])
    step = tf.Variable(0, dtype=tf.int64)
    run.restore(model=model, step=step)
    return Translator(model, src, tgt, config=config, step=int(step.numpy()))


def _prepare_data(options):
    """Returns train (src, tgt) lists, dev (src, tgt) lists and dev (sources, reference lists)."""
    o = options
    if o.data is None:
        train_src, train_tgt = read_parallel_tsv(sample_path(BUNDLED_TRAIN[o.bundled_data]), src_col=1, tgt_col=0)
        dev_src, dev_tgt = read_parallel_tsv(sample_path("spa-eng-dev.tsv"), src_col=1, tgt_col=0)
    else:
        src, tgt = read_parallel_tsv(o.data, src_col=o.src_col, tgt_col=o.tgt_col, max_pairs=o.max_pairs)
        if o.dev_data:
            train_src, train_tgt = src, tgt
            dev_src, dev_tgt = read_parallel_tsv(o.dev_data, src_col=o.src_col, tgt_col=o.tgt_col)
        else:
            distinct = len(set(src))
            if distinct < 2:
                raise ValueError(f"{o.data}: {distinct} distinct source sentence(s); holding some out for "
                                 f"evaluation needs at least 2 (or give a held-out corpus: dev_data / --dev-data)")
            split = train_dev_split(src, tgt, dev_size=min(o.dev_size, max(1, distinct // 10)), seed=o.seed)
            train_src, train_tgt, dev_src, dev_tgt = split
    dev_sources, dev_refs = group_references(dev_src, dev_tgt)
    return (train_src, train_tgt), (dev_src, dev_tgt), (dev_sources, dev_refs)


def _vocab_max_sentences(options):
    """The sentences each vocabulary is learned from at most (0: all): the option, else the bundled default."""
    if options.vocab_max_sentences is not None:
        return options.vocab_max_sentences
    return BUNDLED_VOCAB_MAX_SENTENCES if options.data is None else 0


def _blocks(model_config):
    """"pre-LN" or "post-LN": the key of the job's per-block defaults (schedule, peak learning rate)."""
    return "pre-LN" if model_config.normalize_first else "post-LN"


def _make_schedule(options, model_config):
    """The optimizer's learning-rate schedule for the job's options and model."""
    if options.schedule == "seed":
        return CustomSchedule(model_config.d_model, options.warmup_steps)
    peak = options.peak_learning_rate or DEFAULT_PEAK_LEARNING_RATE[_blocks(model_config)]
    total = options.schedule_steps or options.steps
    if total is None:  # fitted once the first steps are timed (job.fit_scheduled)
        total = provisional_total_steps(options.warmup_fraction)
    return BudgetSchedule(peak, total, warmup_fraction=options.warmup_fraction)


def _mean_target_tokens(tgt_tokenizer, tgt_texts, sample=2000):
    """Mean predicted target tokens per pair ([START] pieces [END], minus one) over an evenly spaced
    sample of pairs (corpora such as Tatoeba's are sorted by length)."""
    texts = list(tgt_texts[::max(1, len(tgt_texts) // sample)])
    lengths = tgt_tokenizer.tokenize(tf.constant(texts, tf.string)).row_lengths()
    return float(tf.reduce_mean(tf.cast(lengths, tf.float32))) + 1.0


def _schedule_summary(schedule, options):
    if isinstance(schedule, BudgetSchedule):
        return {"name": "budget", "peak_learning_rate": schedule.peak_learning_rate,
                "warmup_steps": (int(max(1, round(schedule.warmup_fraction * schedule.total_steps)))
                                 if schedule.warmup_fraction > 0 else 0),
                "total_steps": schedule.total_steps}
    return {"name": "seed", "warmup_steps": schedule.warmup_steps, "d_model": schedule.d_model}


def _describe_run(summary, options):
    """What the run did and why it ended there, in a few lines a user on a slow machine can read."""
    lines = [f"trained {summary['steps_this_run']} steps in {summary['train_seconds']:.0f}s "
             f"({summary['steps_per_second']:.2f} steps/s, ~{summary['target_tokens_per_second']:,} target tokens/s; "
             f"stopped by {summary['stop_reason']}), now at step {summary['step']}"]
    schedule = summary["schedule"]
    if schedule["name"] == "budget":
        lines.append(f"learning rate: warmup to {schedule['peak_learning_rate']:g} over {schedule['warmup_steps']} "
                     f"steps, linear decay to 0 at step {schedule['total_steps']}")
    else:
        lines.append(f"learning rate: the seed's CustomSchedule, warmup {schedule['warmup_steps']} steps "
                     f"(now {summary['final_learning_rate']:.2e})")
    if "bleu" in summary:
        lines.append(f"held-out BLEU {summary['bleu']:.2f} on {summary['bleu_sentences']} sentences "
                     f"(beam {summary['bleu_beam_size']}; {summary['bleu_signature']})")
    return "\n".join(lines)


@restores_global_policy
def train_translator(out, options=None, log=print, **overrides):
    """Train (or resume) a translator in run directory ``out``; report held-out BLEU.

    ``options`` is a :class:`TranslatorOptions` (default: its defaults); keyword ``overrides`` replace
    single options (``train_translator(out, steps=200, preset="transformer_tiny")``). With ``data=None``
    it trains Spanish→English on the Tatoeba data bundled in the package (``bundled_data``: the whole corpus
    less the held-out sentences, or a 20,000-pair sample) and scores the bundled held-out split. Training
    stops at ``steps`` (absolute: a resumed run continues to the same total) or after ``time_budget``
    seconds, or on SIGTERM (then it returns right after the checkpoint, without BLEU). An existing run in
    ``out`` is resumed with its stored options; asking for different ones raises
    :class:`kerasplm.tasks.options.OptionsConflict`. Returns a summary dict (steps, BLEU, timings, sample
    translations; also written to metrics.json) whose "translator" is the trained :class:`Translator`.
    """
    run, o, config, previous_history = open_run(out, FAMILY, TranslatorOptions, options, overrides,
                                                what="translator", check_config=_model_config,
                                                legacy_options={"schedule": "seed", "bundled_data": "sample",
                                                                "vocab_max_sentences": 0})
    t0 = time.time()
    (train_src, train_tgt), (dev_src, dev_tgt), (dev_sources, dev_refs) = _prepare_data(o)
    log(f"data: {len(train_src)} training pairs, {len(dev_sources)} held-out source sentences "
        f"({f'bundled Tatoeba data: {o.bundled_data}' if o.data is None else o.data})")

    src_vocab_path, tgt_vocab_path = (run.file(n) for n in ASSETS.values())
    if config is not None:
        log(f"resuming run in {out} (preset {config['preset']})")
        model_config = _model_config(run, config)
        src_vocab_path = _vocab_path(run, config, "source_vocab", model_config.input_vocab_size)
        tgt_vocab_path = _vocab_path(run, config, "target_vocab", model_config.target_vocab_size)
    else:
        os.makedirs(out, exist_ok=True)
        cap = _vocab_max_sentences(o)
        for texts, path in ((train_src, src_vocab_path), (train_tgt, tgt_vocab_path)):
            if cap and len(texts) > cap:  # evenly spaced: Tatoeba is length-sorted
                texts = texts[::-(-len(texts) // cap)]
            write_vocab(build_wordpiece_vocab(texts, vocab_size=o.vocab_size,
                                              reserved_tokens=TranslatorPreprocessor.special_tokens), path)
    src_tok, tgt_tok = WordPieceTokenizer(src_vocab_path), WordPieceTokenizer(tgt_vocab_path)
    if config is None:
        rate = {} if o.dropout is None else {"rate": o.dropout}
        model_config = get_preset(o.preset, input_vocab_size=src_tok.vocab_size, target_vocab_size=tgt_tok.vocab_size,
                                  **rate)
    log(f"vocabularies: source {src_tok.vocab_size}, target {tgt_tok.vocab_size} WordPiece tokens; "
        f"{time.time() - t0:.1f}s")

    train_ds = make_translation_dataset(train_src, train_tgt, src_tok, tgt_tok, batch_size=o.batch_size,
                                        max_length=o.max_length, shuffle=True, seed=o.seed, repeat=True)
    dev_ds = make_translation_dataset(dev_src, dev_tgt, src_tok, tgt_tok, batch_size=o.batch_size,
                                      max_length=o.max_length, shuffle=False, drop_long=False)
    # The schedule and its length are recorded in the run, so that a resume keeps them.
    if config is None and o.schedule is None:
        o = o.replace(schedule=DEFAULT_SCHEDULE[_blocks(model_config)])
    if config is None and o.schedule == "budget" and o.schedule_steps is None and o.steps is not None:
        o = o.replace(schedule_steps=o.steps)
    if config is None:  # the run is valid: from now on this directory holds a run to resume
        config = run.write_config(FAMILY, "translation", o.preset, dataclasses.asdict(model_config), o.stored(RUN),
                                  assets=ASSETS)
    lr_schedule = _make_schedule(o, model_config)
    trainer = Trainer(
        model=lambda: Transformer.from_config_object(model_config, name=config["preset"]),
        optimizer=lambda: FusedAdam(lr_schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        compute_loss=lambda m, b, training: translation_loss(m, b, training,
                                                             label_smoothing=o.label_smoothing if training else 0.0),
        jit_compile=o.jit_compile, checkpoint_dir=run.checkpoint_dir, checkpoint_every=1000,
        log_dir=run.log_dir, seed=o.seed, verbose=o.verbose)
    t_train = time.time()
    trainer.fit(train_ds, steps=0)  # builds the model and optimizer and restores the latest checkpoint
    first_step = trainer.step
    if isinstance(lr_schedule, BudgetSchedule):
        history, _ = fit_scheduled(run, trainer, previous_history, train_ds, o, lr_schedule, log, eval_dataset=dev_ds)
        config = run.read_config()   # a schedule fitted to the time budget is now part of the run's options
    else:
        history, _ = fit_recorded(run, trainer, previous_history, train_ds, o, eval_dataset=dev_ds,
                                  session_start_step=first_step)
    train_seconds = time.time() - t_train
    log(f"trained to step {trainer.step} ({trainer.stop_reason}) in {train_seconds:.0f}s")
    translator = Translator(trainer.model, src_tok, tgt_tok, config=config, step=trainer.step)
    summary = training_summary(trainer, history, train_seconds)
    if trainer.stop_reason == "sigterm":  # preemption: the grace period is short, skip BLEU
        log(f"stopped by SIGTERM; checkpoint saved at step {trainer.step}: run the same command to resume")
        trainer.close()
        summary["translator"] = translator
        return summary

    steps_this_run = trainer.step - first_step
    summary.update({"steps_this_run": steps_this_run,
                    "steps_per_second": round(steps_this_run / max(train_seconds, 1e-9), 3),
                    "target_tokens_per_second": round(steps_this_run * o.batch_size
                                                      * _mean_target_tokens(tgt_tok, train_tgt)
                                                      / max(train_seconds, 1e-9)),
                    "final_learning_rate": float(trainer.learning_rate),
                    "schedule": _schedule_summary(lr_schedule, o)})

    samples = {}
    if o.bleu_max_sentences != 0:  # 0: no BLEU (a quick run, a resume check)
        sources, refs = dev_sources, dev_refs
        if o.bleu_max_sentences:
            sources, refs = sources[:o.bleu_max_sentences], refs[:o.bleu_max_sentences]
        t_dec = time.time()
        hyps = translator.translate(sources, beam_size=o.bleu_beam_size)
        bleu = corpus_bleu(hyps, refs)
        samples = dict(zip(SEED_SENTENCES, translator.translate(SEED_SENTENCES, beam_size=o.bleu_beam_size)))
        summary.update({"bleu": round(bleu.score, 2), "bleu_signature": str(bleu), "bleu_sentences": len(sources),
                        "bleu_beam_size": o.bleu_beam_size, "decode_seconds": round(time.time() - t_dec, 1),
                        "samples": samples,
                        "dev_examples": [{"source": s, "translation": h, "references": r}
                                         for s, h, r in list(zip(sources, hyps, refs))[:10]]})
    run.write_json(run.METRICS, summary)
    log(_describe_run(summary, o))
    for s, t in samples.items():
        log(f"  {s}  ->  {t}")
    trainer.close()
    summary["translator"] = translator
    return summary
