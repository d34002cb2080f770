"""BERT: the command-line face of the family, declared without TensorFlow.

``kerasplm train bert``; ``finetune bert-classifier|bert-tagger|bert-qa``; ``fill-mask``;
``export fill-mask|classifier|tagger|qa``; ``convert bert``. Runs of families ``bert`` (pretrained or converted),
``bert_classifier``, ``bert_tagger``, ``bert_qa``. The variants' families (``electra``, ``distilbert``, ``roberta``,
``albert``, ``sentence_embedding``) declare their own commands; their manifests import this one's option classes
and constants.
"""
import dataclasses

from kerasplm.options import (DEFAULT_LENGTH_BUCKET, DEFAULT_SORTISH, LENGTH_BUCKET_HELP, SESSION, SORTISH_HELP, ExportOptions,
                              FineTuningOptions, JobOptions, TrainingOptions, WeightsDirectoryOptions, option)
from kerasplm.registry import Command

DEFAULT_PRESET = "bert_tiny"
# The BERT classifier's peak learning rate without --learning-rate: the BERT paper's for a backbone as wide as
# BERT-base or wider, a larger one for a narrower backbone (small models fine-tune best at larger rates).
PAPER_PEAK_RATE, NARROW_BACKBONE_PEAK_RATE, BERT_BASE_WIDTH = 3e-5, 1e-4, 768
# `kerasplm train bert` with neither --steps nor --time-budget trains this many seconds.
DEFAULT_TIME_BUDGET = 330
SCHEDULE_STEPS_HELP = ("steps over which the learning rate decays to 0 (default: --steps; with --time-budget "
                       "alone, the steps the budget allows, timed on the first steps; recorded in the run)")


@dataclasses.dataclass(frozen=True)
class BertPretrainingOptions(TrainingOptions):
    """Options of the BERT pretraining job (``train_bert`` keywords and ``kerasplm train bert`` flags)."""
    # data
    corpus: str = option(None, "plain-text corpus: one sentence per line, blank line between documents; or "
                               "WikiText (*.tokens)", file=True, metavar="PATH")
    corpus_format: str = option("auto", "corpus layout", choices=["auto", "lines", "wikitext"])
    dev_corpus: str = option(None, "held-out corpus (default: documents split off --corpus)", file=True,
                             metavar="PATH")
    dev_documents: int = option(None, "documents of --corpus held out (default: 5%% of them, at least 1; 2 with NSP)", kind=int,
                                minimum=1)
    span_separator: str = option(None, "character separating given spans in the corpus (masking 'span')")
    # vocabulary and model
    vocab: str = option(None, "existing vocab.txt (default: learn a WordPiece vocabulary from --corpus)",
                        file=True, metavar="VOCAB")
    vocab_size: int = option(8000, "size of the learned WordPiece vocabulary", kind=int, minimum=10)
    preset: str = option(DEFAULT_PRESET, "model preset", choices="kerasplm.models.bert.backbone:PRESETS")
    dropout: float = option(None, "override the preset's dropout (hidden and attention)", kind=float, minimum=0,
                            maximum=1, exclusive_maximum=True)
    # instances and masking
    max_seq_length: int = option(128, "tokens per instance, [CLS]/[SEP] included", kind=int, minimum=8)
    max_predictions_per_seq: int = option(20, "masked pieces per instance at most", kind=int, minimum=1)
    mask_rate: float = option(0.15, "fraction of the masking units masked", kind=float, minimum=0,
                              exclusive_minimum=True, maximum=1)
    masking: str = option("token", "masking units", choices="kerasplm.data.pretraining:MASKING")
    max_ngram: int = option(3, "longest n-gram of masking 'ngram'", kind=int, minimum=1)
    static_masking: bool = option(False, "draw each instance's mask once (BERT's files) instead of every epoch",
                                  flag="--static-masking", const=True)
    sentence_task: str = option("nsp", "second objective: next-sentence, sentence-order or none",
                                choices="kerasplm.data.pretraining:SENTENCE_TASKS")
    short_seq_prob: float = option(0.1, "share of shorter instances", kind=float, minimum=0, maximum=1)
    # optimization
    batch_size: int = option(32, "instances per global batch", kind=int, minimum=1)
    learning_rate: float = option(1e-4, "peak learning rate", kind=float, minimum=0, exclusive_minimum=True)
    weight_decay: float = option(0.01, "AdamW weight decay (not on LayerNorm and biases)", kind=float, minimum=0)
    warmup_steps: int = option(None, "linear warmup steps (default: 10%% of --schedule-steps)", kind=int,
                               minimum=0)
    schedule_steps: int = option(None, "steps of the linear decay to 0 (default: the first session's --steps)",
                                 kind=int, minimum=1)

    def check(self):
        if self.masking == "span" and not self.span_separator:
            raise ValueError("masking 'span' needs span_separator (--span-separator): the spans come from the corpus")


