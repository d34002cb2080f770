"""Distil a fine-tuned classifier or tagger run into a smaller student run: ``kerasplm distill``.

    summary = distill("runs/sst2_student", teacher="runs/sst2_minilm", student_layers=3, train="sst2/train.tsv",
                      dev="sst2/dev.tsv", temperature=2.0, alpha=0.5, steps=2000)

The loss, the layer map, the projections and the two ways a student starts are
:mod:`kerasplm.models.distilbert.distillation`'s. The job is the fine-tuning job of the teacher's family
(:class:`~kerasplm.models.bert.classifier_job.BertClassifierJob`, :class:`~kerasplm.models.bert.tagger_job.BertTaggerJob`)
with :class:`DistillationJob` before it: the same data, schedule, optimizer and scoring, and a student run that is
an ordinary ``bert_classifier`` / ``bert_tagger`` run (``kerasplm export classifier|tagger`` and ``kerasplm serve``
take it as they take any). What the mixin changes:

* a new run starts from the teacher run (``--teacher``), not from a pretrained ``--init``: its tokenizer files are
  copied into the student run and its stored preprocessor rebuilt there (the student reads the teacher's token ids,
  so they share the vocabulary by construction; a resumed student whose vocabulary is not the teacher's is refused),
  its labels (and, for a classifier, its sentence-pair input and pooling) are the student's; the student's
  backbone is ``--student-preset`` / ``--student-layers`` (:func:`~kerasplm.models.distilbert.distillation.student_config`),
  its weights the teacher's every ``L_t / L_s``-th block (``--student-init teacher``) or fresh (``random``);
* the loss is :func:`~kerasplm.models.distilbert.distillation.distillation_loss_sums` (the Trainer reports its terms ``hard``,
  ``soft`` and, when asked for, ``hidden``, ``attention``), the teacher loaded once, frozen, run in inference mode;
* the projections of ``--hidden-loss`` between different widths are the Trainer's ``auxiliary`` layer: trained and
  checkpointed beside the student, no part of its model;
* the teacher is scored on ``--dev`` too (the summary's ``teacher``), so the report shows both.
"""
import os
import shutil

import keras
import tensorflow as tf

from kerasplm.models.distilbert.manifest import DistillOptions
from kerasplm.models.bert.classifier_job import BertClassifierJob
from kerasplm.models.bert.tagger_job import BertTagger, BertTaggerJob
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.distilbert.distillation import (Augmentation, DistillationProjections, DistillationSettings, augment_batch,
                                          check_same_vocabulary, distillation_loss_sums, init_from_teacher,
                                          parse_layer_map, student_config)
from kerasplm.models.presets import get_preset
from kerasplm.runs import RunDir, load_run
from kerasplm.runs.serialization import deserialize

__all__ = ["DistillOptions", "DistillationJob", "ClassifierDistillationJob", "TaggerDistillationJob", "distill"]

TEACHER_FAMILIES = {"bert_classifier": "a classifier run (kerasplm finetune bert-classifier)",
                    "bert_tagger": "a tagger run (kerasplm finetune bert-tagger)"}


