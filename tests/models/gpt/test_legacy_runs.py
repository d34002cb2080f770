"""`kerasplm convert run` on GPT-family runs of format 2 (`gpt`: SentencePiece, GPT-2's BPE or no tokenizer;
`gpt_classifier`): each run is made as the GPT tests make theirs, its config.json rewritten into the layout the old
writers wrote (a family-specific `model` section), refused by load_run, converted, and the converted run gives the
original's numbers; the old checkpoint matches every object of the rebuilt model (what a resume needs)."""
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from kerasplm import cli
from kerasplm.models.gpt.classifier_job import finetune_gpt_classifier, load_gpt_classifier
from kerasplm.models.gpt.generator import TextGenerator, load_text_generator
from kerasplm.runs import RunDir, RunDirError, load_run
from kerasplm.training.checkpoints import restore_checkpoint
from tests.models.gpt.toys import JOB, TEXTS, write_gpt_run

LINES = ["the movie was good great nice", "", "awful bad plot and a sad end"]
IDS = tf.constant([[5, 17, 42, 8, 3, 0], [61, 2, 7, 7, 30, 9]])


def _keras_fields(config):
    """A ConfigMixin backbone's Keras config as its dataclass' fields (what format 2 stored)."""
    return {k: v for k, v in config.items() if k not in ("name", "trainable", "dtype")}


def rewrite_as_format_2(run_dir):
    """config.json as the format-2 writers (train gpt / convert gpt2 / finetune gpt-classifier) wrote it."""
    path = os.path.join(run_dir, "config.json")
    config = json.load(open(path, encoding="utf-8"))
    model = config["model"]["config"]
    backbone = _keras_fields(model["backbone"]["config"])
    if config["family"] == "gpt":
        old_model = backbone
    else:
        old_model = {"backbone": backbone, "num_labels": model["num_labels"], "labels": model["labels"],
                     "dropout": model["dropout"], "task_type": model["task_type"], "lm_weight": model["lm_weight"],
                     "special_ids": config["preprocessor"]["config"]["special_ids"]}
    old = {"format_version": 2, "family": config["family"], "task": config["task"], "preset": config["preset"],
           "model": old_model, "options": config["options"], "assets": config["assets"], "kerasplm_version": "0.1.0"}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(old, f, indent=2)


def convert(original, tmp_path, capsys):
    """A format-2 copy of ``original`` (refused by load_run) converted by the CLI; returns the new run's path."""
    old, new = str(tmp_path / "old"), str(tmp_path / "new")
    shutil.copytree(original, old)
    rewrite_as_format_2(old)
    with pytest.raises(RunDirError, match=r"config.json: a run of format 2 .*`kerasplm convert run --from ") as error:
        load_run(old)
    assert len(str(error.value).splitlines()) == 1
    assert cli.main(["convert", "run", "--from", old, "--out", new]) == 0
    assert capsys.readouterr().out.strip() == new
    assert RunDir(new).read_config()["format_version"] == 3
    return new


def assert_checkpoint_matches_every_object(run_dir):
    """The rebuilt task model has nothing the old checkpoint lacks: a resume's (strict) restore accepts it."""
    run = RunDir(run_dir)
    model = run.build(run.read_config())
    restore_checkpoint(tf.train.Checkpoint(model=model, step=tf.Variable(0, dtype=tf.int64)), run.latest_checkpoint())


@pytest.mark.parametrize("tokenizer", ["spm", "bpe", None])
def test_gpt_runs(data, tokenizer, tmp_path, capsys):
    if tokenizer == "spm":
        original = data["init"]
    elif tokenizer == "bpe":
        original = data["init_bpe"]
    else:
        original = str(tmp_path / "bare")
        write_gpt_run(original, {"spm_model": str(data["root"] / "spm.model")}, 300)
        config = json.load(open(os.path.join(original, "config.json")))
        config.update(preprocessor=None, assets={})      # convert gpt2 of a directory without tokenizer files
        json.dump(config, open(os.path.join(original, "config.json"), "w"))
    new = convert(original, tmp_path, capsys)
    before, after = load_run(original), load_run(new)
    assert after.run_info.config["family"] == "gpt" and type(after).__name__ == "GPT"
    np.testing.assert_array_equal(after(IDS).numpy(), before(IDS).numpy())
    if tokenizer is None:
        assert after.preprocessor is None
        with pytest.raises(RunDirError, match="the run has no tokenizer"):
            load_text_generator(new)
    else:
        assert type(after.preprocessor) is type(before.preprocessor)
        assert load_text_generator(new).score(LINES) == TextGenerator(before).score(LINES)
    assert_checkpoint_matches_every_object(new)


def test_gpt_classifier_run(data, tmp_path, capsys):
    original = str(tmp_path / "classifier")
    finetune_gpt_classifier(original, steps=1, train=data["pairs"], init=data["init"], task="similarity",
                            text_col="a", pair_col="b", **JOB)
    new = convert(original, tmp_path, capsys)
    before, after = load_gpt_classifier(original), load_gpt_classifier(new)
    assert (after.labels, after.pair_input, after.task_type) == (before.labels, True, "similarity")
    assert after.preprocessor.sequence_length == 32
    np.testing.assert_array_equal(after.predict_texts(TEXTS, TEXTS[::-1]), before.predict_texts(TEXTS, TEXTS[::-1]))
    assert_checkpoint_matches_every_object(new)
