"""Train, reload and use the translator (the Transformer, or the RNN encoder-decoder of an RNN preset); the
``kerasplm train translator`` main job.

Its run directory has the format of :mod:`kerasplm.runs` (family ``transformer_translator``, or
``rnn_translator`` for an RNN preset,
task ``translation``), with the assets ``source_vocab`` = ``src_vocab.txt`` and ``target_vocab`` =
``tgt_vocab.txt`` (WordPiece vocabularies, reserved [PAD]=0 [UNK] [START] [END]). The job's options are
:class:`TranslatorOptions`, declared once for this Python API and the CLI's flags.

Example:
>>> summary = train_translator("runs/demo", steps=200)              # bundled Tatoeba data
>>> translator = load_translator("runs/demo")
>>> translator.translate(["¿Puedo tomar prestado este libro?"])
"""
import os
import sys
import time

import sacrebleu
import tensorflow as tf

from kerasplm.data import (group_references, make_translation_dataset, read_parallel_tsv, sample_path,
                           train_dev_split)
from kerasplm.models.translator.export import export_translator, load_and_translate
from kerasplm.generation.seq2seq import Seq2SeqDecoder
from kerasplm.models.translator.manifest import (BUNDLED_TRAIN, BUNDLED_VOCAB_MAX_SENTENCES, DEFAULT_PEAK_LEARNING_RATE,
                                         TranslatorOptions)
from kerasplm.jobs.job import Job, provisional_total_steps
from kerasplm.models.translator import presets as translators
from kerasplm.models.transformer.model import translation_loss
from kerasplm.runs import attach_run_info, load_run
from kerasplm.runs.serialization import attach_preprocessor
from kerasplm.text import TranslatorPreprocessor, WordPieceTokenizer, build_wordpiece_vocab, write_vocab
from kerasplm.training import BudgetSchedule, CustomSchedule
from kerasplm.training.optimizers import FusedAdam

# By default pre-LN presets (transformer_quick) get the "budget" schedule and the seed's post-LN blocks
# (transformer_seed) the seed's CustomSchedule (see kerasplm.models.translator.manifest.SCHEDULES).
DEFAULT_SCHEDULE = {"pre-LN": "budget", "post-LN": "seed", "rnn": "budget"}
FAMILY = "transformer_translator"
RNN_FAMILY = "rnn_translator"           # runs of an RNN preset (written as transformer_translator before)
FAMILIES = (FAMILY, RNN_FAMILY)
ASSETS = {"source_vocab": "src_vocab.txt", "target_vocab": "tgt_vocab.txt"}
SEED_SENTENCES = ["¿Puedo tomar prestado este libro?", "Hace mucho frío aquí.", "Esta es mi vida.",
                  "¿Todavía están en casa?", "Trata de averiguarlo."]


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

    def __init__(self, model, preprocessor=None):
        self.model = model
        self.preprocessor = preprocessor or model.preprocessor
        if self.preprocessor is None:
            raise ValueError("a Translator needs a TranslatorPreprocessor (the model has none attached)")
        self.decoder = Seq2SeqDecoder(model, self.preprocessor, length_bucket=self.length_bucket)
        run_info = getattr(model, "run_info", None)   # set by load_run and by the job
        self.config = run_info.config if run_info else {}
        self.step = run_info.step if run_info else None

    @property
    def src_tokenizer(self):
        return self.preprocessor.src_tokenizer

    @property
    def tgt_tokenizer(self):
        return self.preprocessor.tgt_tokenizer

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


def translator_preprocessor(src_tokenizer, tgt_tokenizer, model_config):
    """The translator's preprocessor for a model of ``model_config`` (the source cut at its position limit)."""
    return TranslatorPreprocessor(src_tokenizer, tgt_tokenizer,
                                  max_source_length=translators.max_source_length(model_config))


def load_translator(run_dir):
    """The :class:`Translator` of a run directory (:func:`kerasplm.runs.load_run`: the model, its preprocessor
    and its latest checkpoint). Raises :class:`kerasplm.runs.RunDirError` (a ValueError, one line naming the
    file) for a missing or damaged run file."""
    return Translator(load_run(run_dir, family=FAMILIES, what="a translator run (kerasplm train translator)"))


def _prepare_data(options):
    """Returns train (src, tgt) lists, dev (src, tgt) lists and dev (sources, reference lists)."""
    o = options
    if o.data is None:
        train_src, train_tgt = read_parallel_tsv(sample_path(BUNDLED_TRAIN[o.bundled_data]), src_col=1, tgt_col=0,
                                                 max_pairs=o.max_pairs)
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
    """"pre-LN", "post-LN" (Transformer blocks) or "rnn" (an RNN encoder-decoder): the key of the job's per-model
    defaults (schedule, peak learning rate)."""
    if not hasattr(model_config, "normalize_first"):
        return "rnn"
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