@dataclasses.dataclass(frozen=True)
class BertClassifierOptions(FineTuningOptions):
    """Options of ``finetune_bert_classifier`` / ``kerasplm finetune bert-classifier`` (declared once)."""
    train: str = option(None, "training examples (tab-separated)", file=True, metavar="TSV")
    dev: str = option(None, "held-out examples scored after training (tab-separated)", file=True, metavar="TSV")
    init: str = option(None, "BERT run directory to start from (kerasplm convert bert / train bert)",
                       metavar="RUN_DIR")
    random_init: bool = option(False, "keep --init's architecture and tokenizer but draw fresh weights (the "
                                      "baseline without pretraining)", flag="--random-init", const=True,
                               choices=[True, False])
    text_col: str = option("sentence", "column of the (first) text: a header name or a 0-based index")
    pair_col: str = option(None, "column of the second text of a pair (none: single sentences)")
    label_col: str = option("label", "column of the label")
    header: bool = option(True, "the files have no header line (columns are then 0-based indices)",
                          flag="--no-header", const=False, choices=[True, False])
    task: str = option("classification", "classification (labels are names) or regression (numbers, MSE)",
                       choices=["classification", "regression"])
    max_length: int = option(128, "tokens per example, [CLS]/[SEP] included", kind=int, minimum=3)
    length_bucket: int = option(None, LENGTH_BUCKET_HELP.format(length="--max-length"), kind=int, minimum=0)
    sortish: int = option(None, SORTISH_HELP, kind=int, minimum=0)
    batch_size: int = option(32, "examples per batch", kind=int, minimum=1)
    epochs: float = option(3.0, "epochs over the training file: the run's length without --steps, and "
                                "the most a --time-budget run trains",
                           kind=float, minimum=0, exclusive_minimum=True)
    learning_rate: float = option(None, f"peak learning rate (default: the BERT paper's {PAPER_PEAK_RATE:g} for a "
                                        f"backbone as wide as BERT-base ({BERT_BASE_WIDTH}) or wider, "
                                        f"{NARROW_BACKBONE_PEAK_RATE:g} for a narrower one such as all-MiniLM-L6-v2 "
                                        "(384): small models fine-tune best at larger rates)",
                                  kind=float, minimum=0, exclusive_minimum=True)
    warmup_fraction: float = option(0.1, "fraction of the steps with linear warmup", kind=float, minimum=0, maximum=1)
    schedule_steps: int = option(None, SCHEDULE_STEPS_HELP, kind=int, minimum=0, exclusive_minimum=True)
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases and LayerNorm)", kind=float, minimum=0)
    layer_decay: float = option(None, "layer-wise learning-rate decay factor (e.g. 0.9; none: off)", kind=float,
                                minimum=0, maximum=1, exclusive_minimum=True)
    dropout: float = option(0.1, "dropout before the classification layer", kind=float, minimum=0, maximum=1,
                            exclusive_maximum=True)
    pooling: str = option(None, "sentence vector the head reads: cls (the paper's [CLS] pooler), mean or max (the "
                                "mean or maximum of the real tokens' final states); default: the pooling --init "
                                "records of its sentence-transformers model (mean for all-MiniLM-L6-v2: its "
                                "training never reached the [CLS] pooler), else cls",
                          choices="kerasplm.models.bert.classifier:POOLINGS")
    max_examples: int = option(None, "read at most this many training examples", kind=int, minimum=1)
    eval_batch_size: int = option(128, "examples per batch when scoring --dev", kind=int, minimum=1, scope=SESSION)

    def check(self):
        super().check()
        if self.pair_col is not None and self.pair_col == self.text_col:
            raise ValueError(f"options text_col and pair_col are both {self.text_col!r}")


