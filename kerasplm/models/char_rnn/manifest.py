"""The character-level RNN language model: the command-line face of the family, declared without TensorFlow.

``kerasplm train char-rnn``. A ``char_rnn`` run is used by the GPT family's ``kerasplm generate``, ``score`` and
``export generator`` (one text generator for both kinds of language model).
"""
import dataclasses

from kerasplm.options import SESSION, TrainingOptions, option
from kerasplm.registry import Command


@dataclasses.dataclass(frozen=True)
class CharRNNOptions(TrainingOptions):
    """Options of the character-level RNN LM job (``train_char_rnn`` keywords, ``kerasplm train char-rnn`` flags)."""
    # data
    corpus: str = option(None, "UTF-8 plain-text training corpus (required), e.g. "
                               "../shared/data/tiny_shakespeare/input.txt", file=True, metavar="PATH")
    valid_corpus: str = option(None, "held-out text (default: the last --valid-fraction of --corpus)", file=True,
                               metavar="PATH")
    valid_fraction: float = option(0.1, "fraction of --corpus held out when no --valid-corpus", kind=float,
                                   minimum=0, maximum=1, exclusive_minimum=True, exclusive_maximum=True)
    max_chars: int = option(None, "read at most this many characters of each corpus file", kind=int, minimum=1)
    max_vocab: int = option(None, "keep at most this many tokens (3 special + the most frequent characters; the "
                                  "others become <unk>)", kind=int, minimum=4)
    # model
    preset: str = option("char_rnn_seed", "model preset", choices="kerasplm.models.char_rnn.model:PRESET_NAMES")
    cell: str = option(None, "override the preset's recurrent cell", choices=["gru", "lstm"])
    num_layers: int = option(None, "override the preset's number of recurrent layers", kind=int, minimum=1)
    units: int = option(None, "override the preset's hidden width", kind=int, minimum=1)
    embedding_dim: int = option(None, "override the preset's character embedding width (0: one-hot inputs)",
                                kind=int, minimum=0)
    dropout: float = option(None, "override the preset's dropout between recurrent layers", kind=float, minimum=0,
                            maximum=1, exclusive_maximum=True)
    seq_len: int = option(64, "characters per training window (truncated backpropagation through time; each window "
                              "starts from a zero state)", kind=int, minimum=2)
    # optimization
    batch_size: int = option(32, "windows per global batch", kind=int, minimum=1)
    learning_rate: float = option(2e-3, "Adam's learning rate (constant)", kind=float, minimum=0,
                                  exclusive_minimum=True)
    clip_norm: float = option(1.0, "clip gradients to this global norm (the seed's θ = 1)", kind=float, minimum=0,
                              exclusive_minimum=True)
    # this invocation
    eval_max_windows: int = option(None, "evaluate on at most this many held-out windows", kind=int, minimum=1,
                                   scope=SESSION)
    sample_chars: int = option(120, "characters per sample generated after training (0: none)", kind=int, minimum=0,
                               scope=SESSION)



# The families whose public modules this one imports (the layering contracts check it).
BASES = ("gpt",)
# Importing these registers the family's presets (kerasplm presets, get_preset).
PRESET_MODULES = ("kerasplm.models.char_rnn.model",)
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.char_rnn": "kerasplm.models.char_rnn.model",
}

COMMANDS = [
    Command("train", "char-rnn", "a character-level GRU/LSTM language model on a plain-text corpus", CharRNNOptions,
            "kerasplm.models.char_rnn.job:train_char_rnn",
            description="Train (or resume) a character-level RNN language model (GRU or LSTM) on a UTF-8 text "
                        "file; reports held-out perplexity and bits per character. Use the run with kerasplm "
                        "generate / score / export generator. After SIGTERM it saves a checkpoint and exits with "
                        "status 143 (rerun the command to resume).",
            out_default="runs/char_rnn"),
]