class TranslatorJob(Job):
    """``kerasplm train translator``: the seed's Transformer, or the RNN encoder-decoder of an RNN preset
    (``gru_bahdanau``, ``rnn_seq2seq``: :func:`kerasplm.models.translator.presets.model_class`), on a parallel corpus,
    scored with held-out BLEU."""

    family, task, options_class, what, result_key = FAMILY, "translation", TranslatorOptions, "translator", "translator"
    former_families = (RNN_FAMILY,)    # either family resumes; the preset decides which one the run records
    legacy_options = {"schedule": "seed", "bundled_data": "sample", "vocab_max_sentences": 0}
    checkpoint_every = 1000

    def build_data(self):
        o, run, t0 = self.options, self.run_dir, time.time()
        self.family = RNN_FAMILY if translators.is_recurrent(o.preset) else FAMILY
        if translators.is_recurrent(o.preset):
            # The Trainer XLA-compiles the forward pass alone; an RNN's recurrent loops (tf.scan, Keras' GRU) would
            # hand their TensorLists across to the backward pass outside XLA, which TensorFlow cannot do.
            if o.jit_compile is True:
                raise ValueError(f"jit_compile=True: preset {o.preset} (an RNN) trains without XLA (drop the option, "
                                 f"or pass --no-jit)")
            self.options = o = o.replace(jit_compile=False)
            if o.schedule == "seed":
                raise ValueError("schedule 'seed' is the Transformer's CustomSchedule (warmup scaled by d_model); an "
                                 "RNN preset trains with schedule 'budget'")
        (train_src, self.train_tgt), (dev_src, dev_tgt), self.dev_set = _prepare_data(o)
        self.log(f"data: {len(train_src)} training pairs, {len(self.dev_set[0])} held-out source sentences "
                 f"({f'bundled Tatoeba data: {o.bundled_data}' if o.data is None else o.data})")
        src_vocab_path, tgt_vocab_path = (run.file(n) for n in ASSETS.values())
        if self.resumed:
            stored = self.stored_model()
            self.model_config, self.preprocessor = stored.config, stored.preprocessor
            self.src_tok, self.tgt_tok = self.preprocessor.src_tokenizer, self.preprocessor.tgt_tokenizer
        else:
            cap = _vocab_max_sentences(o)
            learned = []
            for texts, path in ((train_src, src_vocab_path), (self.train_tgt, tgt_vocab_path)):
                if cap and len(texts) > cap:  # evenly spaced: Tatoeba is length-sorted
                    texts = texts[::-(-len(texts) // cap)]
                learned.append(build_wordpiece_vocab(texts, vocab_size=o.vocab_size,
                                                     reserved_tokens=TranslatorPreprocessor.special_tokens))
                if run.writer:   # a multi-worker job's other workers keep the vocabularies in memory
                    os.makedirs(self.out, exist_ok=True)
                    write_vocab(learned[-1], path)
            if not run.writer:
                src_vocab_path, tgt_vocab_path = learned
        if not self.resumed:
            self.src_tok, self.tgt_tok = WordPieceTokenizer(src_vocab_path), WordPieceTokenizer(tgt_vocab_path)
            rate = {} if o.dropout is None else {"rate": o.dropout}
            self.model_config = translators.get_preset(o.preset, input_vocab_size=self.src_tok.vocab_size,
                                                       target_vocab_size=self.tgt_tok.vocab_size, **rate)
            self.preprocessor = translator_preprocessor(self.src_tok, self.tgt_tok, self.model_config)
        self.log(f"vocabularies: source {self.src_tok.vocab_size}, target {self.tgt_tok.vocab_size} WordPiece "
                 f"tokens; {time.time() - t0:.1f}s")
        self.train_dataset = make_translation_dataset(train_src, self.train_tgt, self.src_tok, self.tgt_tok,
                                                      batch_size=o.batch_size, max_length=o.max_length,
                                                      shuffle=True, seed=o.seed, repeat=True)
        self.eval_dataset = make_translation_dataset(dev_src, dev_tgt, self.src_tok, self.tgt_tok,
                                                     batch_size=o.batch_size, max_length=o.max_length, shuffle=False,
                                                     drop_long=False)
        # The schedule and its length are recorded in the run, so that a resume keeps them.
        if not self.resumed:
            if o.schedule is None:
                o = o.replace(schedule=DEFAULT_SCHEDULE[_blocks(self.model_config)])
            if o.schedule == "budget" and o.schedule_steps is None and o.steps is not None:
                o = o.replace(schedule_steps=o.steps)
            self.options = o   # the run is valid: from now on this directory holds a run to resume
            self.write_config(o.preset, assets=ASSETS)
        self.lr_schedule = _make_schedule(o, self.model_config)
        self.schedule = self.lr_schedule if isinstance(self.lr_schedule, BudgetSchedule) else None

    def build_model(self):
        model = translators.build_model(self.model_config, name=self.config["preset"])
        return attach_preprocessor(model, self.preprocessor)

    def build_optimizer(self):
        return FusedAdam(self.lr_schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)

    def compute_loss(self, model, batch, training):
        # Inside an XLA-compiled forward pass shapes may not depend on the data: every position is projected there.
        return translation_loss(model, batch, training,
                                label_smoothing=self.options.label_smoothing if training else 0.0,
                                real_tokens_only=not self.trainer.jit_compile)

    def result(self, trainer):
        return Translator(attach_run_info(trainer.model, self.run_dir.path, self.config, trainer.step), self.preprocessor)

    def evaluate(self, trainer, summary):
        o, seconds = self.options, max(summary["train_seconds"], 1e-9)
        summary.update({"steps_per_second": round(summary["steps_this_run"] / seconds, 3),
                        "target_tokens_per_second": round(summary["steps_this_run"] * o.batch_size
                                                          * _mean_target_tokens(self.tgt_tok, self.train_tgt)
                                                          / seconds),
                        "final_learning_rate": float(trainer.learning_rate),
                        "schedule": _schedule_summary(self.lr_schedule, o)})
        self.samples = {}
        if o.bleu_max_sentences == 0:  # 0: no BLEU (a quick run, a resume check)
            return
        translator = self.result(trainer)
        sources, refs = self.dev_set
        if o.bleu_max_sentences:
            sources, refs = sources[:o.bleu_max_sentences], refs[:o.bleu_max_sentences]
        t_dec = time.time()
        hyps = translator.translate(sources, beam_size=o.bleu_beam_size)
        bleu = corpus_bleu(hyps, refs)
        self.samples = dict(zip(SEED_SENTENCES, translator.translate(SEED_SENTENCES, beam_size=o.bleu_beam_size)))
        summary.update({"bleu": round(bleu.score, 2), "bleu_signature": str(bleu), "bleu_sentences": len(sources),
                        "bleu_beam_size": o.bleu_beam_size, "decode_seconds": round(time.time() - t_dec, 1),
                        "samples": self.samples,
                        "dev_examples": [{"source": s, "translation": h, "references": r}
                                         for s, h, r in list(zip(sources, hyps, refs))[:10]]})

    def describe(self, summary):
        self.log(_describe_run(summary, self.options))
        for source, translation in self.samples.items():
            self.log(f"  {source}  ->  {translation}")

    def after(self, summary):
        export_to = self.options.export_to
        if export_to and export_to.lower() != "none" and self.run_dir.writer:
            path = export_translator(summary["translator"], export_to)
            summary["export"] = path
            self.log(f"exported SavedModel to {path}")
            for source, translation in zip(SEED_SENTENCES, load_and_translate(path, SEED_SENTENCES)):
                self.log(f"  [SavedModel] {source}  ->  {translation}")


def train_translator(out, options=None, log=print, **overrides):
    """Train (or resume) a translator in run directory ``out``; report held-out BLEU.

    ``options`` is a :class:`TranslatorOptions` (default: its defaults); keyword ``overrides`` replace
    single options (``train_translator(out, steps=200, preset="transformer_tiny")``). With ``data=None``
    it trains Spanish→English on the Tatoeba data bundled in the package (``bundled_data``: the whole corpus
    less the held-out sentences, or a 20,000-pair sample) and scores the bundled held-out split. Training
    stops at ``steps`` (absolute: a resumed run continues to the same total) or after ``time_budget``
    seconds, or on SIGTERM (then it returns right after the checkpoint, without BLEU). An existing run in
    ``out`` is resumed with its stored options; asking for different ones raises
    :class:`kerasplm.options.OptionsConflict`. Returns a summary dict (steps, BLEU, timings, sample
    translations; also written to metrics.json) whose "translator" is the trained :class:`Translator`;
    with ``export_to`` the trained model is also exported there (its path in "export").
    """
    return TranslatorJob(out, options, log, **overrides).run()


def print_translations(run, sentences=(), beam_size=1):
    """``kerasplm translate``: print the translation of each sentence (default: each line of stdin)."""
    sentences = list(sentences) or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not sentences:
        raise ValueError("no sentences to translate (give them as arguments or on stdin)")
    for translation in load_translator(run).translate(sentences, beam_size=beam_size):
        print(translation)