@dataclasses.dataclass(frozen=True)
class TaggerOptions(FineTuningOptions):
    """Options of ``finetune_bert_tagger`` (keywords) and ``kerasplm finetune bert-tagger`` (flags)."""

    train: str = option(None, "CoNLL-2003 file to fine-tune on", file=True, metavar="CONLL")
    dev: str = option(None, "CoNLL-2003 file scored with entity F1 at the end", file=True, metavar="CONLL")
    init: str = option(None, "run directory of a pretrained BERT (kerasplm convert bert / train bert)",
                       metavar="RUN_DIR")
    tag_scheme: str = option("iob2", "tags the model learns: iob2 (B- at every entity start) or iob1 as shipped",
                             choices=["iob1", "iob2"])
    sequence_length: int = option(128, "word pieces per sentence, [CLS]/[SEP] included", kind=int, minimum=3)
    length_bucket: int = option(None, LENGTH_BUCKET_HELP.format(length="--sequence-length"), kind=int, minimum=0)
    batch_size: int = option(32, "sentences per batch", kind=int, minimum=0, exclusive_minimum=True)
    learning_rate: float = option(5e-5, "peak learning rate (AdamW)", kind=float, minimum=0,
                                  exclusive_minimum=True)
    warmup_fraction: float = option(0.1, "share of the steps with linear warmup", kind=float, minimum=0,
                                    maximum=1)
    schedule_steps: int = option(None, SCHEDULE_STEPS_HELP, kind=int, minimum=0, exclusive_minimum=True)
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases and LayerNorm)", kind=float, minimum=0)
    layer_decay: float = option(None, "layer-wise learning-rate decay factor (e.g. 0.9; none: off)", kind=float,
                                minimum=0, maximum=1, exclusive_minimum=True)
    dropout: float = option(0.1, "dropout before the tagging head", kind=float, minimum=0, maximum=1,
                            exclusive_maximum=True)
    crf: bool = option(False, "a linear-chain CRF over the word tags (Viterbi decoding)", flag="--crf", const=True,
                       choices=[True, False])


