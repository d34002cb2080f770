"""Distillation into a smaller BERT, and DistilBERT's weights: the command-line face of the family, declared
without TensorFlow.

``kerasplm distill``; ``convert distilbert``. A student is an ordinary run of its teacher's family
(``bert_classifier``, ``bert_tagger``); a converted DistilBERT is a ``bert`` run.
"""
import dataclasses

from kerasplm.models.bert.manifest import SCHEDULE_STEPS_HELP
from kerasplm.options import (LENGTH_BUCKET_HELP, SESSION, SORTISH_HELP, FineTuningOptions, WeightsDirectoryOptions,
                              option)
from kerasplm.registry import Command


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


# The families whose public modules this one imports (the layering contracts check it).
BASES = ("bert",)
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.distillation": "kerasplm.models.distilbert.distillation",
}

_RESUMABLE = "Rerun the same command to resume."
COMMANDS = [
    Command("", "distill", "distil a classifier or tagger run into a smaller student run", DistillOptions,
            "kerasplm.models.distilbert.distillation_job:distill", job=True,
            description="Train a student (--student-preset, --student-layers; from the teacher's every other block "
                        "or at random) on the teacher run's soft targets at --temperature mixed with the hard labels "
                        "by --alpha, optionally TinyBERT's hidden-state and attention losses. The student is an "
                        "ordinary run of the teacher's family: export and serve it like one. " + _RESUMABLE),
    Command("convert", "distilbert", "a HuggingFace DistilBERT directory", WeightsDirectoryOptions,
            "kerasplm.models.distilbert.convert:convert_distilbert_command",
            description="Convert a HuggingFace DistilBERT directory (config.json, model.safetensors, vocab.txt) into "
                        "a BERT run directory (no token types; the pooler, which DistilBERT lacks, drawn fresh)."),
]
