"""Pretrain ELECTRA from raw text: the ``kerasplm train electra`` job (:class:`ElectraPretrainingJob`).

BERT's pipeline (:class:`kerasplm.models.bert.pretraining_job.BertPretrainingJob`: corpus -> held-out documents ->
WordPiece vocabulary -> single-segment instances -> masked batches in the ``tf.data`` graph, AdamW with warmup and
linear decay, resume) training an :class:`kerasplm.models.electra.model.ElectraPretrainer` instead of a BERT
pretrainer: the generator (MLM at the masked pieces, width ``generator_size`` of the discriminator's) fills them
with samples, the discriminator labels every real token replaced or original; loss = MLM + λ·RTD
(``rtd_weight``, 50).

The run directory is an ``electra`` run (``bert`` before; those resume too) with task ``"electra_pretraining"``: config.json's ``model`` is the
:class:`ElectraPretrainer` (the discriminator's backbone, ``generator_size``, ``rtd_weight``), its preprocessor a
:class:`kerasplm.text.BertPreprocessor` over the corpus' vocabulary, its checkpoints the whole pretrainer. So
``load_run(run)`` gives the pretrainer and ``load_run(run).backbone`` the discriminator's :class:`BertBackbone`:
what ``kerasplm finetune bert-classifier|bert-tagger|bert-qa|bert-simcse --init RUN`` and
``kerasplm export embedder --run RUN`` read. ``metrics.json`` adds the held-out RTD loss, accuracy, precision and
recall (a token predicted replaced when its logit is > 0) and the fraction of tokens replaced to BERT's MLM
accuracy and perplexity.

>>> summary = train_electra("runs/electra", corpus="../shared/data/wikitext2/wiki.valid.tokens",
...                         dev_corpus="../shared/data/wikitext2/wiki.test.tokens", preset="electra_small",
...                         steps=2000)
"""
from kerasplm.models.electra.manifest import ElectraPretrainingOptions
from kerasplm.models.bert.pretraining_job import BertPretrainingJob
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.electra.model import PRETRAINING_TASK, ElectraPretrainer
from kerasplm.runs.serialization import attach_preprocessor

__all__ = ["ElectraPretrainingJob", "ElectraPretrainingOptions", "train_electra"]

RTD_METRICS = ("rtd_loss", "rtd_accuracy", "rtd_precision", "rtd_recall", "replaced_fraction")


class ElectraPretrainingJob(BertPretrainingJob):
    """``kerasplm train electra``: generator MLM + discriminator replaced-token detection on a plain-text corpus."""

    family, task, options_class, what = "electra", PRETRAINING_TASK, ElectraPretrainingOptions, "ELECTRA pretraining"
    former_families = ("bert",)   # ELECTRA runs were recorded as bert runs before (the task check tells them apart)

    def preset_overrides(self):
        o = self.options
        return {**super().preset_overrides(),
                **({} if o.generator_size is None else {"generator_size": o.generator_size})}

    def reported_metrics(self):
        return ("mlm_loss", "mlm_accuracy") + RTD_METRICS

    def build_model(self):
        config = self.model_config
        model = ElectraPretrainer(BertBackbone.from_config_object(config.discriminator_config()),
                                  generator_size=config.generator_size, rtd_weight=self.options.rtd_weight,
                                  name=self.config["preset"])
        return attach_preprocessor(model, self.preprocessor)

    def describe(self, summary):
        super().describe(summary)
        self.log(f"held-out replaced-token detection: accuracy {summary['eval_rtd_accuracy']:.4f}, precision "
                 f"{summary['eval_rtd_precision']:.4f}, recall {summary['eval_rtd_recall']:.4f} "
                 f"({summary['eval_replaced_fraction']:.1%} of the tokens replaced)")


def train_electra(out, options=None, log=print, **overrides):
    """Pretrain (or resume) an ELECTRA in run directory ``out``; returns a summary dict (also metrics.json, without
    the objects) whose ``"pretrainer"`` is the trained :class:`ElectraPretrainer` (``.backbone``: the
    discriminator's encoder) and ``"tokenizer"`` its tokenizer.

    ``options``: :class:`ElectraPretrainingOptions`; keyword ``overrides`` replace single options. Stops at
    ``steps`` (absolute), after ``time_budget`` seconds or on SIGTERM; a resumed run continues with its stored RUN
    options (a different one raises :class:`kerasplm.options.OptionsConflict`).
    """
    return ElectraPretrainingJob(out, options, log, **overrides).run()
