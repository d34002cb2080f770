"""The rail of the jobs that train sentence embeddings on a BERT run (SimCSE, Sentence-BERT).

Their model is a :class:`kerasplm.models.bert.classifier.SentenceEncoder` (its call: the backbone's final states pooled
over the real tokens), and their run records that pooling in the converter's (sentence-transformers') terms, so that
``kerasplm export embedder --run RUN`` pools as the model was trained and serves the model's own embeddings:

    options["sentence_embedding"] = {"pooling": ["mean_tokens"], "normalize": true}

:class:`SentenceEmbeddingJob` opens such a run: a new one from ``--init`` (its vocabulary copied, its backbone the
starting weights), a resumed one from its config.json. A job's options hold ``init``, ``pooling``, ``normalize`` and
``max_length``.
"""
from kerasplm.models.bert.classifier import sentence_embedding_record
from kerasplm.models.bert.finetuning import BertFineTuningJob
from kerasplm.options import RUN
from kerasplm.text.bert_tokenizer import BertPreprocessor

__all__ = ["SentenceEmbeddingJob"]


class SentenceEmbeddingJob(BertFineTuningJob):
    """A :class:`kerasplm.models.bert.finetuning.BertFineTuningJob` whose trained model (summary ``"model"``) is a
    sentence encoder."""

    result_key = "model"

    def open_encoder(self):
        """A family's ``build_data`` calls this after ``super().build_data()``: sets ``self.backbone_config`` and
        ``self.preprocessor`` (:class:`BertPreprocessor` cut at ``max_length``, padded to it), from the stored model
        of a resumed run, or for a new run from ``--init`` (:meth:`start_from_bert`), recording the run's config
        with its ``sentence_embedding``. Returns the resumed run's stored model, None for a new run."""
        o = self.options
        if self.resumed:
            stored = self.stored_model()
            self.backbone_config, self.preprocessor = stored.backbone.config, stored.preprocessor
            return stored
        tokenizer, _ = self.start_from_bert(o.max_length)
        self.write_config("custom", {**o.stored(RUN), "sentence_embedding": sentence_embedding_record(o.pooling,
                                                                                                      o.normalize)},
                          assets=self.init_assets)
        self.preprocessor = BertPreprocessor.for_tokenizer(tokenizer, o.max_length)
        return None
