"""Fine-tune a BERT run on a sentence (pair) classification or regression task: ``kerasplm finetune bert-classifier``.

The recipe is the BERT paper's (section 4.1 and appendix A.3): the pooled ``[CLS]`` output, a dropout and one
dense layer; AdamW (weight decay 0.01, not on biases and LayerNorm, ε = 1e-6), learning rate 2e-5 … 5e-5 (3e-5
here) with linear warmup over 10% of the steps and linear decay to 0, 2–4 epochs, gradients clipped to norm 1.
The schedule spans ``--steps`` (else ``--epochs``); given ``--time-budget`` alone, the job times its first steps
and fits the schedule to the steps the budget allows (``--epochs``' worth at most), so the learning rate reaches
0 as the budget ends.
Optionally layer-wise learning-rate decay (ELECTRA, Clark et al. 2020, appendix A): a block ``k`` levels below
the head learns at ``lr · decay^k``. ``--random-init`` keeps the ``--init`` run's architecture and vocabulary but
draws fresh weights: the same job without pretraining, to measure what pretraining buys.

Data: tab-separated files, one example per line; ``--text-col``, ``--pair-col``, ``--label-col`` are column
names of the header line (``sentence``, ``label`` for GLUE's SST-2) or 0-based indices (with ``--no-header``).
The label names are those of the training file (sorted); the model's outputs follow that order, the exported
classifier answers with the names.

Run directory (:mod:`kerasplm.runs`): family ``bert_classifier``; ``model`` = the backbone's config,
``num_labels``, ``labels``, ``dropout``; asset ``vocab``; ``metrics.json`` = the training summary + ``dev``
(accuracy, F1, MCC; regression: MSE and Pearson's r). Resumable like every kerasplm job.

>>> summary = finetune_bert_classifier("runs/sst2", train="sst2/train.tsv", dev="sst2/dev.tsv",
...                                    init="runs/minilm", epochs=1)
>>> summary["dev"]["accuracy"]
"""
import dataclasses

import keras

from kerasplm.families.bert import BertClassifierOptions
from kerasplm.jobs.finetuning import BERT_ASSETS, ClassificationJob
# Their home is kerasplm.jobs.finetuning (the fine-tuning rail); importable from here as before.
from kerasplm.jobs.finetuning import LayerwiseAdamW, layer_decay_multiplier, read_classification_tsv
from kerasplm.models.bert import BertBackbone, BertConfig
from kerasplm.models.bert_tasks import POOLINGS, BertClassifier
from kerasplm.options import RUN
from kerasplm.runs import RunDir
from kerasplm.text.bert_tokenizer import BertPreprocessor, BertTokenizer

FAMILY = "bert_classifier"
__all__ = ["BertClassifierOptions", "BertClassifierJob", "finetune_bert_classifier", "load_bert_classifier",
           "load_bert_classifier_run", "LayerwiseAdamW", "layer_decay_multiplier", "read_classification_tsv"]


def _model_parts(run, config):
    model = config["model"]
    try:
        backbone_config = BertConfig(**model["backbone"]).validate()
        labels, num_labels, dropout = list(model["labels"]), int(model["num_labels"]), float(model["dropout"])
        pooling = model.get("pooling", "cls")             # runs written before the option pooled [CLS]
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r} is not one of {', '.join(POOLINGS)}")
    except (KeyError, TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"'model' is not a BERT classifier config ({e})") from None
    return backbone_config, labels, num_labels, dropout, pooling


def load_bert_classifier_run(run, config):
    """The loader of family ``bert_classifier``: a :class:`BertClassifier` with its checkpoint restored, its
    ``preprocessor`` (strings -> inputs) and ``labels`` (class names; empty for regression)."""
    backbone_config, labels, num_labels, dropout, pooling = _model_parts(run, config)
    options = config["options"]
    tokenizer = BertTokenizer(run.asset(config, "vocab"), lower_case=bool(options.get("lower_case", True)))
    preprocessor = BertPreprocessor(tokenizer, int(options.get("max_length", 128)))
    model = BertClassifier(BertBackbone.from_config_object(backbone_config), num_labels, preprocessor=preprocessor,
                           dropout=dropout, pooling=pooling)
    run.restore(model=model)
    model.labels = labels
    model.pair_input = options.get("pair_col") is not None
    return model


def load_bert_classifier(run_dir):
    run = RunDir(run_dir)
    return load_bert_classifier_run(run, run.read_config(family=FAMILY, what="BERT classifier"))


# ------------------------------------------------------------------------------------------------ job
class BertClassifierJob(ClassificationJob):
    """``kerasplm finetune bert-classifier``: the pooled ``[CLS]`` (or mean) → dropout → dense on a BERT run."""

    family, task, options_class, what = FAMILY, "sequence_classification", BertClassifierOptions, "BERT classifier"

    def check_config(self, run, config):
        _model_parts(run, config)

    def build_data(self):
        super().build_data()   # the training file, the schedule
        o, run = self.options, self.run_dir
        if self.resumed:
            self.backbone_config, self.labels, _, _, _ = _model_parts(run, self.config)
            tokenizer = BertTokenizer(run.asset(self.config, "vocab"),
                                      lower_case=bool(self.config["options"].get("lower_case")))
        else:
            tokenizer, _ = self.start_from_bert(o.max_length)
            if o.random_init:   # the same architecture, fresh weights
                keras.utils.set_random_seed(o.seed)
                self.init_backbone = BertBackbone.from_config_object(self.backbone_config, name=self.init_backbone.name)
            self.log(f"started from {o.init} ({'fresh weights' if o.random_init else 'pretrained'})")
            self.labels = self.new_labels()
            model_config = {"backbone": dataclasses.asdict(self.backbone_config), "num_labels": self.num_labels,
                            "labels": self.labels, "dropout": o.dropout, "pooling": o.pooling}
            self.write_config("custom", model_config, {**o.stored(RUN), "lower_case": tokenizer.lower_case},
                              assets=BERT_ASSETS)
        self.classification_data(BertPreprocessor(tokenizer, o.max_length))

    def build_model(self):
        o = self.options
        return BertClassifier(self.starting_backbone(BertBackbone), self.num_labels, preprocessor=self.preprocessor,
                              dropout=o.dropout, pooling=o.pooling)


def finetune_bert_classifier(out, options=None, log=print, **overrides):
    """Fine-tune (or resume) a BERT classifier in run directory ``out``; score ``dev``; returns the summary.

    ``options``: a :class:`BertClassifierOptions`; keyword ``overrides`` replace single options. Without
    ``steps`` and ``time_budget`` it trains ``epochs`` epochs. The summary (also ``metrics.json``) has the
    training figures and ``dev`` (accuracy, F1, MCC), and "classifier" is the trained :class:`BertClassifier`.
    """
    return BertClassifierJob(out, options, log, **overrides).run()