class DistillationJob:
    """The mixin that makes a family's fine-tuning job a distillation job (see the module docstring); it comes
    before the job class: ``class ClassifierDistillationJob(DistillationJob, BertClassifierJob)``."""

    options_class = DistillOptions

    def __init__(self, out, options=None, log=print, **overrides):
        super().__init__(out, options, log, **overrides)
        self.teacher = self.settings = self.projections = None

    # ------------------------------------------------------------------ the teacher
    def load_teacher(self):
        o = self.options
        if o.teacher is None:
            raise ValueError("give the run to distil (teacher / --teacher)")
        teacher = load_run(o.teacher, family=self.family, what=TEACHER_FAMILIES[self.family])
        teacher.trainable = False   # no gradient, no optimizer slot
        self.check_teacher(teacher)
        return teacher

    def check_teacher(self, teacher):
        """Refuse a teacher this distillation cannot use (one line)."""

    def build_data(self):
        self.teacher = self.load_teacher()
        super().build_data()   # the family's: data, schedule, the new run (start_new_run) or the resumed one
        o, t_config = self.options, self.teacher.backbone.config
        check_same_vocabulary(self.teacher.preprocessor, self.preprocessor, teacher=f"the teacher {o.teacher}")
        layer_map = (parse_layer_map(o.layer_map, self.backbone_config.num_layers, t_config.num_layers)
                     if o.hidden_loss or o.attention_loss else [])
        if o.attention_loss and self.backbone_config.num_heads != t_config.num_heads:
            raise ValueError(f"--attention-loss compares attention maps head by head: the student has "
                             f"{self.backbone_config.num_heads} heads, the teacher {t_config.num_heads}")
        self.settings = DistillationSettings(o.temperature, o.alpha, o.hidden_loss, o.attention_loss,
                                             tuple(layer_map))

    def start_new_run(self):
        """The student run's files (the teacher's tokenizer assets), backbone config, starting backbone, labels and
        config.json record; returns its preprocessor (the teacher's, rebuilt over the copied files)."""
        o = self.options
        teacher_run = RunDir(o.teacher)
        teacher_config = teacher_run.read_config()
        assets = dict(teacher_config["assets"])
        if self.run_dir.writer:
            os.makedirs(self.out, exist_ok=True)
            for key, name in assets.items():
                shutil.copyfile(teacher_run.asset(teacher_config, key), self.run_dir.file(name))
        preprocessor = deserialize(teacher_config["preprocessor"], self.out)
        t_config = self.teacher.backbone.config
        preset = get_preset(o.student_preset) if o.student_preset else None
        from_teacher = o.student_init == "teacher"
        self.backbone_config = student_config(t_config, preset, o.student_layers, from_teacher=from_teacher)
        keras.utils.set_random_seed(o.seed)
        self.init_backbone = BertBackbone.from_config_object(self.backbone_config)
        self.labels = list(self.teacher.labels)
        self.new_student_settings()
        c = self.backbone_config
        self.log(f"student: {c.num_layers} blocks of width {c.hidden_size} ({self.init_backbone.count_params():,} "
                 f"weights; the teacher: {t_config.num_layers} of {t_config.hidden_size}, "
                 f"{self.teacher.backbone.count_params():,}), "
                 + ("starting from the teacher's blocks" if from_teacher else "fresh weights"))
        self.write_config(o.student_preset or "custom", assets=assets)
        return preprocessor

    def new_student_settings(self):
        """A family's checks and settings of a new student (before its config is recorded)."""

    def build_model(self):
        model = super().build_model()
        if not self.resumed and self.options.student_init == "teacher":
            chosen = init_from_teacher(model, self.teacher)
            self.log(f"student blocks copied from the teacher's blocks {chosen} (0-based), with its embeddings, "
                     f"pooler and head")
        return model

    # ------------------------------------------------------------------ the loss
    def auxiliary_model(self):
        s_width, t_width = self.backbone_config.hidden_size, self.teacher.backbone.config.hidden_size
        if self.options.hidden_loss and s_width != t_width:
            self.projections = DistillationProjections(s_width, t_width, self.backbone_config.initializer_range,
                                                       name="distillation_projections")
        return self.projections

    def compute_loss(self, model, batch, training):
        return distillation_loss_sums(model, self.teacher, batch, training, self.settings, self.projections)

    # ------------------------------------------------------------------ the report
    def teacher_result(self):
        return self.teacher

    def evaluate(self, trainer, summary):
        super().evaluate(trainer, summary)
        teacher = self.score(self.teacher_result())
        if teacher:
            summary["teacher"] = teacher

    def describe(self, summary):
        super().describe(summary)
        if "teacher" in summary:
            self.log("teacher: " + self.dev_report({**summary, **summary["teacher"]}))


