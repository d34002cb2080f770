"""ELMo: the command-line face of the family, declared without TensorFlow.

``kerasplm train elmo``, ``finetune elmo-classifier``, ``export elmo``, ``convert elmo``. Runs of families
``elmo`` (trained or converted biLMs) and ``elmo_classifier``.
"""
import dataclasses
import os

from kerasplm.options import SESSION, ExportOptions, JobOptions, TrainingOptions, option
from kerasplm.registry import Command

# A WikiText directory given as --corpus: the first file trains, the second is held out.
WIKITEXT_FILES = ("wiki.valid.tokens", "wiki.test.tokens")


@dataclasses.dataclass(frozen=True)
class ElmoOptions(TrainingOptions):
    """Options of the biLM job (``train_elmo`` keywords and ``kerasplm train elmo`` flags)."""
    corpus: str = option(None, "text file, or a WikiText directory (wiki.valid.tokens trains, wiki.test.tokens "
                               "is held out)", metavar="PATH")
    heldout_fraction: float = option(0.05, "fraction of a text file's sentences held out (its end)", kind=float,
                                     minimum=0, maximum=1, exclusive_minimum=True, exclusive_maximum=True)
    max_sentences: int = option(None, "read at most this many sentences of each split", kind=int, minimum=1)
    preset: str = option("elmo_small", "model preset", choices="kerasplm.models.elmo.model:PRESETS")
    dropout: float = option(None, "override the preset's dropout (each LSTM layer's input and the softmax's)",
                            kind=float, minimum=0, maximum=1, exclusive_maximum=True)
    vocab_size: int = option(10000, "most frequent training words in the vocabulary (plus <S> </S> <UNK>)",
                             kind=int, minimum=1)
    window: int = option(20, "tokens per training window (bilm-tf's unroll_steps)", kind=int, minimum=2)
    batch_size: int = option(64, "windows per global batch", kind=int, minimum=1)
    num_sampled: int = option(8192, "negative samples of the sampled softmax in training (full softmax when "
                                    ">= the vocabulary)", kind=int, minimum=0)
    learning_rate: float = option(0.2, "Adagrad learning rate", kind=float, minimum=0, exclusive_minimum=True)
    eval_windows: int = option(None, "evaluate on at most this many held-out windows", kind=int, minimum=1,
                               scope=SESSION)

    def check(self):
        if self.corpus is None:
            return  # checked when the job runs (the defaults have no corpus)
        if not os.path.exists(self.corpus):
            raise ValueError(f"corpus {self.corpus}: no such file or directory")
        if os.path.isdir(self.corpus) and not all(os.path.isfile(os.path.join(self.corpus, f))
                                                  for f in WIKITEXT_FILES):
            raise ValueError(f"corpus {self.corpus}: a directory must hold {' and '.join(WIKITEXT_FILES)}")


@dataclasses.dataclass(frozen=True)
class ElmoClassifierOptions(TrainingOptions):
    """Options of ``finetune_elmo_classifier`` / ``kerasplm finetune elmo-classifier`` (declared once)."""
    train: str = option(None, "training examples (tab-separated)", file=True, metavar="TSV")
    dev: str = option(None, "held-out examples scored after training (tab-separated)", file=True, metavar="TSV")
    elmo: str = option(None, "ELMo run directory whose frozen biLM gives [x; ELMo] (kerasplm train/convert elmo)",
                       metavar="RUN_DIR")
    use_elmo: bool = option(True, "static word embeddings only (the baseline): no biLM", flag="--no-elmo",
                            const=False, choices=[True, False])
    elmo_at_output: bool = option(False, "also concatenate a second ELMo mix to the BiLSTM's output (the paper's "
                                         "option)", const=True, choices=[True, False])
    mix_layer_norm: bool = option(False, "layer-normalise each biLM layer before the mix (bilm-tf's option)",
                                  const=True, choices=[True, False])
    text_col: str = option("sentence", "column of the text: a header name or a 0-based index")
    label_col: str = option("label", "column of the label")
    header: bool = option(True, "the files have no header line (columns are then 0-based indices)",
                          flag="--no-header", const=False, choices=[True, False])
    max_vocab: int = option(20000, "most frequent training words kept", kind=int, minimum=1)
    min_count: int = option(1, "keep training words seen at least this often", kind=int, minimum=1)
    max_length: int = option(64, "tokens per sentence (longer ones are cut)", kind=int, minimum=1)
    embedding_dim: int = option(100, "static word embedding size", kind=int, minimum=1)
    lstm_units: int = option(64, "units of each direction of the task BiLSTM", kind=int, minimum=1)
    dropout: float = option(0.3, "dropout on the BiLSTM's input and on the pooled vector", kind=float, minimum=0,
                            maximum=1, exclusive_maximum=True)
    batch_size: int = option(32, "examples per batch", kind=int, minimum=1)
    learning_rate: float = option(1e-3, "Adam learning rate", kind=float, minimum=0, exclusive_minimum=True)
    max_examples: int = option(None, "read at most this many training examples", kind=int, minimum=1)
    eval_batch_size: int = option(128, "examples per batch when scoring --dev", kind=int, minimum=1, scope=SESSION)


