"""The translator (the seed's Transformer, or the seeds' RNN encoder-decoder with or without Bahdanau attention: the
preset chooses): its command-line face, declared without TensorFlow.

``kerasplm train translator`` (:func:`kerasplm.models.translator.job.train_translator`), ``kerasplm translate``,
``kerasplm export translator``; runs of family ``transformer_translator``.
"""
import dataclasses

from kerasplm.options import SESSION, ExportOptions, JobOptions, TrainingOptions, option
from kerasplm.registry import Command

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
# Peak of the budget schedule when --peak-learning-rate is not given: pre-LN blocks train stably at twice the
# rate that suits the seed's post-LN blocks (which plateaued at 2e-3 with batches of 64: RESULTS.md).
# RNN presets: 4e-3, near the seed's 0.005 for its GRU encoder-decoders. gru_bahdanau on the bundled sample, a
# 1,500-step schedule, 400 steps: training loss 4.25 at 4e-3 against 4.78 at 1e-3 (2026-11-27).
DEFAULT_PEAK_LEARNING_RATE = {"pre-LN": 2e-3, "post-LN": 1e-3, "rnn": 4e-3}
DEFAULT_WARMUP_FRACTION = 0.1
# The training data when --data is not given (kerasplm/data/sample/, drawn by kerasplm/data/make_sample.py):
# "all" = the whole Tatoeba corpus less the held-out sentences (the default: at 165 s of training it scores
# 42.8 BLEU against 33.0 for the sample, the seed's five sentences all right; RESULTS.md, issue 10);
# "sample" = 20,000 short pairs (the default before). Both are scored on the same held-out split (spa-eng-dev.tsv).
BUNDLED_TRAIN = {"all": "spa-eng-all-train.tsv.gz", "sample": "spa-eng-train.tsv"}
# The WordPiece learner's time grows with its input (~40 s per language for the whole corpus): on the bundled
# data each vocabulary is learned from this many evenly spaced sentences unless --vocab-max-sentences says.
BUNDLED_VOCAB_MAX_SENTENCES = 30_000
# The default run on the bundled data must finish (train + BLEU + export) in under 10 minutes on 2 cores
# (7 min 8 s on the benchmark box: RESULTS.md, issue 10).
DEFAULT_TIME_BUDGET = 330


@dataclasses.dataclass(frozen=True)
class TranslatorOptions(TrainingOptions):
    """Options of the translator job (``train_translator`` keywords and ``kerasplm train translator`` flags).

    RUN options are stored in the run's config.json and kept on resume; SESSION options apply to one
    invocation (the common ones — steps, time budget, precision, XLA — come from
    :class:`kerasplm.jobs.job.TrainingOptions`). Adding an option is one line here (see
    :mod:`kerasplm.options`).
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
    max_pairs: int = option(None, "read at most this many training pairs (of --data, or of the bundled data)", kind=int,
                            minimum=0, exclusive_minimum=True)
    # model and training
    preset: str = option(DEFAULT_PRESET, "model preset: a Transformer (transformer_*) or an RNN encoder-decoder "
                         "(gru_bahdanau: GRU + Bahdanau attention; rnn_seq2seq: no attention)",
                         choices="kerasplm.models.translator.presets:PRESETS")
    dropout: float = option(None, "dropout rate of the model (default: the preset's: 0 for transformer_quick, "
                            "0.1 for transformer_seed, gru_bahdanau and rnn_seq2seq)",
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
                                       f"{DEFAULT_PEAK_LEARNING_RATE['post-LN']:g} for the seed's post-LN blocks, "
                                       f"{DEFAULT_PEAK_LEARNING_RATE['rnn']:g} for RNN presets)",
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
    export_to: str = option(None, "export the trained model to this model base path and print the SavedModel's "
                            "translations ('none': no export)", metavar="DIR", scope=SESSION)

    def check(self):
        if self.src_col == self.tgt_col:
            raise ValueError(f"options src_col and tgt_col are both {self.src_col}")


@dataclasses.dataclass(frozen=True)
class TranslateOptions(JobOptions):
    """``kerasplm translate``."""
    sentences: tuple = option((), "source sentences (default: one per line on stdin)", positional=True, nargs="*")
    run: str = option(None, "run directory written by `kerasplm train translator`", metavar="RUN_DIR",
                      required=True)
    beam_size: int = option(1, "1 = greedy", kind=int, minimum=1)


@dataclasses.dataclass(frozen=True)
class TranslatorExportOptions(ExportOptions):
    """``kerasplm export translator``."""
    to: str = option("export/translator", "model base path: the SavedModel goes to <to>/<version>/", metavar="DIR")
    max_beam_size: int = option(8, "largest beam size the `translate` signature accepts (one traced branch each)",
                                kind=int, minimum=1)
    jit_compile: bool = option(False, "XLA-compile the decoding loop (TF Serving on CPU then needs "
                               "--xla_cpu_compilation_enabled)", const=True, choices=[True, False])



# The families whose public modules this one imports (the layering contracts check it).
BASES = ("transformer", "rnn_seq2seq")
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.translators": "kerasplm.models.translator.presets",
}
# Builders of this family"s runs of format 1-2 (kerasplm convert run).
LEGACY_BUILDERS = "kerasplm.models.translator.legacy:BUILDERS"

COMMANDS = [
    Command("train", "translator", "the Transformer translator, or an RNN one (--preset gru_bahdanau, rnn_seq2seq; "
            "default: Spanish→English, bundled Tatoeba data)",
            TranslatorOptions, "kerasplm.models.translator.job:train_translator",
            description="Train the seed's Transformer translator (or, with --preset gru_bahdanau or rnn_seq2seq, the "
                        "seeds' GRU encoder-decoder with or without Bahdanau attention; RNN presets train without "
                        "XLA). With no --data it trains Spanish→English on the "
                        "Tatoeba corpus bundled in the package, reports held-out BLEU and exports a SavedModel. "
                        f"With neither --steps nor --time-budget it trains for {DEFAULT_TIME_BUDGET} seconds. After "
                        "SIGTERM it saves a checkpoint and exits with status 143 (rerun the command to resume).",
            out_default="runs/translator", default_time_budget=DEFAULT_TIME_BUDGET,
            cli_defaults={"export_to": "export/translator"}),
    Command("", "translate", "translate sentences with a trained run", TranslateOptions,
            "kerasplm.models.translator.job:print_translations",
            description="Translate sentences (arguments, or one per line on stdin)."),
    Command("export", "translator", "export a translator run", TranslatorExportOptions,
            "kerasplm.models.translator.export:export_translator_run",
            description="Export a translator run as a SavedModel taking raw strings."),
]

