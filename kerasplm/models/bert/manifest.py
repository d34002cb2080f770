"""BERT (and its variants): the command-line face of the family, declared without TensorFlow.

``kerasplm train bert|electra``; ``finetune bert-classifier|bert-tagger|bert-simcse|bert-sbert|bert-qa``; ``distill``;
``fill-mask``;
``export fill-mask|embedder|classifier|tagger|qa``; ``convert bert|distilbert|electra|roberta|albert``. Runs of families ``bert`` (pretrained or
converted), ``bert_classifier``, ``bert_tagger``, ``bert_simcse``, ``bert_sbert``, ``bert_qa``.
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
class ElectraPretrainingOptions(BertPretrainingOptions):
    """Options of ``train_electra`` / ``kerasplm train electra``: BERT pretraining's, with ELECTRA's presets."""
    preset: str = option("electra_small", "model preset: the discriminator's size (the generator's follows "
                                          "--generator-size)", choices="kerasplm.models.electra.model:PRESETS")
    sentence_task: str = option("none", "ELECTRA has no sentence-level objective: single segments of consecutive "
                                        "sentences", choices=["none"])
    generator_size: float = option(None, "generator hidden size, FFN size and heads as a fraction of the "
                                         "discriminator's (default: the preset's; the paper's 1/4 for small, 1/3 "
                                         "for base)", kind=float, minimum=0, exclusive_minimum=True, maximum=1)
    rtd_weight: float = option(50.0, "lambda: weight of the replaced-token-detection loss (mean over real tokens) "
                                     "against the generator's MLM loss (mean over masked pieces)", kind=float,
                               minimum=0)


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
class SimCSEOptions(FineTuningOptions):
    """Options of ``finetune_bert_simcse`` / ``kerasplm finetune bert-simcse`` (declared once)."""

    train: str = option(None, "plain-text file, one sentence per line (empty lines skipped)", file=True,
                        metavar="TXT")
    dev: str = option(None, "held-out sentences (one per line): uniformity and mean cosine at the end",
                      file=True, metavar="TXT")
    init: str = option(None, "BERT run directory to start from (kerasplm convert bert / train bert)",
                       metavar="RUN_DIR")
    pooling: str = option("cls", "sentence representation: [CLS] (the paper's) or the mean over tokens",
                          choices=["cls", "mean"])
    mlp: bool = option(True, "no dense+tanh layer on [CLS] during training (cls pooling only)", flag="--no-mlp",
                       const=False, choices=[True, False])
    temperature: float = option(0.05, "softmax temperature of the cosine similarities", kind=float, minimum=0,
                                exclusive_minimum=True)
    normalize: bool = option(True, "the exported embeddings are not L2-normalized", flag="--no-normalize",
                             const=False, choices=[True, False])
    max_length: int = option(32, "word pieces per sentence, [CLS]/[SEP] included", kind=int, minimum=3)
    length_bucket: int = option(None, LENGTH_BUCKET_HELP.format(length="--max-length"), kind=int, minimum=0)
    batch_size: int = option(64, "sentences per batch (each the others' negatives)", kind=int, minimum=2)
    learning_rate: float = option(3e-5, "peak learning rate (AdamW)", kind=float, minimum=0, exclusive_minimum=True)
    warmup_fraction: float = option(0.0, "share of the steps with linear warmup", kind=float, minimum=0, maximum=1)
    schedule_steps: int = option(None, SCHEDULE_STEPS_HELP, kind=int, minimum=0, exclusive_minimum=True)
    weight_decay: float = option(0.0, "AdamW weight decay (not on biases and LayerNorm)", kind=float, minimum=0)
    layer_decay: float = option(None, "layer-wise learning-rate decay factor (none: off)", kind=float, minimum=0,
                                maximum=1, exclusive_minimum=True)
    max_examples: int = option(None, "read at most this many training sentences", kind=int, minimum=2)


@dataclasses.dataclass(frozen=True)
class SentenceBertOptions(FineTuningOptions):
    """Options of ``finetune_bert_sbert`` / ``kerasplm finetune bert-sbert`` (declared once)."""

    train: str = option(None, "tab-separated examples, no header: sentence1, sentence2, label (classification); "
                              "sentence1, sentence2, score (regression); anchor, positive, negative (triplet)",
                        file=True, metavar="TSV")
    dev: str = option(None, "held-out examples (same columns) scored at the end: accuracy (classification, "
                            "triplet), Spearman and Pearson of the cosine against the score (regression)",
                      file=True, metavar="TSV")
    init: str = option(None, "BERT run directory to start from (kerasplm convert bert / train bert)",
                       metavar="RUN_DIR")
    objective: str = option("classification", "softmax over (u, v, |u-v|), MSE of cos(u, v) against the score, or "
                            "the triplet margin loss", choices="kerasplm.models.sentence_embedding.sbert:OBJECTIVES")
    pooling: str = option("mean", "sentence vector: [CLS], or the mean or max over the real tokens",
                          choices="kerasplm.models.bert.classifier:POOLINGS")
    margin: float = option(1.0, "triplet objective: margin of max(||a-p|| - ||a-n|| + margin, 0)", kind=float,
                           minimum=0, exclusive_minimum=True)
    score_scale: float = option(1.0, "regression: gold scores lie in [0, SCALE] and are divided by it (STS-B: 5)",
                                kind=float, minimum=0, exclusive_minimum=True, metavar="SCALE")
    header: bool = option(False, "the files' first line is a header (skipped)", flag="--header", const=True,
                          choices=[True, False])
    normalize: bool = option(True, "the exported embeddings are not L2-normalized", flag="--no-normalize",
                             const=False, choices=[True, False])
    max_length: int = option(128, "word pieces per sentence, [CLS]/[SEP] included", kind=int, minimum=3)
    length_bucket: int = option(None, LENGTH_BUCKET_HELP.format(length="--max-length"), kind=int, minimum=0)
    batch_size: int = option(16, "examples per batch (the paper's 16)", kind=int, minimum=1)
    epochs: float = option(1.0, "epochs over the training file (the paper's 1): the run's length without --steps, "
                                "and the most a --time-budget run trains",
                           kind=float, minimum=0, exclusive_minimum=True)
    learning_rate: float = option(2e-5, "peak learning rate (AdamW; the paper's 2e-5)", kind=float, minimum=0,
                                  exclusive_minimum=True)
    warmup_fraction: float = option(0.1, "share of the steps with linear warmup (the paper's 10%%)", kind=float,
                                    minimum=0, maximum=1)
    schedule_steps: int = option(None, SCHEDULE_STEPS_HELP, kind=int, minimum=0, exclusive_minimum=True)
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases and LayerNorm)", kind=float, minimum=0)
    layer_decay: float = option(None, "layer-wise learning-rate decay factor (none: off)", kind=float, minimum=0,
                                maximum=1, exclusive_minimum=True)
    max_examples: int = option(None, "read at most this many training examples", kind=int, minimum=1)
    eval_batch_size: int = option(128, "sentences per batch when scoring --dev", kind=int, minimum=1, scope=SESSION)


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
class DistillOptions(FineTuningOptions):
    """Options of ``distill`` / ``kerasplm distill``: a classifier or tagger run (the teacher) distilled into a
    smaller student run of the same family (kerasplm.models.distilbert.distillation)."""

    teacher: str = option(None, "the fine-tuned run to distil (finetune bert-classifier or bert-tagger)",
                          metavar="RUN_DIR")
    student_preset: str = option(None, "the student's shape (default with --student-init teacher: the teacher's, "
                                       "at half its depth)", choices="kerasplm.models.bert.backbone:PRESETS")
    student_layers: int = option(None, "the student's blocks (overrides the preset's depth)", kind=int, minimum=1)
    student_init: str = option("teacher", "teacher: the teacher's embeddings, every L_t/L_s-th block (DistilBERT's "
                                          "every other one), pooler and head (widths must match); random: fresh "
                                          "weights", choices=["teacher", "random"])
    temperature: float = option(2.0, "softmax temperature T of the soft targets (the soft loss is T²·KL)",
                                kind=float, minimum=0, exclusive_minimum=True)
    alpha: float = option(0.5, "weight of the hard-label loss: loss = alpha·hard + (1 − alpha)·soft", kind=float,
                          minimum=0, maximum=1)
    hidden_loss: bool = option(False, "add TinyBERT's MSE between mapped hidden states (a learned projection when "
                                      "the widths differ)", flag="--hidden-loss", const=True, choices=[True, False])
    attention_loss: bool = option(False, "add TinyBERT's MSE between mapped attention maps (equal head counts)",
                                  flag="--attention-loss", const=True, choices=[True, False])
    layer_map: str = option(None, "student:teacher block pairs of the intermediate losses, 0-based, e.g. 0:1,1:3 "
                                  "(default: uniform, student block i <-> teacher block ceil((i+1)·L_t/L_s) − 1)",
                            metavar="S:T,...")
    augment: float = option(0.0, "classifier: the fraction of training rows replaced by a variant the teacher "
                                 "labels (Tang et al. 2019: pieces masked with probability 0.1, then with "
                                 "probability 0.25 only a random n-gram of 1-5 pieces kept); those rows carry the "
                                 "soft targets only (0: off)", kind=float, minimum=0, maximum=1)
    train: str = option(None, "training examples: tab-separated (classifier) or CoNLL-2003 (tagger)", file=True,
                        metavar="FILE")
    dev: str = option(None, "held-out examples scored after training (as --train)", file=True, metavar="FILE")
    text_col: str = option("sentence", "classifier: column of the (first) text, a header name or a 0-based index")
    pair_col: str = option(None, "classifier: column of the second text of a pair")
    label_col: str = option("label", "classifier: column of the label")
    header: bool = option(True, "classifier: the files have no header line", flag="--no-header", const=False,
                          choices=[True, False])
    tag_scheme: str = option("iob2", "tagger: iob2 or iob1 tags", choices=["iob1", "iob2"])
    length_bucket: int = option(None, LENGTH_BUCKET_HELP.format(length="the teacher's length"), kind=int, minimum=0)
    sortish: int = option(None, "classifier: " + SORTISH_HELP, kind=int, minimum=0)
    batch_size: int = option(32, "examples per batch", kind=int, minimum=1)
    epochs: float = option(3.0, "epochs over the training file: the run's length without --steps, and the most a "
                                "--time-budget run trains",
                           kind=float, minimum=0, exclusive_minimum=True)
    learning_rate: float = option(5e-5, "peak learning rate (AdamW)", kind=float, minimum=0, exclusive_minimum=True)
    warmup_fraction: float = option(0.1, "fraction of the steps with linear warmup", kind=float, minimum=0, maximum=1)
    schedule_steps: int = option(None, SCHEDULE_STEPS_HELP, kind=int, minimum=0, exclusive_minimum=True)
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases and LayerNorm)", kind=float, minimum=0)
    layer_decay: float = option(None, "layer-wise learning-rate decay factor (none: off)", kind=float, minimum=0,
                                maximum=1, exclusive_minimum=True)
    dropout: float = option(0.1, "dropout before the student's head", kind=float, minimum=0, maximum=1,
                            exclusive_maximum=True)
    pooling: str = option(None, "classifier: the student's sentence vector, cls or mean (default: the teacher's)",
                          choices="kerasplm.models.bert.classifier:POOLINGS")
    max_examples: int = option(None, "classifier: read at most this many training examples", kind=int, minimum=1)
    eval_batch_size: int = option(128, "examples per batch when scoring --dev", kind=int, minimum=1, scope=SESSION)

    def check(self):
        if self.student_init == "random" and self.student_preset is None:
            raise ValueError("--student-init random needs --student-preset (the student's shape)")


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


@dataclasses.dataclass(frozen=True)
class EmbedderExportOptions(ExportOptions):
    """``kerasplm export embedder``."""
    pooling: str = option(None, "cls, mean or max pooling (default: the run's recorded sentence-transformers "
                          "pooling, else mean)", choices="kerasplm.models.bert.classifier:POOLINGS")
    normalize: bool = option(None, "L2-normalize the embeddings (default: as the run records, else yes)", kind=bool)
    sequence_length: int = option(None, "cap on tokens per text, [CLS]/[SEP] included (default: the run's "
                                  "max_seq_length, else the model's positions)", kind=int, minimum=3)
    whitening: str = option(None, "fit BERT-whitening (Su et al. 2021) on this corpus, one sentence per line, and "
                            "apply it in the export after the pooling, before the normalization", file=True,
                            metavar="CORPUS")
    whitening_dim: int = option(None, "whitened dimensions kept: the k of largest variance (default: all)", kind=int,
                                minimum=1, metavar="K")

    def check(self):
        if self.whitening_dim is not None and self.whitening is None:
            raise ValueError("option whitening_dim needs --whitening CORPUS")



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
    Command("train", "electra", "pretrain ELECTRA (generator MLM + replaced-token detection) on a plain-text corpus",
            ElectraPretrainingOptions, "kerasplm.models.electra.pretraining_job:train_electra",
            description="Pretrain ELECTRA from raw text (BERT's corpus formats): a small generator fills the masked "
                        "pieces with samples, the discriminator tells every token replaced or original; the run's "
                        "discriminator is a BERT backbone every fine-tuning job takes as --init. Resumes an "
                        "existing run in --out with its stored options.",
            out_default="runs/electra", default_time_budget=DEFAULT_TIME_BUDGET),
    Command("finetune", "bert-classifier", "sentence (pair) classification or regression on a BERT run",
            BertClassifierOptions, "kerasplm.models.bert.classifier_job:finetune_bert_classifier",
            description="Fine-tune a BERT run (--init) on tab-separated examples; prints the dev accuracy, F1 and "
                        "MCC and writes them to metrics.json. " + _RESUMABLE),
    Command("finetune", "bert-tagger", "BERT named-entity tagger on CoNLL-2003 files", TaggerOptions,
            "kerasplm.models.bert.tagger_job:finetune_bert_tagger",
            description="Fine-tune a BERT run (--init) on CoNLL-2003 files; prints the dev entity F1 (conlleval) "
                        "and writes it to metrics.json. " + _RESUMABLE),
    Command("finetune", "bert-simcse", "unsupervised SimCSE sentence embeddings on a BERT run", SimCSEOptions,
            "kerasplm.models.sentence_embedding.simcse_job:finetune_bert_simcse",
            description="Train sentence embeddings with unsupervised SimCSE (dropout noise, in-batch negatives) from "
                        "a BERT run (--init) on a text file, one sentence per line; export the run with `kerasplm "
                        "export embedder`. " + _RESUMABLE),
    Command("finetune", "bert-sbert", "Sentence-BERT: siamese / triplet sentence embeddings on a BERT run",
            SentenceBertOptions, "kerasplm.models.sentence_embedding.sbert_job:finetune_bert_sbert",
            description="Train sentence embeddings with Sentence-BERT (Reimers & Gurevych 2019) from a BERT run "
                        "(--init) on tab-separated pairs with a label (NLI: softmax over (u, v, |u-v|)) or a score "
                        "(STS: cosine regression), or on triplets (margin loss); cls, mean or max pooling; export "
                        "the run with `kerasplm export embedder`. " + _RESUMABLE),
    Command("finetune", "bert-qa", "extractive question answering (SQuAD v1.1 JSON) on a BERT run", BertQAOptions,
            "kerasplm.models.bert.question_answering_job:finetune_bert_qa",
            description="Fine-tune a BERT run (--init) on SQuAD v1.1 files; prints the held-out exact match and F1 "
                        "(--dev, or --holdout-fraction of --train's articles) and writes them to metrics.json. "
                        + _RESUMABLE),
    Command("", "distill", "distil a classifier or tagger run into a smaller student run", DistillOptions,
            "kerasplm.models.distilbert.distillation_job:distill", job=True,
            description="Train a student (--student-preset, --student-layers; from the teacher's every other block "
                        "or at random) on the teacher run's soft targets at --temperature mixed with the hard labels "
                        "by --alpha, optionally TinyBERT's hidden-state and attention losses. The student is an "
                        "ordinary run of the teacher's family: export and serve it like one. " + _RESUMABLE),
    Command("", "fill-mask", "predict the [MASK] tokens of texts with a pretraining run", FillMaskOptions,
            "kerasplm.models.bert.fill_mask:print_fill_mask",
            description="Print the top-k tokens and probabilities for every [MASK]."),
    Command("export", "fill-mask", "export a BERT pretraining run as a fill-mask model", FillMaskExportOptions,
            "kerasplm.models.bert.fill_mask:export_fill_mask_run",
            description="Export a fill-mask SavedModel (text with [MASK] -> top-k tokens)."),
    Command("export", "embedder", "export a BERT run as a sentence-embedding SavedModel", EmbedderExportOptions,
            "kerasplm.models.sentence_embedding.embedder_export:export_embedder_run",
            description="Export a BERT run (converted, pretrained or fine-tuned): `text` strings -> `embedding` "
                        "vectors, pooled and normalized as the run records; --whitening CORPUS fits BERT-whitening "
                        "on the corpus and applies it in graph."),
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
    Command("convert", "distilbert", "a HuggingFace DistilBERT directory", WeightsDirectoryOptions,
            "kerasplm.models.bert.convert_variants:convert_distilbert_command",
            description="Convert a HuggingFace DistilBERT directory (config.json, model.safetensors, vocab.txt) into "
                        "a BERT run directory (no token types; the pooler, which DistilBERT lacks, drawn fresh)."),
    Command("convert", "electra", "a HuggingFace ELECTRA discriminator or generator directory",
            WeightsDirectoryOptions, "kerasplm.models.bert.convert_variants:convert_electra_command",
            description="Convert a HuggingFace ELECTRA directory (config.json, model.safetensors, vocab.txt) into a "
                        "BERT run directory: the discriminator with its replaced-token-detection head, or the "
                        "generator as an MLM-only pretraining run."),
    Command("convert", "roberta", "a HuggingFace RoBERTa directory", WeightsDirectoryOptions,
            "kerasplm.models.bert.convert_variants:convert_roberta_command",
            description="Convert a HuggingFace RoBERTa directory (config.json, model.safetensors, vocab.json, "
                        "merges.txt) into a BERT run directory: byte-level BPE, <s> A </s></s> B </s>, positions "
                        "from padding_idx + 1; a RobertaForMaskedLM keeps its MLM head."),
    Command("convert", "albert", "a HuggingFace ALBERT directory", WeightsDirectoryOptions,
            "kerasplm.models.bert.convert_variants:convert_albert_command",
            description="Convert a HuggingFace ALBERT directory (config.json, model.safetensors, spiece.model) into a "
                        "BERT run directory: factorized embedding, one shared block, SentencePiece vocabulary; "
                        "AlbertForPreTraining / AlbertForMaskedLM keep their MLM (and SOP) heads."),
]
