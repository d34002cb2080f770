"""The BERT tagger job: fine-tune a pretrained BERT run on CoNLL-2003 files (``finetune bert-tagger``).

    summary = finetune_bert_tagger("runs/ner", train="eng.train", dev="eng.testa",
                                   init="runs/minilm", steps=2000)
    tagger = summary["tagger"]

Recipe (BERT paper, section 4.3 and appendix A.3): AdamW, linear warmup over ``warmup_fraction`` of the
steps to ``learning_rate`` then linear decay to 0, labels on the first word piece of each word. The dev
set is scored with entity-level F1 as conlleval computes it (:mod:`kerasplm.jobs.ner_metrics`), printed
and written to ``metrics.json``. Resumable: the same command continues from the last checkpoint.
"""
import dataclasses
import time

import numpy as np
import tensorflow as tf

from kerasplm.data.conll import label_vocabulary, read_conll
from kerasplm.models.bert import BertBackbone, BertConfig
from kerasplm.models.bert_tagger import INPUT_KEYS, BertTaggerPreprocessor, BertTokenClassifier, piece_tags, tag_texts
from kerasplm.jobs.bert_finetune import (fine_tuning_schedule, make_optimizer, plan_schedule)
from kerasplm.families.bert import TaggerOptions
from kerasplm.jobs.job import fit_scheduled, open_run, restores_global_policy, training_summary
from kerasplm.jobs.ner_metrics import conlleval
from kerasplm.options import RUN
from kerasplm.runs import RunDir, load_run
from kerasplm.text.wordpiece import WordPieceTokenizer
from kerasplm.training import Trainer

FAMILY = "bert_tagger"
ASSETS = {"vocab": "vocab.txt"}
__all__ = ["TaggerOptions", "finetune_bert_tagger", "load_bert_tagger", "BertTagger", "predict_tags"]


@dataclasses.dataclass
class BertTagger:
    """A fine-tuned tagger: ``model``, its ``preprocessor`` and ``labels`` (tag names by id)."""

    model: BertTokenClassifier
    preprocessor: BertTaggerPreprocessor
    labels: list

    def tag(self, texts):
        """Raw strings -> ragged entity spans (:func:`kerasplm.models.bert_tagger.tag_texts`)."""
        return tag_texts(self.model, self.preprocessor, texts, self.labels)


def _dataset(preprocessor, sentences, label_ids, batch_size, seed=None):
    words = tf.ragged.constant([list(s.tokens) for s in sentences], dtype=tf.string)
    labels = tf.ragged.constant([[label_ids.get(t, 0) for t in s.tags] for s in sentences], dtype=tf.int64)
    ds = tf.data.Dataset.from_tensor_slices((words, labels))
    if seed is not None:
        ds = ds.shuffle(len(sentences), seed=seed, reshuffle_each_iteration=True).repeat()
    return ds.ragged_batch(batch_size).map(preprocessor, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)


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


def _build(backbone_config, num_labels, dropout, crf=False):
    return BertTokenClassifier(BertBackbone.from_config_object(backbone_config), num_labels, dropout=dropout, crf=crf)


