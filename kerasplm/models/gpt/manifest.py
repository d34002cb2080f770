"""GPT: the command-line face of the family, declared without TensorFlow.

``kerasplm train gpt``, ``finetune gpt-classifier``, ``generate``, ``score``, ``export generator``,
``convert gpt2``. Runs of families ``gpt`` (trained or converted) and ``gpt_classifier``.
"""
import dataclasses

from kerasplm.models.bert.manifest import BertClassifierOptions
from kerasplm.options import (SESSION, DecodingRequestOptions, ExportOptions, JobOptions, TrainingOptions,
                              WeightsDirectoryOptions, option)
from kerasplm.registry import Command

# GPT-1's input transformations (Radford et al. 2018, figure 1) that `finetune gpt-classifier` offers.
TASKS = ["classification", "entailment", "similarity"]


@dataclasses.dataclass(frozen=True)
class GPTOptions(TrainingOptions):
    """Options of the GPT language-modelling job (``train_gpt`` keywords, ``kerasplm train gpt`` flags)."""
    # data
    corpus: str = option(None, "UTF-8 plain-text training corpus (required), e.g. "
                               "../shared/data/tiny_shakespeare/input.txt", file=True, metavar="PATH")
    valid_corpus: str = option(None, "held-out text (default: the last --valid-fraction of --corpus)", file=True,
                               metavar="PATH")
    valid_fraction: float = option(0.1, "fraction of --corpus held out when no --valid-corpus", kind=float,
                                   minimum=0, maximum=1, exclusive_minimum=True, exclusive_maximum=True)
    max_chars: int = option(None, "read at most this many characters of each corpus file", kind=int, minimum=1)
    tokenizer: str = option(None, "an existing SentencePiece .model (default: train one on the corpus)",
                            file=True, metavar="MODEL")
    vocab_size: int = option(8000, "SentencePiece vocabulary size when training one", kind=int, minimum=261)
    # model
    preset: str = option("gpt_tiny", "model preset", choices="kerasplm.models.gpt.job:PRESET_NAMES")
    num_layers: int = option(None, "override the preset's number of blocks", kind=int, minimum=1)
    d_model: int = option(None, "override the preset's width (the FFN width becomes 4 × d_model)", kind=int,
                          minimum=1)
    num_heads: int = option(None, "override the preset's attention heads", kind=int, minimum=1)
    dropout: float = option(None, "override the preset's dropout (residual, embedding and attention)", kind=float,
                            minimum=0, maximum=1, exclusive_maximum=True)
    seq_len: int = option(None, "tokens per training window (default: min(256, the model's max positions))",
                          kind=int, minimum=2)
    # optimization
    batch_size: int = option(16, "windows per global batch", kind=int, minimum=1)
    learning_rate: float = option(6e-4, "peak learning rate", kind=float, minimum=0, exclusive_minimum=True)
    warmup_steps: int = option(100, "linear warmup steps (capped at decay_steps)", kind=int, minimum=0)
    decay_steps: int = option(None, "length of the cosine decay (default: --steps; needed with only "
                                    "--time-budget)", kind=int, minimum=1)
    weight_decay: float = option(0.1, "AdamW weight decay (Dense kernels only)", kind=float, minimum=0)
    # this invocation
    eval_max_windows: int = option(None, "evaluate on at most this many held-out windows", kind=int, minimum=1,
                                   scope=SESSION)
    sample_tokens: int = option(48, "tokens per sample generated after training (0: none)", kind=int, minimum=0,
                                scope=SESSION)


@dataclasses.dataclass(frozen=True)
class GPTClassifierOptions(BertClassifierOptions):
    """The BERT classifier job's options (data columns, batch, epochs, ...) with GPT-1's defaults and choices."""
    init: str = option(None, "GPT run directory to start from (kerasplm train gpt / convert gpt2)", metavar="RUN_DIR")
    task: str = option("classification", "GPT-1's input transformation: classification (start text extract), "
                                          "entailment (start premise delim hypothesis extract; --pair-col), "
                                          "similarity (both orders added; --pair-col)", choices=TASKS)
    max_length: int = option(None, "tokens per example, start/delim/extract included (default: 128, or the "
                                   "model's positions when fewer)", kind=int, minimum=3)
    learning_rate: float = option(6.25e-5, "peak learning rate (GPT-1: 6.25e-5)", kind=float, minimum=0,
                                  exclusive_minimum=True)
    warmup_fraction: float = option(0.002, "fraction of the steps with linear warmup (GPT-1: 0.002)", kind=float,
                                    minimum=0, maximum=1)
    lm_weight: float = option(0.5, "λ, the weight of the auxiliary language-modelling loss (0: none)", kind=float,
                              minimum=0)
    # Not an option here: GPT-1's head reads the final state of the extract token, so BERT's poolings do not apply.
    pooling: str = None

    def check(self):
        super().check()
        if self.task == "classification" and self.pair_col is not None:
            raise ValueError("task classification takes one text; use task entailment or similarity with pair_col")
        if self.task != "classification" and self.pair_col is None:
            raise ValueError(f"task {self.task} needs sentence pairs: give pair_col / --pair-col")


