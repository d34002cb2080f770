"""The BERT tagger job: fine-tune a pretrained BERT run on CoNLL-2003 files (``finetune bert-tagger``).

    summary = finetune_bert_tagger("runs/ner", train="eng.train", dev="eng.testa",
                                   init="runs/minilm", steps=2000)
    tagger = summary["tagger"]

Recipe (BERT paper, section 4.3 and appendix A.3): AdamW, linear warmup over ``warmup_fraction`` of the
steps to ``learning_rate`` then linear decay to 0, labels on the first word piece of each word. The dev
set is scored with entity-level F1 as conlleval computes it (:mod:`kerasplm.models.bert.ner_metrics`), printed
and written to ``metrics.json``. Resumable: the same command continues from the last checkpoint.

Run directory: family ``bert_tagger``; ``model`` = the :class:`BertTokenClassifier` (its backbone, ``labels``,
``dropout``, ``crf``), ``preprocessor`` = its :class:`BertTaggerPreprocessor` over asset ``vocab``;
:func:`load_bert_tagger` gives a :class:`BertTagger`.
"""
import dataclasses

import numpy as np
import tensorflow as tf

from kerasplm.data.conll import label_vocabulary, read_conll
from kerasplm.models.bert.manifest import TaggerOptions
from kerasplm.jobs.finetuning import cut_padding
from kerasplm.models.bert.ner_metrics import conlleval
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.finetuning import BERT_ASSETS, BertFineTuningJob
from kerasplm.models.bert.tagger import INPUT_KEYS, BertTaggerPreprocessor, BertTokenClassifier, piece_tags, tag_texts
from kerasplm.runs import load_run
from kerasplm.text.wordpiece import WordPieceTokenizer

FAMILY = "bert_tagger"
__all__ = ["TaggerOptions", "finetune_bert_tagger", "load_bert_tagger", "BertTagger", "predict_tags"]


@dataclasses.dataclass
class BertTagger:
    """A fine-tuned tagger: ``model``, its ``preprocessor`` and ``labels`` (tag names by id); the last two default
    to the model's (what :func:`kerasplm.runs.load_run` attaches and its config holds)."""

    model: BertTokenClassifier
    preprocessor: BertTaggerPreprocessor = None
    labels: list = None

    def __post_init__(self):
        self.preprocessor = self.preprocessor or self.model.preprocessor
        self.labels = list(self.model.labels if self.labels is None else self.labels)
        if self.preprocessor is None:
            raise ValueError("a BertTagger needs a BertTaggerPreprocessor (the model has none attached)")

    def tag(self, texts):
        """Raw strings -> ragged entity spans (:func:`kerasplm.models.bert.tagger.tag_texts`)."""
        return tag_texts(self.model, self.preprocessor, texts, self.labels)


def load_bert_tagger(run_dir):
    """The :class:`BertTagger` of a ``bert_tagger`` run (:func:`kerasplm.runs.load_run`: the model, its
    preprocessor and labels, its latest checkpoint)."""
    return BertTagger(load_run(run_dir, family=FAMILY, what="a BERT tagger run (kerasplm finetune bert-tagger)"))


def _dataset(preprocessor, sentences, label_ids, batch_size, seed=None, length_bucket=0):
    words = tf.ragged.constant([list(s.tokens) for s in sentences], dtype=tf.string)
    labels = tf.ragged.constant([[label_ids.get(t, 0) for t in s.tags] for s in sentences], dtype=tf.int64)
    ds = tf.data.Dataset.from_tensor_slices((words, labels))
    if seed is not None:
        ds = ds.shuffle(len(sentences), seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.ragged_batch(batch_size).map(preprocessor, num_parallel_calls=tf.data.AUTOTUNE)
    return cut_padding(ds, length_bucket).prefetch(2)


def predict_tags(model, preprocessor, sentences, labels, batch_size=64):
    """Word-level tag names for each sentence (argmax at each word's first piece, or the CRF's Viterbi path;
    words cut by the sequence length get ``O``)."""
    predicted = []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start:start + batch_size]
        inputs = preprocessor(tf.ragged.constant([list(s.tokens) for s in chunk], dtype=tf.string))
        logits = model({k: inputs[k] for k in INPUT_KEYS}, training=False)
        ids = piece_tags(logits, inputs["word_index"] >= 0, model.crf)[0].numpy()
        word_index = inputs["word_index"].numpy()
        for row, sentence in enumerate(chunk):
            tags = ["O"] * len(sentence.tokens)
            for position in np.nonzero(word_index[row] >= 0)[0]:
                tags[word_index[row, position]] = labels[ids[row, position]]
            predicted.append(tags)
    return predicted