@restores_global_policy
def finetune_bert_tagger(out, options=None, **overrides):
    """Fine-tunes (or resumes) a tagger run in ``out``; returns the summary dict (also in metrics.json),
    whose "tagger" is the trained :class:`BertTagger`."""
    run, o, config, previous_history = open_run(out, FAMILY, TaggerOptions, options, overrides)
    o = plan_schedule(o, resumed=config is not None, legacy_steps=o.steps or 1000)
    if o.train is None or (config is None and o.init is None):
        raise ValueError("finetune bert-tagger needs --train and, for a new run, --init")
    train = read_conll(o.train, tag_scheme=o.tag_scheme)
    dev = read_conll(o.dev, tag_scheme=o.tag_scheme) if o.dev else []
    if config is None:
        init_run = RunDir(o.init)
        init_config = init_run.read_config(family="bert", what="a BERT run")
        labels = label_vocabulary(train)
        with open(init_run.asset(init_config, "vocab"), encoding="utf-8") as f:
            run.write_text(ASSETS["vocab"], f.read())
        model_config = {"backbone": init_config["model"], "labels": labels,
                        "lower_case": bool(init_config["options"].get("lower_case", True))}
        config = run.write_config(FAMILY, "token_classification", init_config.get("preset", "custom"),
                                  model_config, o.stored(RUN), assets=ASSETS)
        init_backbone = load_run(o.init)
    else:
        labels, init_backbone = config["model"]["labels"], None
    backbone_config = BertConfig(**config["model"]["backbone"]).validate()
    label_ids = {name: i for i, name in enumerate(labels)}
    tokenizer = WordPieceTokenizer(run.asset(config, "vocab"), lower_case=config["model"]["lower_case"])
    preprocessor = BertTaggerPreprocessor(tokenizer, o.sequence_length)

    def make_model():
        model = _build(backbone_config, len(labels), o.dropout, o.crf)
        if init_backbone is not None:              # a new run starts from the pretrained weights
            model.backbone.set_weights(init_backbone.get_weights())
        return model

    schedule = fine_tuning_schedule(o, o.schedule_steps)
    trainer = Trainer(model=make_model,
                      optimizer=lambda: make_optimizer(o, schedule, backbone_config.num_layers),
                      compute_loss=BertTokenClassifier.trainer_loss, jit_compile=o.jit_compile,
                      checkpoint_dir=run.checkpoint_dir, checkpoint_every=1000, log_dir=run.log_dir, seed=o.seed,
                      verbose=o.verbose)
    train_ds = _dataset(preprocessor, train, label_ids, o.batch_size, seed=o.seed)
    trainer.fit(train_ds, steps=0)                 # builds, and restores the latest checkpoint on resume
    first_step, t0 = trainer.step, time.time()
    dev_ds = _dataset(preprocessor, dev, label_ids, o.batch_size) if dev else None      # held-out loss
    history, train_seconds = fit_scheduled(run, trainer, previous_history, train_ds, o, schedule,
                                           print, eval_dataset=dev_ds)
    summary = training_summary(trainer, history, train_seconds)
    summary["steps_this_run"] = trainer.step - first_step
    if dev:
        predicted = predict_tags(trainer.model, preprocessor, dev, labels)
        scores = conlleval([s.tags for s in dev], predicted)
        summary.update({"dev_entity_f1": round(scores["f1"], 2), "dev_precision": round(scores["precision"], 2),
                        "dev_recall": round(scores["recall"], 2), "dev_token_accuracy": round(scores["accuracy"], 2),
                        "dev_per_type_f1": {t: round(s["f1"], 2) for t, s in scores["per_type"].items()},
                        "dev_sentences": len(dev), "eval_seconds": round(time.time() - t0 - train_seconds, 1)})
        print(f"dev entity F1 {scores['f1']:.2f} (P {scores['precision']:.2f}, R {scores['recall']:.2f}) "
              f"on {len(dev)} sentences, step {trainer.step}")
    run.write_json(run.METRICS, summary)
    trainer.close()
    summary["tagger"] = BertTagger(trainer.model, preprocessor, labels)
    return summary


def load_bert_tagger(run, config):
    """``load_run``'s loader for tagger runs: a :class:`BertTagger` with its checkpoint restored."""
    backbone_config = BertConfig(**config["model"]["backbone"]).validate()
    labels = config["model"]["labels"]
    model = _build(backbone_config, len(labels), config["options"].get("dropout", 0.1),
                   bool(config["options"].get("crf", False)))
    run.restore(model=model)
    tokenizer = WordPieceTokenizer(run.asset(config, "vocab"), lower_case=config["model"]["lower_case"])
    return BertTagger(model, BertTaggerPreprocessor(tokenizer, config["options"]["sequence_length"]), labels)