@dataclasses.dataclass(frozen=True)
class BertQAOptions(FineTuningOptions):
    """Options of ``finetune_bert_qa`` (keywords) and ``kerasplm finetune bert-qa`` (flags), declared once."""

    train: str = option(None, "SQuAD v1.1 JSON to fine-tune on", file=True, metavar="JSON")
    dev: str = option(None, "SQuAD v1.1 JSON scored with EM/F1 after training", file=True, metavar="JSON")
    holdout_fraction: float = option(None, "without --dev: hold out this fraction of --train's articles and score "
                                     "them (e.g. 0.2)", kind=float, minimum=0, maximum=1, exclusive_minimum=True,
                                     exclusive_maximum=True)
    init: str = option(None, "BERT run directory to start from (kerasplm convert bert / train bert)",
                       metavar="RUN_DIR")
    sequence_length: int = option(384, "pieces per window, [CLS]/[SEP] and the question included", kind=int,
                                  minimum=8)
    doc_stride: int = option(128, "context pieces between the starts of consecutive windows", kind=int, minimum=1)
    max_query_length: int = option(64, "question pieces kept", kind=int, minimum=1)
    max_answer_length: int = option(30, "longest answer in pieces", kind=int, minimum=1)
    n_best: int = option(20, "start and end candidates per window in span decoding", kind=int, minimum=1)
    batch_size: int = option(32, "windows per batch", kind=int, minimum=1)
    length_bucket: int = option(None, LENGTH_BUCKET_HELP.format(length="--sequence-length"), kind=int, minimum=0)
    epochs: float = option(3.0, "epochs over the training questions: the run's length without --steps, and "
                                "the most a --time-budget run trains",
                           kind=float, minimum=0, exclusive_minimum=True)
    learning_rate: float = option(5e-5, "peak learning rate (AdamW)", kind=float, minimum=0, exclusive_minimum=True)
    warmup_fraction: float = option(0.1, "fraction of the steps with linear warmup", kind=float, minimum=0, maximum=1)
    schedule_steps: int = option(None, SCHEDULE_STEPS_HELP, kind=int, minimum=0, exclusive_minimum=True)
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases and LayerNorm)", kind=float, minimum=0)
    layer_decay: float = option(None, "layer-wise learning-rate decay factor (e.g. 0.9; none: off)", kind=float,
                                minimum=0, maximum=1, exclusive_minimum=True)
    max_examples: int = option(None, "read at most this many training questions", kind=int, minimum=1)
    max_dev_examples: int = option(None, "score at most this many held-out questions (the first ones)", kind=int,
                                   minimum=1, scope=SESSION)
    eval_batch_size: int = option(32, "questions per batch when scoring", kind=int, minimum=1, scope=SESSION)

    def check(self):
        super().check()
        if self.max_query_length > self.sequence_length - 4:
            raise ValueError(f"max_query_length={self.max_query_length} leaves no context piece in windows of "
                             f"sequence_length={self.sequence_length} (at most sequence_length - 4)")
        if self.dev is not None and self.holdout_fraction is not None:
            raise ValueError("give either dev (a held-out file) or holdout_fraction (a split of train), not both")


@dataclasses.dataclass(frozen=True)
class FillMaskOptions(JobOptions):
    """``kerasplm fill-mask``."""
    texts: tuple = option((), 'texts containing [MASK], e.g. "the [MASK] sat on the mat"', positional=True,
                          nargs="+")
    run: str = option(None, "run directory written by `kerasplm train bert`", metavar="RUN_DIR", required=True)
    top_k: int = option(5, "tokens per mask", kind=int, minimum=1)


@dataclasses.dataclass(frozen=True)
class FillMaskExportOptions(ExportOptions):
    """``kerasplm export fill-mask``."""
    to: str = option("export/fill_mask", "model base path: the SavedModel goes to <to>/<version>/", metavar="DIR")
    top_k: int = option(5, "tokens per mask", kind=int, minimum=1)


@dataclasses.dataclass(frozen=True)
class ClassifierExportOptions(ExportOptions):
    """``kerasplm export classifier``."""
    ensemble_with: str = option(None, "another classifier run with the same labels (ULMFiT: the backward classifier "
                                "of a forward one): the export answers the average of both runs' probabilities",
                                metavar="RUN_DIR")


# The families whose public modules this one imports (the layering contracts check it).
BASES = ()
# Importing these registers the family's presets (kerasplm presets, get_preset).
PRESET_MODULES = ("kerasplm.models.bert.backbone",)
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.bert": "kerasplm.models.bert.backbone",
    "kerasplm.models.bert_pretraining": "kerasplm.models.bert.pretrainer",
    "kerasplm.models.bert_tasks": "kerasplm.models.bert.classifier",
    "kerasplm.models.bert_tagger": "kerasplm.models.bert.tagger",
    "kerasplm.models.bert_qa": "kerasplm.models.bert.question_answering",
    "kerasplm.models.bert_multiple_choice": "kerasplm.models.bert.multiple_choice",
}
# Builders of this family"s runs of format 1-2 (kerasplm convert run).
LEGACY_BUILDERS = "kerasplm.models.bert.legacy:BUILDERS"

