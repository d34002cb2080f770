"""ULMFiT (Howard & Ruder 2018) on the AWD-LSTM: the command-line face of the family, declared without TensorFlow.

The three stages: ``kerasplm train ulmfit-lm`` (a general-domain language model), ``kerasplm finetune ulmfit-lm``
(the language model fine-tuned on target-domain text, discriminative rates and STLR by default), ``kerasplm finetune
ulmfit-classifier`` (concat pooling, BPT3C, gradual unfreezing; ``--backward`` models and a forward/backward
ensemble). Runs of families ``ulmfit_lm`` and ``ulmfit_classifier``; a classifier exports with ``kerasplm export
classifier``.
"""
import dataclasses

from kerasplm.options import SESSION, FineTuningOptions, option
from kerasplm.registry import Command

SCHEDULE_STEPS_HELP = ("steps the learning-rate schedule spans (default: --steps, or the steps of --epochs; with "
                       "--time-budget alone, the steps the budget allows, timed on the first steps; recorded)")


@dataclasses.dataclass(frozen=True)
class _LanguageModelOptions(FineTuningOptions):
    """What both language-model stages take."""
    corpus: str = option(None, "UTF-8 plain-text corpus, one line per paragraph or sentence (WikiText's *.tokens "
                               "read as they are)", file=True, metavar="PATH")
    valid_corpus: str = option(None, "held-out text for the perplexity (default: the last --valid-fraction of "
                                     "--corpus)", file=True, metavar="PATH")
    valid_fraction: float = option(0.1, "fraction of --corpus held out when no --valid-corpus", kind=float, minimum=0,
                                   maximum=1, exclusive_minimum=True, exclusive_maximum=True)
    max_chars: int = option(None, "read at most this many characters of each corpus file", kind=int, minimum=1)
    drop_mult: float = option(1.0, "multiply every dropout rate of the model by this (fastai's drop_mult)",
                              kind=float, minimum=0)
    bptt: int = option(70, "base length of the BPTT windows (each window: bptt w.p. 0.95 else bptt/2, then "
                           "N(base, 5); the learning rate scaled by length/bptt)", kind=int, minimum=5)
    batch_size: int = option(32, "parallel streams of the corpus (the state is carried along each)", kind=int,
                             minimum=1)
    epochs: float = option(1.0, "epochs over the corpus: the run's length without --steps, and the most a "
                                "--time-budget run trains",
                           kind=float, minimum=0, exclusive_minimum=True)
    warmup_fraction: float = option(0.1, "--schedule linear: fraction of the steps with linear warmup", kind=float,
                                    minimum=0, maximum=1)
    schedule_steps: int = option(None, SCHEDULE_STEPS_HELP, kind=int, minimum=0, exclusive_minimum=True)
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases)", kind=float, minimum=0)
    clip_norm: float = option(0.25, "clip gradients to this global norm (the AWD-LSTM's 0.25)", kind=float,
                              minimum=0, exclusive_minimum=True)
    eval_batch_size: int = option(10, "parallel streams of the held-out text", kind=int, minimum=1, scope=SESSION)

    def check(self):
        super().check()
        if self.distribute != "default":
            raise ValueError(f"--distribute {self.distribute}: the ULMFiT language model carries each stream's LSTM "
                             f"state from one BPTT window to the next in one process's variables, so it trains with "
                             f"--distribute default only")


@dataclasses.dataclass(frozen=True)
class ULMFiTLanguageModelOptions(_LanguageModelOptions):
    """``kerasplm train ulmfit-lm``: a general-domain AWD-LSTM language model."""
    schedule: str = option("stlr", "learning-rate schedule: linear (warmup, then linear decay to 0) or stlr "
                                   "(ULMFiT's slanted triangular)", choices=["linear", "stlr"])
    preset: str = option("awd_lstm", "model preset", choices="kerasplm.models.ulmfit.awd_lstm:PRESET_NAMES")
    embedding_dim: int = option(None, "override the preset's embedding width (the last LSTM's, tied)", kind=int,
                                minimum=1)
    hidden_dim: int = option(None, "override the preset's hidden LSTM width", kind=int, minimum=1)
    num_layers: int = option(None, "override the preset's number of LSTM layers", kind=int, minimum=1)
    max_vocab: int = option(60000, "keep at most this many words (4 special tokens included)", kind=int, minimum=5)
    min_count: int = option(2, "words seen fewer times become <unk>", kind=int, minimum=1)
    backward: bool = option(False, "train a backward language model (it reads the text from its end)",
                            flag="--backward", const=True, choices=[True, False])
    learning_rate: float = option(3e-3, "peak learning rate (Adam, β = 0.7, 0.99)", kind=float, minimum=0,
                                  exclusive_minimum=True)


