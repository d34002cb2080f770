"""Format-2 ELMo runs (families ``elmo``, trained and converted, and ``elmo_classifier``): refused by ``load_run``
with the command that converts them, and after ``kerasplm convert run`` they give the original run's numbers.

Each run is made the cheap way the family's tests make it, then its config.json is rewritten into the layout the
format-2 code wrote (its family-specific ``model`` section, see ``git show b086d5b~1:kerasplm/models/elmo/job.py``)."""
import dataclasses
import json
import os
import shutil

import keras
import numpy as np
import pytest

import kerasplm
from kerasplm.cli import main
from kerasplm.models.elmo.job import train_elmo
from kerasplm.models.elmo.classifier_job import finetune_elmo_classifier
from kerasplm.models.elmo.model import ElmoBiLM
from kerasplm.models.elmo.runs import save_bilm_run
from kerasplm.runs import RunDirError, load_run
from tests.harness import write_word_corpus
from tests.models.elmo.toys import CLASSIFIER_TINY, ELMO_TINY, WORDS, toy_rows, write_tsv

SENTENCES = ["the cat sat on the mat .", "a dog", "good great movie", "the awful plot was poor"]


def old_elmo_model(model):
    """The format-2 ``model`` section of an ``elmo`` run (what ElmoJob / save_bilm_run wrote)."""
    return {"bilm": dataclasses.asdict(model.backbone.config), "vocab_size": model.vocab_size,
            "num_sampled": model.num_sampled}


def old_classifier_model(model):
    """The format-2 ``model`` section of an ``elmo_classifier`` run (what ElmoClassifierJob wrote)."""
    embedder = model.backbone
    elmo = None if embedder is None else {"bilm": dataclasses.asdict(embedder.bilm.config),
                                          "num_mixes": embedder.num_mixes, "layer_norm": embedder.layer_norm}
    return {"vocab_size": model.vocab_size, "embedding_dim": model.embedding_dim, "lstm_units": model.lstm_units,
            "dropout": model.dropout_rate, "labels": list(model.labels), "elmo": elmo}


def make_old(run, out, old_model):
    """A copy of ``run`` whose config.json is in format 2 (the key order of the old RunDir.write_config)."""
    shutil.copytree(run, out)
    with open(os.path.join(run, "config.json"), encoding="utf-8") as f:
        new = json.load(f)
    old = {"format_version": 2, "family": new["family"], "task": new["task"], "preset": new["preset"],
           "model": old_model(load_run(run)), "options": new["options"], "assets": new["assets"],
           "kerasplm_version": kerasplm.__version__}
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(old, f, indent=2)
    return out


def elmo_outputs(model):
    """An ``elmo`` run's numbers: every biLM layer (and the softmax's logits when it has one)."""
    ids = model.preprocessor(SENTENCES)
    out = {"layers": model.backbone(ids, training=False)["layers"].numpy()}
    if model.vocab_size is not None:
        out.update({k: v.numpy() for k, v in model(ids, training=False).items()})
    return out


def classifier_outputs(model):
    return {"probabilities": model.predict_texts(SENTENCES)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("legacy_elmo")
    quiet = dict(log=lambda *_: None)
    corpus = write_word_corpus(root, WORDS, 60, end=" .")
    trained = str(root / "trained")
    train_elmo(trained, corpus=corpus, steps=2, **ELMO_TINY, **quiet)
    keras.utils.set_random_seed(0)
    converted = save_bilm_run(ElmoBiLM.from_preset("elmo_tiny", dropout=0.0), ["<S>", "</S>", "<UNK>", "the"],
                              str(root / "converted"), {"converted_from": "bilm-tf"}).path
    data = {"train": write_tsv(root / "train.tsv", toy_rows(32, 0)), "dev": write_tsv(root / "dev.tsv", toy_rows(8, 1))}
    classifier = str(root / "classifier")
    finetune_elmo_classifier(classifier, steps=2, elmo=converted, elmo_at_output=True, **data, **CLASSIFIER_TINY,
                             **quiet)
    return {"root": root, "elmo": (trained, old_elmo_model, elmo_outputs),
            "converted": (converted, old_elmo_model, elmo_outputs),
            "elmo_classifier": (classifier, old_classifier_model, classifier_outputs)}


@pytest.mark.parametrize("kind", ["elmo", "converted", "elmo_classifier"])
def test_a_format_2_run_converts_to_the_same_numbers(runs, kind, capsys):
    run, old_model, outputs = runs[kind]
    old = make_old(run, str(runs["root"] / f"{kind}_old"), old_model)
    with pytest.raises(RunDirError) as info:
        load_run(old)
    message = str(info.value)
    assert "a run of format 2" in message and f"kerasplm convert run --from {old} --out" in message
    assert "\n" not in message
    new = str(runs["root"] / f"{kind}_new")
    assert main(["convert", "run", "--from", old, "--out", new]) == 0
    assert capsys.readouterr().out.strip() == new
    original, converted = load_run(run), load_run(new)
    assert type(converted) is type(original) and converted.run_info.step == original.run_info.step
    expected, got = outputs(original), outputs(converted)
    assert expected.keys() == got.keys()
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-6, atol=1e-6, err_msg=key)
    if kind == "elmo_classifier":
        assert converted.labels == original.labels == ["0", "1"] and converted.backbone.num_mixes == 2
    with open(os.path.join(new, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["format_version"] == 3 and config["assets"] == {"vocab": os.path.basename(
        converted.preprocessor.vocabulary_file)}
    vocab_key = "vocab" if kind == "elmo_classifier" else "vocabulary"
    assert config["preprocessor"]["config"][vocab_key] == config["assets"]["vocab"]   # relative to the new run
