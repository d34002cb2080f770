"""BERT's fine-tuning rail: a job that starts from a BERT run (``--init``), on the family-free
:mod:`kerasplm.jobs.finetuning`.

* :func:`bert_init_parts`: the BERT run a job starts from (:func:`kerasplm.models.bert.runs.bert_run_parts`), with
  one-line errors for a missing ``--init`` and a sequence length beyond the model's positions;
* :class:`StartsFromBert`: the mixin of a fine-tuning job whose new run starts from such a run
  (:meth:`StartsFromBert.start_from_bert`: its backbone, and its tokenizer files copied into the new run);
  :class:`BertFineTuningJob` and :class:`BertClassificationJob` are :class:`kerasplm.jobs.finetuning.FineTuningJob`
  and :class:`kerasplm.jobs.finetuning.ClassificationJob` with it: the BERT classifier, tagger and QA jobs, the
  sentence-embedding jobs (SimCSE, Sentence-BERT) and the distilled students stand on them;
* :data:`BERT_ASSETS`: the assets of a run fine-tuned from a BERT run with a WordPiece vocabulary.
"""
import os

from kerasplm.jobs.finetuning import ClassificationJob, FineTuningJob
from kerasplm.models.bert.runs import bert_run_parts
from kerasplm.text.bert_tokenizer import BertTokenizer

__all__ = ["BERT_ASSETS", "BertClassificationJob", "BertFineTuningJob", "StartsFromBert", "bert_init_parts"]

# The assets of a run fine-tuned from a BERT run: its vocabulary.
BERT_ASSETS = {"vocab": "vocab.txt"}


def bert_init_parts(init, length, length_option="max_length"):
    """``(backbone, tokenizer, options)`` of the BERT run ``init`` that a fine-tuning job starts from (converted,
    pretrained or fine-tuned: :func:`kerasplm.models.bert.runs.bert_run_parts`); one-line errors for a missing
    --init and for a sequence length beyond the model's positions."""
    if init is None:
        raise ValueError("give the BERT run to start from (init / --init)")
    backbone, tokenizer, options = bert_run_parts(init)
    positions = backbone.config.max_positions - backbone.config.position_offset
    if length > positions:
        raise ValueError(f"{length_option}={length} exceeds the model's {positions} positions")
    return backbone, tokenizer, options


class StartsFromBert:
    """The mixin of a :class:`kerasplm.jobs.finetuning.FineTuningJob` whose new run starts from the ``--init`` BERT
    run (:meth:`start_from_bert`)."""

    def start_from_bert(self, length, length_option="max_length", wordpiece_only=False):
        """A new run from the ``--init`` BERT run (:func:`bert_init_parts`): ``init_backbone`` and
        ``backbone_config`` set, its vocabulary copied into the run (asset ``vocab``, :data:`BERT_ASSETS`; a converted
        RoBERTa's or ALBERT's tokenizer files under their own assets), the assets the new run records in
        ``init_assets``. ``wordpiece_only``: a job reading WordPiece offsets refuses another tokenizer in one line.
        Returns ``(its tokenizer over the new run's copy of the vocabulary, the init run's config)``."""
        backbone, tokenizer, _ = bert_init_parts(self.options.init, length, length_option)
        self.init_backbone, self.backbone_config = backbone, backbone.config
        if not isinstance(tokenizer, BertTokenizer):
            if wordpiece_only:
                raise ValueError(f"{self.options.init}: this job needs a WordPiece (BERT) tokenizer, and the run's is "
                                 f"a {type(tokenizer).__name__}")
            self.init_assets, init_config = self.copy_init_assets()
            names = set(self.init_assets.values())
            if self.run_dir.writer:   # the tokenizer's files named in the new run
                tokenizer = type(tokenizer).from_config({
                    key: self.run_dir.file(os.path.basename(value))
                    if isinstance(value, str) and os.path.basename(value) in names else value
                    for key, value in tokenizer.get_config().items()})
            return tokenizer, init_config
        self.init_assets = BERT_ASSETS
        _, init_config = self.copy_init_assets(BERT_ASSETS)
        if self.run_dir.writer:   # the run's config names its own file, not the init run's
            tokenizer = type(tokenizer).from_config({**tokenizer.get_config(),
                                                     "vocabulary": self.run_dir.file(BERT_ASSETS["vocab"])})
        return tokenizer, init_config


class BertFineTuningJob(StartsFromBert, FineTuningJob):
    """A :class:`kerasplm.jobs.finetuning.FineTuningJob` that starts from a BERT run (the tagger, QA and
    sentence-embedding jobs)."""


class BertClassificationJob(StartsFromBert, ClassificationJob):
    """A :class:`kerasplm.jobs.finetuning.ClassificationJob` that starts from a BERT run (the BERT classifier, and
    through it the distilled classifier)."""