@dataclasses.dataclass(frozen=True)
class ULMFiTFineTuneLMOptions(_LanguageModelOptions):
    """``kerasplm finetune ulmfit-lm``: the language model fine-tuned on target-domain text (the init run's
    vocabulary, grown by the target text's frequent words it lacks unless ``--extend-vocab 0``)."""
    init: str = option(None, "ulmfit-lm run to start from (kerasplm train ulmfit-lm)", metavar="RUN_DIR")
    extend_vocab: int = option(2, "add the target text's words seen at least this many times that the init "
                                  "vocabulary lacks (their vectors and output biases start at the init model's "
                                  "mean); 0: keep the init vocabulary, a word it lacks is <unk>", kind=int,
                               minimum=0, metavar="MIN_COUNT")
    max_vocab: int = option(60000, "--extend-vocab adds words up to this many in all (4 special tokens included)",
                            kind=int, minimum=5)
    backward: bool = option(None, "a backward model: the init run must be a backward language model (default: the "
                                  "init run's direction)", flag="--backward", const=True, choices=[True, False])
    schedule: str = option("stlr", "learning-rate schedule: linear or stlr (ULMFiT's slanted triangular)",
                           choices=["linear", "stlr"])
    discriminative_lr: float = option(2.6, "each layer group learns at the rate of the group above divided by this "
                                           "(ULMFiT: 2.6; 1: one rate for all)", kind=float, minimum=0,
                                      exclusive_minimum=True, metavar="FACTOR")
    learning_rate: float = option(4e-3, "peak learning rate of the top group (Adam, β = 0.7, 0.99)", kind=float,
                                  minimum=0, exclusive_minimum=True)
    drop_mult: float = option(0.3, "the dropout rates are the preset's times this, whatever the init run's "
                                   "were (ULMFiT's LM fine-tuning: 0.3)", kind=float, minimum=0)


