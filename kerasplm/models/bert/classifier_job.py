"""Fine-tune a BERT run on a sentence (pair) classification or regression task: ``kerasplm finetune bert-classifier``.

The recipe is the BERT paper's (section 4.1 and appendix A.3): the pooled ``[CLS]`` output, a dropout and one
dense layer; AdamW (weight decay 0.01, not on biases and LayerNorm, ε = 1e-6), learning rate 2e-5 … 5e-5 (3e-5
here) with linear warmup over 10% of the steps and linear decay to 0, 2–4 epochs, gradients clipped to norm 1.
Those rates were chosen for BERT-base and -large. A backbone narrower than BERT-base fine-tunes at 1e-4 unless
``--learning-rate`` says otherwise: small models learn best at larger rates (ELECTRA, Clark et al. 2020,
appendix: 3e-4 Small, 1e-4 Base, 5e-5 Large), and all-MiniLM-L6-v2 (width 384) scored about a point more on SST-2
at 1e-4 than at 3e-5 (``benchmarks/RESULTS.md``).
The schedule spans ``--steps`` (else ``--epochs``); given ``--time-budget`` alone, the job times its first steps
and fits the schedule to the steps the budget allows (``--epochs``' worth at most), so the learning rate reaches
0 as the budget ends. A model from sentence-transformers (all-MiniLM-L6-v2) was trained through its own pooling,
not the ``[CLS]`` pooler: without ``--pooling`` the head reads the pooling its run records (mean), as the model was
meant to be read.
Optionally layer-wise learning-rate decay (ELECTRA, Clark et al. 2020, appendix A): a block ``k`` levels below
the head learns at ``lr · decay^k``. ``--random-init`` keeps the ``--init`` run's architecture and vocabulary but
draws fresh weights: the same job without pretraining, to measure what pretraining buys.

Data: tab-separated files, one example per line; ``--text-col``, ``--pair-col``, ``--label-col`` are column
names of the header line (``sentence``, ``label`` for GLUE's SST-2) or 0-based indices (with ``--no-header``).
The label names are those of the training file (sorted); the model's outputs follow that order, the exported
classifier answers with the names.

Run directory (:mod:`kerasplm.runs`): family ``bert_classifier``; ``model`` = the :class:`BertClassifier` (its
backbone, ``num_labels``, ``labels``, ``pair_input``, ``dropout``, ``pooling``), ``preprocessor`` = its
:class:`BertPreprocessor` over asset ``vocab``; ``metrics.json`` = the training summary + ``dev`` (accuracy, F1, MCC;
regression: MSE and Pearson's r). Resumable like every kerasplm job; :func:`load_bert_classifier` (=
:func:`kerasplm.runs.load_run`) gives the trained classifier.

>>> summary = finetune_bert_classifier("runs/sst2", train="sst2/train.tsv", dev="sst2/dev.tsv",
...                                    init="runs/minilm", epochs=1)
>>> summary["dev"]["accuracy"]
"""
import keras

from kerasplm.models.bert.manifest import (BERT_BASE_WIDTH, NARROW_BACKBONE_PEAK_RATE, PAPER_PEAK_RATE,
                                    BertClassifierOptions)
# Their home is kerasplm.jobs.finetuning (the fine-tuning rail); importable from here as before.
from kerasplm.jobs.finetuning import LayerwiseAdamW, layer_decay_multiplier, read_classification_tsv
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.classifier import BertClassifier, recorded_pooling
from kerasplm.models.bert.finetuning import BertClassificationJob
from kerasplm.runs import load_run
from kerasplm.text.bert_tokenizer import BertPreprocessor

FAMILY = "bert_classifier"
__all__ = ["BertClassifierOptions", "BertClassifierJob", "finetune_bert_classifier", "load_bert_classifier",
           "LayerwiseAdamW", "layer_decay_multiplier", "read_classification_tsv"]


def load_bert_classifier(run_dir):
    """The :class:`BertClassifier` of a ``bert_classifier`` run (:func:`kerasplm.runs.load_run`): its checkpoint
    restored, its ``preprocessor`` (strings -> inputs), ``labels`` (class names; empty for regression) and
    ``pair_input``."""
    return load_run(run_dir, family=FAMILY, what="a BERT classifier run (kerasplm finetune bert-classifier)")


# ------------------------------------------------------------------------------------------------ job
class BertClassifierJob(BertClassificationJob):
    """``kerasplm finetune bert-classifier``: the pooled ``[CLS]`` (or mean) → dropout → dense on a BERT run."""

    family, task, options_class, what = FAMILY, "sequence_classification", BertClassifierOptions, "BERT classifier"

    def build_data(self):
        super().build_data()   # the training file; the schedule, unless the learning rate is settled below
        if self.resumed:
            stored = self.stored_model()
            self.backbone_config, self.labels = stored.backbone.config, list(stored.labels)
            preprocessor = stored.preprocessor
        else:
            preprocessor = self.start_new_run()
        self.classification_data(preprocessor)

    def start_new_run(self):
        """A new run's starting backbone (``init_backbone``, ``backbone_config``), labels and config.json record;
        returns its preprocessor."""
        o = self.options
        tokenizer, init_config = self.start_from_bert(o.max_length)
        if o.random_init:   # the same architecture, fresh weights
            keras.utils.set_random_seed(o.seed)
            self.init_backbone = BertBackbone.from_config_object(self.backbone_config, name=self.init_backbone.name)
        rate_why = ""
        if o.learning_rate is None:
            narrow = self.backbone_config.hidden_size < BERT_BASE_WIDTH
            self.options = o = o.replace(learning_rate=NARROW_BACKBONE_PEAK_RATE if narrow else PAPER_PEAK_RATE)
            rate_why = (f" (a backbone narrower than BERT-base: width {self.backbone_config.hidden_size})" if narrow
                        else " (the BERT paper's)")
            self.build_schedule()
        why = ""
        if o.pooling is None:
            # A sentence-transformers model was trained through its own pooling; its [CLS] pooler may be untrained.
            recorded = recorded_pooling(init_config.get("options", {}))
            self.options = o = o.replace(pooling=recorded or "cls")
            why = ", the init run's sentence-transformers pooling" if recorded else ", the paper's [CLS] pooler"
        weights = "fresh weights" if o.random_init else "pretrained"
        self.log(f"started from {o.init} ({weights}); pooling {o.pooling}{why}; peak learning rate "
                 f"{o.learning_rate:g}{rate_why}")
        self.labels = self.new_labels()
        self.write_config("custom", assets=self.init_assets)
        return BertPreprocessor.for_tokenizer(tokenizer, o.max_length)

    def build_model(self):
        o = self.options
        return BertClassifier(self.starting_backbone(BertBackbone), self.num_labels, preprocessor=self.preprocessor,
                              dropout=o.dropout, pooling=o.pooling, labels=self.labels, pair_input=self.pair_input)


def finetune_bert_classifier(out, options=None, log=print, **overrides):
    """Fine-tune (or resume) a BERT classifier in run directory ``out``; score ``dev``; returns the summary.

    ``options``: a :class:`BertClassifierOptions`; keyword ``overrides`` replace single options. Without
    ``steps`` and ``time_budget`` it trains ``epochs`` epochs. The summary (also ``metrics.json``) has the
    training figures and ``dev`` (accuracy, F1, MCC), and "classifier" is the trained :class:`BertClassifier`.
    """
    return BertClassifierJob(out, options, log, **overrides).run()
