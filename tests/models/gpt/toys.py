"""The GPT classifier tests' toys: the job's options (JOB), texts to classify, and a random ``gpt_tiny`` run written as
``train gpt`` / ``convert gpt2`` write theirs. The ``data`` fixture (tests/models/gpt/fixtures.py) builds the toy
sentiment task's files and runs from them; the legacy-run tests convert such runs."""
import os
import shutil

import keras
import tensorflow as tf

from kerasplm.models.gpt.model import GPT, GPTBackbone
from kerasplm.runs import RunDir
from kerasplm.text.bpe import BytePairTokenizer
from kerasplm.text.sentencepiece import SentencePieceTokenizer

JOB = dict(batch_size=16, learning_rate=2e-3, epochs=3, max_length=32, dropout=0.0, verbose=0, seed=1,
           log=lambda *_: None)
TEXTS = ["the movie was good great nice", "awful bad plot", "", "sad !"]


def write_gpt_run(directory, assets, vocab_size):
    """A random ``gpt_tiny`` run directory as ``train gpt`` / ``convert gpt2`` leave it; ``assets``: {key: path}
    (``spm_model``, or ``bpe_vocab`` and ``bpe_merges``): copied into the run, its tokenizer's files."""
    keras.utils.set_random_seed(0)
    model = GPT(backbone=GPTBackbone.from_preset("gpt_tiny", vocab_size=vocab_size))
    run = RunDir(str(directory))
    step = tf.Variable(0, dtype=tf.int64)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model, step=step), run.checkpoint_dir, max_to_keep=1).save()
    files = {}
    for key, path in assets.items():
        files[key] = run.file(os.path.basename(path))
        shutil.copyfile(path, files[key])
    tokenizer = (SentencePieceTokenizer(files["spm_model"]) if "spm_model" in files
                 else BytePairTokenizer(files["bpe_vocab"], files["bpe_merges"]))
    run.write_config("gpt", "causal_lm", "gpt_tiny", model, {}, preprocessor=tokenizer,
                     assets={key: os.path.basename(path) for key, path in assets.items()})
    return run.path