@dataclasses.dataclass(frozen=True)
class ULMFiTClassifierOptions(FineTuningOptions):
    """``kerasplm finetune ulmfit-classifier``: ULMFiT's classifier on a (fine-tuned) ulmfit-lm run."""
    train: str = option(None, "training examples (tab-separated)", file=True, metavar="TSV")
    dev: str = option(None, "held-out examples scored after training (tab-separated)", file=True, metavar="TSV")
    init: str = option(None, "ulmfit-lm run to start from (kerasplm finetune ulmfit-lm / train ulmfit-lm); its "
                             "direction is the classifier's", metavar="RUN_DIR")
    backward: bool = option(None, "a backward model: the init run must be a backward language model (default: the "
                                  "init run's direction)", flag="--backward", const=True, choices=[True, False])
    text_col: str = option("sentence", "column of the text: a header name or a 0-based index")
    label_col: str = option("label", "column of the label")
    header: bool = option(True, "the files have no header line (columns are then 0-based indices)",
                          flag="--no-header", const=False, choices=[True, False])
    max_length: int = option(512, "words per text, <bos> included (the first ones)", kind=int, minimum=2)
    bptt: int = option(70, "BPT3C: a longer text is read in chunks of this many words, the state carried and the "
                           "pooling over every chunk", kind=int, minimum=2)
    batch_size: int = option(32, "examples per batch", kind=int, minimum=1)
    sortish: int = option(0, "sortish batches (fastai's SortishSampler): every run of this many batches' worth of "
                             "shuffled examples is sorted by length and cut into batches, shuffled in turn, so that "
                             "the LSTM runs few padded steps (a third faster on SST-2; 0: plain shuffled batches, "
                             "the default: the head's batch normalization then sees batches like the dev set's)",
                          kind=int, minimum=0)
    epochs: float = option(3.0, "epochs over the training file (with --gradual-unfreezing, one layer group thaws "
                                "per epoch): the run's length without --steps, and the most a --time-budget run "
                                "trains", kind=float, minimum=0, exclusive_minimum=True)
    schedule: str = option("stlr", "learning-rate schedule: linear or stlr (ULMFiT's slanted triangular)",
                           choices=["linear", "stlr"])
    discriminative_lr: float = option(2.6, "each layer group learns at the rate of the group above divided by this "
                                           "(ULMFiT: 2.6; 1: one rate for all)", kind=float, minimum=0,
                                      exclusive_minimum=True, metavar="FACTOR")
    gradual_unfreezing: bool = option(False, "train the head alone in the first epoch, then thaw one layer group per "
                                             "epoch from the top", flag="--gradual-unfreezing", const=True,
                                      choices=[True, False])
    learning_rate: float = option(1e-2, "peak learning rate of the head (Adam, β = 0.7, 0.99)", kind=float,
                                  minimum=0, exclusive_minimum=True)
    warmup_fraction: float = option(0.1, "--schedule linear: fraction of the steps with linear warmup", kind=float,
                                    minimum=0, maximum=1)
    schedule_steps: int = option(None, SCHEDULE_STEPS_HELP, kind=int, minimum=0, exclusive_minimum=True)
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases and BatchNorm)", kind=float, minimum=0)
    drop_mult: float = option(0.5, "the dropout rates are the preset's and the head's times this, whatever the "
                                   "language model's were (fastai's classifier: 0.5)", kind=float, minimum=0)
    head_units: int = option(50, "width of the head's hidden layer", kind=int, minimum=1)
    max_examples: int = option(None, "read at most this many training examples", kind=int, minimum=1)
    eval_batch_size: int = option(64, "examples per batch when scoring --dev", kind=int, minimum=1, scope=SESSION)
    ensemble_with: str = option(None, "a ulmfit-classifier run of the other direction: --dev is also scored with "
                                      "the average of both classifiers' probabilities", metavar="RUN_DIR",
                                scope=SESSION)



# The families whose public modules this one imports (the layering contracts check it).
BASES = ()
# Importing these registers the family's presets (kerasplm presets, get_preset).
PRESET_MODULES = ("kerasplm.models.ulmfit.awd_lstm",)
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.awd_lstm": "kerasplm.models.ulmfit.awd_lstm",
}

_RESUMABLE = "Rerun the same command to resume."
COMMANDS = [
    Command("train", "ulmfit-lm", "an AWD-LSTM language model on a plain-text corpus (ULMFiT's first stage)",
            ULMFiTLanguageModelOptions, "kerasplm.models.ulmfit.job:train_ulmfit_lm",
            description="Train an AWD-LSTM language model (Merity et al. 2018: DropConnect, locked and embedding "
                        "dropout, tied weights, variable-length BPTT windows) on a UTF-8 text file, e.g. WikiText-2; "
                        "reports the held-out perplexity. --backward trains a backward model. " + _RESUMABLE,
            out_default="runs/ulmfit_lm"),
    Command("finetune", "ulmfit-lm", "fine-tune an ulmfit-lm run on target-domain text (ULMFiT's second stage)",
            ULMFiTFineTuneLMOptions, "kerasplm.models.ulmfit.job:finetune_ulmfit_lm",
            description="Fine-tune a language model (--init) on unlabelled target-domain text with discriminative "
                        "learning rates and slanted triangular rates; reports the held-out perplexity. " + _RESUMABLE),
    Command("finetune", "ulmfit-classifier", "ULMFiT's classifier on an ulmfit-lm run (ULMFiT's third stage)",
            ULMFiTClassifierOptions, "kerasplm.models.ulmfit.job:finetune_ulmfit_classifier",
            description="Fine-tune ULMFiT's classifier (concat pooling, BPT3C, discriminative and slanted triangular "
                        "rates, --gradual-unfreezing) from a language-model run (--init) on tab-separated examples; "
                        "prints the dev accuracy, F1 and MCC (and, with --ensemble-with, those of the forward and "
                        "backward average); export it with kerasplm export classifier. " + _RESUMABLE),
]