class ClassifierDistillationJob(DistillationJob, BertClassifierJob):
    """``kerasplm distill`` of a ``bert_classifier`` run."""

    what = "BERT classifier (distilled)"

    def check_teacher(self, teacher):
        if teacher.is_regression:
            raise ValueError(f"{self.options.teacher}: a regression run; distillation takes a classifier's classes")

    def new_student_settings(self):
        o = self.options
        if self.pair_input != self.teacher.pair_input:
            raise ValueError(f"the teacher {o.teacher} was trained on sentence pairs: give --pair-col"
                             if self.teacher.pair_input else
                             f"the teacher {o.teacher} reads single sentences: give no --pair-col")
        if o.augment:   # refused before the new run is written
            if self.pair_input:
                raise ValueError("--augment masks and cuts single texts; it does not take sentence pairs (--pair-col)")
            mask_token_id(self.teacher.preprocessor)
        self.options = o.replace(pooling=o.pooling or self.teacher.pooling)

    def build_data(self):
        super().build_data()
        o = self.options
        if o.augment:
            self.train_dataset = augmented_batches(self.train_dataset, Augmentation(o.augment),
                                                   mask_token_id(self.preprocessor), self.preprocessor.pad_id, o.seed)
            self.log(f"augmentation: {o.augment:.0%} of the training rows replaced by masked / n-gram variants that "
                     f"carry the teacher's soft targets only")


class TaggerDistillationJob(DistillationJob, BertTaggerJob):
    """``kerasplm distill`` of a ``bert_tagger`` run."""

    what = "BERT tagger (distilled)"

    def build_data(self):
        if self.options.augment:
            raise ValueError("--augment is for classifier runs: a tagger's variants would need their tags re-aligned")
        super().build_data()

    def check_teacher(self, teacher):
        if teacher.crf is not None:
            raise ValueError(f"{self.options.teacher}: a CRF tagger; its tag distribution is not its emissions' "
                             f"softmax, so it has no soft targets to distil")

    def new_student_settings(self):
        unknown = sorted({tag for sentence in self.train for tag in sentence.tags} - set(self.labels))
        if unknown:
            raise ValueError(f"{self.options.train}: tag(s) {', '.join(unknown[:5])} not among the teacher's "
                             f"({', '.join(self.labels)})")

    def teacher_result(self):
        return BertTagger(self.teacher, self.preprocessor, self.labels)


def mask_token_id(preprocessor):
    """The id of the tokenizer's mask token (``[MASK]``, or RoBERTa's ``<mask>``)."""
    tokenizer = preprocessor.tokenizer
    for token in ("[MASK]", "<mask>"):
        if token in tokenizer.vocab:
            return tokenizer.token_to_id(token)
    raise ValueError("--augment masks pieces, but the teacher's vocabulary has no [MASK] or <mask> token")


def augmented_batches(train_dataset, augmentation, mask_id, pad_id, seed):
    """``train_dataset`` (a function returning the ``(inputs, labels)`` batches) -> a function returning
    ``(inputs, labels, hard-label weights)`` batches, some rows augmented (:func:`augment_batch`), batch ``k``'s with
    the stateless seed ``(seed, k)``: a resumed run that skips the batches it consumed sees the same rows."""

    def dataset():
        @tf.autograph.experimental.do_not_convert
        def augment(index, batch):
            inputs, labels = batch
            rows, augmented = augment_batch(inputs, tf.stack([tf.constant(seed, tf.int64), index]), augmentation,
                                            mask_id, pad_id)
            return rows, labels, 1.0 - augmented

        return train_dataset().enumerate().map(augment, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    return dataset


JOBS = {"bert_classifier": ClassifierDistillationJob, "bert_tagger": TaggerDistillationJob}


def _family(out, options, overrides):
    """The family of the run ``out`` (resumed), else of the teacher run."""
    run = RunDir(out)
    if run.exists():
        family = run.read_config()["family"]
        if family not in JOBS:
            raise run.error(run.CONFIG, f"a {family} run, not a distilled classifier or tagger run")
        return family
    teacher = overrides.get("teacher", getattr(options, "teacher", None))
    if teacher is None:
        raise ValueError("give the run to distil (teacher / --teacher)")
    teacher_run = RunDir(teacher)
    family = teacher_run.read_config()["family"]
    if family not in JOBS:
        raise teacher_run.error(teacher_run.CONFIG, f"a {family} run; distil {' or '.join(TEACHER_FAMILIES.values())}")
    return family


def distill(out, options=None, log=print, **overrides):
    """Distil (or resume distilling) the teacher run into a student run in ``out``; returns the summary (also
    ``metrics.json``): the training figures with each loss term, the student's ``dev`` figures and the teacher's
    (``teacher``), and the trained student under "classifier" or "tagger"."""
    return JOBS[_family(out, options, overrides)](out, options, log, **overrides).run()