_RESUMABLE = "Rerun the same command to resume."
COMMANDS = [
    Command("train", "bert", "pretrain BERT (MLM + NSP/SOP) on a plain-text corpus", BertPretrainingOptions,
            "kerasplm.models.bert.pretraining_job:train_bert",
            description="Pretrain a BERT from raw text (one sentence per line, blank line between documents; or "
                        "WikiText). Resumes an existing run in --out with its stored options.",
            out_default="runs/bert", default_time_budget=DEFAULT_TIME_BUDGET),
    Command("finetune", "bert-classifier", "sentence (pair) classification or regression on a BERT run",
            BertClassifierOptions, "kerasplm.models.bert.classifier_job:finetune_bert_classifier",
            description="Fine-tune a BERT run (--init) on tab-separated examples; prints the dev accuracy, F1 and "
                        "MCC and writes them to metrics.json. " + _RESUMABLE),
    Command("finetune", "bert-tagger", "BERT named-entity tagger on CoNLL-2003 files", TaggerOptions,
            "kerasplm.models.bert.tagger_job:finetune_bert_tagger",
            description="Fine-tune a BERT run (--init) on CoNLL-2003 files; prints the dev entity F1 (conlleval) "
                        "and writes it to metrics.json. " + _RESUMABLE),
    Command("finetune", "bert-qa", "extractive question answering (SQuAD v1.1 JSON) on a BERT run", BertQAOptions,
            "kerasplm.models.bert.question_answering_job:finetune_bert_qa",
            description="Fine-tune a BERT run (--init) on SQuAD v1.1 files; prints the held-out exact match and F1 "
                        "(--dev, or --holdout-fraction of --train's articles) and writes them to metrics.json. "
                        + _RESUMABLE),
    Command("", "fill-mask", "predict the [MASK] tokens of texts with a pretraining run", FillMaskOptions,
            "kerasplm.models.bert.fill_mask:print_fill_mask",
            description="Print the top-k tokens and probabilities for every [MASK]."),
    Command("export", "fill-mask", "export a BERT pretraining run as a fill-mask model", FillMaskExportOptions,
            "kerasplm.models.bert.fill_mask:export_fill_mask_run",
            description="Export a fill-mask SavedModel (text with [MASK] -> top-k tokens)."),
    Command("export", "classifier", "export a fine-tuned BERT, GPT or ULMFiT classifier run", ClassifierExportOptions,
            "kerasplm.export.classifier:export_classifier_run",
            description="Export a `kerasplm finetune bert-classifier`, `gpt-classifier` or `ulmfit-classifier` run: "
                        "`text` (and `text_pair` for a pair model) strings -> `probabilities` and `label` names; "
                        "--ensemble-with RUN_DIR averages the probabilities of a second classifier run (ULMFiT's "
                        "forward and backward models)."),
    Command("export", "tagger", "export a BERT tagger run", ExportOptions, "kerasplm.models.bert.tagger_export:export_tagger_run",
            description="Export a `finetune bert-tagger` run: text -> entity spans."),
    Command("export", "qa", "export a BERT question answering run", ExportOptions, "kerasplm.models.bert.question_answering_export:export_qa_run",
            description="Export a `finetune bert-qa` run: question + context strings -> answer, start/end character "
                        "offsets, score."),
    Command("convert", "bert", "a HuggingFace BERT directory or Google's BERT checkpoint", WeightsDirectoryOptions,
            "kerasplm.models.bert.convert:convert_bert_command",
            description="Convert a HuggingFace BERT directory (config.json, model.safetensors, vocab.txt) or "
                        "Google's layout (bert_config.json, bert_model.ckpt.*, vocab.txt) into a run directory."),
]