# The exported SavedModel's caps on one call's work: every token comes back as L+2 vectors of 2P floats, so
# the answer grows with rows x longest sentence. 256 tokens is a long paragraph; 16,384 tokens per call is
# kerasplm serve's default chunk (64 rows) of sentences at that cap.
DEFAULT_EXPORT_MAX_TOKENS = 256
DEFAULT_EXPORT_MAX_BATCH_TOKENS = 64 * DEFAULT_EXPORT_MAX_TOKENS


@dataclasses.dataclass(frozen=True)
class ElmoExportOptions(ExportOptions):
    """``kerasplm export elmo``."""
    to: str = option("export/elmo", "model base path: the SavedModel goes to <to>/<version>/", metavar="DIR")
    max_tokens: int = option(DEFAULT_EXPORT_MAX_TOKENS, "most whitespace tokens per sentence the SavedModel "
                             "accepts; a longer sentence fails the call (INVALID_ARGUMENT, HTTP 400) before the "
                             "biLM runs", kind=int, minimum=1)
    max_batch_tokens: int = option(DEFAULT_EXPORT_MAX_BATCH_TOKENS, "most tokens per call, counted as the rows "
                                   "times the longest sentence (every row is padded to it): bounds the memory of "
                                   "one call, also under stock TF Serving, which does not split requests",
                                   kind=int, minimum=1)


@dataclasses.dataclass(frozen=True)
class ConvertElmoOptions(JobOptions):
    """``kerasplm convert elmo``."""
    options: str = option(None, "bilm-tf options.json", file=True, metavar="FILE", required=True)
    weights: str = option(None, "bilm-tf weights.hdf5", file=True, metavar="FILE", required=True)
    vocab: str = option(None, "vocabulary, one token per line", file=True, metavar="FILE", required=True)
    out: str = option(None, "the run directory to write (must not hold a run)", metavar="RUN_DIR", required=True)



# The families whose public modules this one imports (the layering contracts check it).
BASES = ()
# Importing these registers the family's presets (kerasplm presets, get_preset).
PRESET_MODULES = ("kerasplm.models.elmo.model",)
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.elmo": "kerasplm.models.elmo.model",
    "kerasplm.models.elmo_classifier": "kerasplm.models.elmo.classifier",
    "kerasplm.models.elmo_runs": "kerasplm.models.elmo.runs",
}
# Builders of this family"s runs of format 1-2 (kerasplm convert run).
LEGACY_BUILDERS = "kerasplm.models.elmo.legacy:BUILDERS"

COMMANDS = [
    Command("train", "elmo", "an ELMo biLM (character CNN + forward/backward LSTMs)", ElmoOptions,
            "kerasplm.models.elmo.job:train_elmo",
            description="Train an ELMo biLM on a text corpus and report held-out forward and backward perplexity.",
            out_default="runs/elmo"),
    Command("finetune", "elmo-classifier", "BiLSTM sentence classifier: static embeddings, with [x; ELMo] from a "
            "biLM run", ElmoClassifierOptions, "kerasplm.models.elmo.classifier_job:finetune_elmo_classifier",
            description="Train a BiLSTM sentence classifier on tab-separated examples with static word embeddings "
                        "and ELMo features of a frozen biLM (--elmo RUN_DIR; --no-elmo: the static baseline); "
                        "prints the dev accuracy, F1 and MCC and writes them to metrics.json. Rerun to resume."),
    Command("export", "elmo", "export an ELMo run", ElmoExportOptions, "kerasplm.models.elmo.export:export_elmo_run",
            description="Export an ELMo run: sentences in, per-token layers and mix out."),
    Command("convert", "elmo", "AllenNLP bilm-tf weights (options.json, weights.hdf5)", ConvertElmoOptions,
            "kerasplm.models.elmo.convert:convert_elmo_command",
            description="Convert bilm-tf's options.json + weights.hdf5 + vocabulary into a run directory."),
]
