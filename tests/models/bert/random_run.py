"""A random tiny BERT written as a run, as `kerasplm convert bert` writes one (checkpoint, vocabulary, config): the
starting point of the fine-tuning job tests (the tagger's ``init_run`` fixture, the QA toy's ``make_init_run``)."""
import keras
import tensorflow as tf

from kerasplm.models.bert.backbone import BertBackbone, bert_run_preprocessor
from kerasplm.runs import RunDir
from kerasplm.text import BertTokenizer


def write_random_bert_run(directory, config, vocab, seed=0):
    """A ``BertBackbone(**config)`` drawn after seeding with ``seed``, written to ``directory`` with ``vocab`` (a list
    of tokens); returns the backbone."""
    keras.utils.set_random_seed(seed)
    backbone = BertBackbone(**config)
    run = RunDir(str(directory))
    run.write_text("vocab.txt", "\n".join(vocab) + "\n")
    tf.train.CheckpointManager(tf.train.Checkpoint(model=backbone), run.checkpoint_dir, max_to_keep=1).save()
    preprocessor = bert_run_preprocessor(BertTokenizer(run.file("vocab.txt")), backbone.config)
    run.write_config("bert", "backbone", "custom", backbone, {"lower_case": True}, assets={"vocab": "vocab.txt"},
                     preprocessor=preprocessor)
    return backbone