@dataclasses.dataclass(frozen=True)
class GenerateOptions(DecodingRequestOptions):
    """``kerasplm generate``: the prompts, the run, and a request's decoding options (temperature 0 = greedy)."""
    prompts: tuple = option((), "prompts (default: one per line on stdin)", positional=True, nargs="*")
    run: str = option(None, "GPT run directory (kerasplm train gpt / convert gpt2) or character RNN run (kerasplm "
                            "train char-rnn)", metavar="RUN_DIR", required=True)


@dataclasses.dataclass(frozen=True)
class ScoreOptions(JobOptions):
    """``kerasplm score``."""
    file: str = option(None, "text file, one sequence per line ('-' for stdin)", positional=True)
    run: str = option(None, "GPT or character RNN run directory", metavar="RUN_DIR", required=True)


@dataclasses.dataclass(frozen=True)
class GeneratorExportOptions(ExportOptions):
    """``kerasplm export generator``."""
    to: str = option("export/gpt", "model base path: the SavedModel goes to <to>/<version>/", metavar="DIR")
    max_new_tokens: int = option(32, "serving_default's length and the largest `generate` accepts", kind=int,
                                 minimum=1)
    max_prompt_tokens: int = option(None, "prompts keep their last N tokens (default: the rest of the model's "
                                    "context)", kind=int, minimum=1)
    jit_compile: bool = option(False, "XLA-compile the decoding loops: greedy decoding then takes the engine's "
                               "screened argmax, as in process (TF Serving on CPU needs "
                               "--xla_cpu_compilation_enabled)", const=True, choices=[True, False])



# The families whose public modules this one imports (the layering contracts check it).
BASES = ("bert",)
# Importing these registers the family's presets (kerasplm presets, get_preset).
PRESET_MODULES = ("kerasplm.models.gpt.causal_lm", "kerasplm.models.gpt.model",)
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.causal_lm": "kerasplm.models.gpt.causal_lm",
    "kerasplm.models.gpt": "kerasplm.models.gpt.model",
    "kerasplm.models.gpt_generator": "kerasplm.models.gpt.generator",
    "kerasplm.models.gpt_tasks": "kerasplm.models.gpt.classifier",
    "kerasplm.text.gpt_inputs": "kerasplm.models.gpt.preprocessor",
}
# Builders of this family"s runs of format 1-2 (kerasplm convert run).
LEGACY_BUILDERS = "kerasplm.models.gpt.legacy:BUILDERS"

COMMANDS = [
    Command("train", "gpt", "a GPT language model on a plain-text corpus", GPTOptions,
            "kerasplm.models.gpt.job:train_gpt",
            description="Train (or resume) a GPT language model on a UTF-8 text file with a SentencePiece BPE "
                        "vocabulary; reports held-out loss and perplexity. After SIGTERM it saves a checkpoint "
                        "and exits with status 143 (rerun the command to resume).",
            out_default="runs/gpt"),
    Command("finetune", "gpt-classifier", "GPT-1 fine-tuning: classification, entailment or similarity on a GPT run",
            GPTClassifierOptions, "kerasplm.models.gpt.classifier_job:finetune_gpt_classifier",
            description="Fine-tune a GPT run (--init: kerasplm train gpt / convert gpt2) as GPT-1 did: "
                        "start/delim/extract tokens, a linear head on the extract token, task loss + λ·LM loss. "
                        "Prints the dev accuracy, F1 and MCC and writes them to metrics.json. Rerun the same "
                        "command to resume."),
    Command("", "generate", "continue prompts with a GPT or character RNN run", GenerateOptions,
            "kerasplm.models.gpt.job:print_generations",
            description="Generate a continuation of each prompt (arguments, or one per line on stdin) with a "
                        "GPT run (trained or converted) or a character RNN run. Temperature 0 = greedy."),
    Command("", "score", "per-line log-likelihood and perplexity under a GPT run", ScoreOptions,
            "kerasplm.models.gpt.job:print_scores",
            description="Print, for each line of FILE ('-' = stdin), its log-likelihood in nats (given "
                        "<|endoftext|>), its token count and perplexity, tab-separated."),
    Command("export", "generator", "export a GPT or character RNN run (generate and score signatures)",
            GeneratorExportOptions,
            "kerasplm.models.gpt.export:export_generator_run",
            description="Export a GPT run (trained or converted) or a character RNN run as a SavedModel: "
                        "serving_default (greedy), "
                        "generate (sampling options) and score."),
    Command("convert", "gpt2", "a HuggingFace GPT-2 directory (config.json, model.safetensors)", WeightsDirectoryOptions,
            "kerasplm.models.gpt.convert:convert_gpt2_command",
            description="Convert a HuggingFace GPT-2 directory (save_pretrained: config.json and model.safetensors) "
                        "into a run directory."),
]
