"""BERT run directories (family ``bert``: pretrained here or converted): the backbone or the whole pretrainer.

A ``bert`` run's ``config.json`` holds the :class:`kerasplm.models.bert.BertConfig` under ``model`` and the
vocabulary as asset ``vocab``; its task is ``pretraining`` (``kerasplm train bert``: the checkpoint holds the
whole :class:`BertPretrainer`) or ``backbone`` (``kerasplm convert bert``). Loading lives with the models so
that jobs, exporters and converters all reach it without importing one another.
"""
import os

import tensorflow as tf

from kerasplm.models.bert import BertBackbone, BertConfig
from kerasplm.models.bert_pretraining import BertPretrainer
from kerasplm.runs import RunDir
from kerasplm.text import WordPieceTokenizer, read_vocab

__all__ = ["RUN_FAMILY", "PRETRAINING_TASK", "bert_model_config", "bert_vocab_file", "load_bert_run",
           "load_bert_pretrainer"]

RUN_FAMILY = "bert"
PRETRAINING_TASK = "pretraining"


def bert_model_config(run, config):
    """The run's :class:`BertConfig` (a one-line :class:`kerasplm.runs.RunDirError` when it is not one)."""
    try:
        return BertConfig(**config["model"]).validate()
    except (TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"'model' is not a valid BertConfig ({e})") from None


def bert_vocab_file(run, config, model_config):
    """The path of the run's vocabulary, checked to have the model's size."""
    path = run.asset(config, "vocab")
    size = len(read_vocab(path))
    if size != model_config.vocab_size:
        raise run.error(os.path.relpath(path, run.path), f"{size} tokens, but the model was trained with "
                                                         f"{model_config.vocab_size}; the file is damaged or "
                                                         f"from another run")
    return path


def load_bert_run(run, config):
    """The :class:`BertBackbone` of a ``bert`` run (``load_run``'s loader); its checkpoint restored.
    The vocabulary is ``run.asset(config, "vocab")``."""
    backbone = BertBackbone.from_config_object(bert_model_config(run, config))
    if config.get("task") == PRETRAINING_TASK:  # the checkpoint holds the whole pretrainer: model/backbone/...
        run.restore(model=tf.train.Checkpoint(backbone=backbone))
    else:
        run.restore(model=backbone)
    return backbone


def load_bert_pretrainer(run_dir):
    """``(pretrainer, tokenizer, config)`` of a pretraining run: the whole :class:`BertPretrainer` restored."""
    run = RunDir(run_dir)
    config = run.read_config(family=RUN_FAMILY, what="BERT pretraining")
    if config.get("task") != PRETRAINING_TASK:
        raise run.error(run.CONFIG, f"task {config.get('task')!r} has no pretraining heads (need a run of "
                                    f"'kerasplm train bert')")
    model_config = bert_model_config(run, config)
    tokenizer = WordPieceTokenizer(bert_vocab_file(run, config, model_config))
    pretrainer = BertPretrainer(BertBackbone.from_config_object(model_config),
                                sentence_task=config["options"].get("sentence_task", "nsp"), name=config["preset"])
    run.restore(model=pretrainer)
    return pretrainer, tokenizer, config