class BertTaggerJob(BertFineTuningJob):
    """``kerasplm finetune bert-tagger``: a linear (or CRF) head on each word's first piece, scored with conlleval's
    entity F1."""

    family, task, options_class, what, result_key = (FAMILY, "token_classification", TaggerOptions, "BERT tagger",
                                                     "tagger")
    # This job's own recipe: no gradient clipping, a checkpoint every 1000 steps, the loss logged every 50.
    clip_norm, checkpoint_every, log_every = None, 1000, 50
    scoring_seconds_key = "eval_seconds"

    def read_examples(self, o):
        if o.train is None:
            raise ValueError("finetune bert-tagger needs --train (and, for a new run, --init)")
        self.train = read_conll(o.train, tag_scheme=o.tag_scheme)
        self.dev = read_conll(o.dev, tag_scheme=o.tag_scheme) if o.dev else []
        return len(self.train)

    def build_data(self):
        super().build_data()   # the CoNLL files, the schedule
        o = self.options
        if self.resumed:
            stored = self.stored_model()
            self.backbone_config, self.labels = stored.backbone.config, list(stored.labels)
            self.preprocessor = stored.preprocessor
        else:
            self.preprocessor = self.start_new_run()
        label_ids = {name: i for i, name in enumerate(self.labels)}
        self.train_dataset = _dataset(self.preprocessor, self.train, label_ids, o.batch_size, seed=o.seed,
                                      length_bucket=o.length_bucket)
        if self.dev:   # its loss is logged while training (eval_every); its entity F1 scored at the end
            self.eval_dataset = _dataset(self.preprocessor, self.dev, label_ids, o.batch_size,
                                         length_bucket=o.length_bucket)

    def start_new_run(self):
        """A new run's starting backbone (``init_backbone``, ``backbone_config``), labels and config.json record;
        returns its preprocessor."""
        o = self.options
        bert_tokenizer, init_config = self.start_from_bert(o.sequence_length, "sequence_length", wordpiece_only=True)
        self.labels = label_vocabulary(self.train)
        # The tagger's words are split by tensorflow-text's WordPiece tokenizer, with the init run's casing.
        tokenizer = WordPieceTokenizer(bert_tokenizer.vocabulary_file or bert_tokenizer.vocab,
                                       lower_case=bert_tokenizer.lower_case)
        self.write_config(init_config.get("preset", "custom"), assets=BERT_ASSETS)
        return BertTaggerPreprocessor(tokenizer, o.sequence_length)

    def build_model(self):
        o = self.options
        model = BertTokenClassifier(BertBackbone.from_config_object(self.backbone_config), len(self.labels),
                                    dropout=o.dropout, preprocessor=self.preprocessor,
                                    crf=getattr(o, "crf", False), labels=self.labels)
        return self.with_starting_weights(model)

    def score(self, tagger):
        if not self.dev:
            return None
        scores = conlleval([s.tags for s in self.dev], predict_tags(tagger.model, tagger.preprocessor, self.dev,
                                                                    tagger.labels))
        return {"dev_entity_f1": round(scores["f1"], 2), "dev_precision": round(scores["precision"], 2),
                "dev_recall": round(scores["recall"], 2), "dev_token_accuracy": round(scores["accuracy"], 2),
                "dev_per_type_f1": {t: round(s["f1"], 2) for t, s in scores["per_type"].items()},
                "dev_sentences": len(self.dev)}

    def dev_report(self, summary):
        return (f"dev entity F1 {summary['dev_entity_f1']:.2f} (P {summary['dev_precision']:.2f}, "
                f"R {summary['dev_recall']:.2f}) on {summary['dev_sentences']} sentences, step {summary['step']}")

    def result(self, trainer):
        return BertTagger(trainer.model, self.preprocessor, self.labels)


def finetune_bert_tagger(out, options=None, log=print, **overrides):
    """Fine-tunes (or resumes) a tagger run in ``out``; returns the summary dict (also in metrics.json),
    whose "tagger" is the trained :class:`BertTagger`."""
    return BertTaggerJob(out, options, log, **overrides).run()
