"""The BiLSTM classifier with [x; ELMo] (kerasplm.models.elmo.classifier) and its job
(``kerasplm finetune elmo-classifier``): shapes, only the mixes and the task model train, padding does not change
a sentence's logits, the job resumes exactly, the loader and the CLI. A random-weight tiny biLM stands in for a
trained one (what is tested does not depend on its weights)."""
import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.cli import main
from kerasplm.models.elmo.model import ElmoBiLM, ElmoEmbedder
from kerasplm.models.elmo.classifier import ClassifierPreprocessor, ElmoClassifier
from kerasplm.models.elmo.runs import save_bilm_run
from kerasplm.models.elmo.classifier_job import VOCABULARY, finetune_elmo_classifier, load_elmo_classifier
from kerasplm.text.word_vocab import build_word_vocab
from kerasplm.runs import RunDirError, load_run
from kerasplm.runs.serialization import deserialize, serialize
from tests.job_harness import check_job
from tests.models.elmo.toys import CLASSIFIER_TINY, toy_rows, write_tsv


@pytest.fixture(scope="module")
def bilm():
    keras.utils.set_random_seed(0)
    return ElmoBiLM.from_preset("elmo_tiny")


@pytest.fixture(scope="module")
def inputs():
    vocab = build_word_vocab(["the good movie", "a bad plot ."], max_words=10, **VOCABULARY)
    return ClassifierPreprocessor(vocab, max_length=5)(tf.constant(["the good movie", "a bad unseen plot . x y"]))


def test_vocabulary_and_preprocessor(inputs):
    assert build_word_vocab(["b a a", "c a b"], max_words=2, **VOCABULARY) == ["<PAD>", "<UNK>", "a", "b"]
    assert build_word_vocab(["b a a", "c a b"], max_words=9, min_count=2, **VOCABULARY) == ["<PAD>", "<UNK>", "a", "b"]
    # vocab: <PAD> <UNK> . a bad good movie plot the ; 5 tokens kept, "unseen" is <UNK> (1), padding 0
    np.testing.assert_array_equal(inputs["word_ids"], [[8, 5, 6, 0, 0], [3, 4, 1, 7, 2]])
    assert inputs["char_ids"].shape == (2, 5, 50)
    assert (inputs["char_ids"][0, 3:] == 0).numpy().all() and (inputs["char_ids"][1] > 0).numpy().any(-1).all()
    padded = ClassifierPreprocessor(["<PAD>", "<UNK>", "a"], max_length=40, pad_to_multiple=4)(tf.constant(["a b a a x"]))
    np.testing.assert_array_equal(padded["word_ids"], [[2, 1, 2, 2, 1, 0, 0, 0]])   # width 5 -> 8
    assert padded["char_ids"].shape == (1, 8, 50) and not padded["char_ids"][0, 5:].numpy().any()
    with pytest.raises(ValueError, match="must start with <PAD>, <UNK>"):
        ClassifierPreprocessor(["a", "b"])


@pytest.mark.parametrize("num_mixes", [0, 2])
def test_shapes_and_what_trains(bilm, inputs, num_mixes):
    embedder = ElmoEmbedder(bilm, num_mixes=num_mixes) if num_mixes else None
    model = ElmoClassifier(9, 3, embedder=embedder, embedding_dim=4, lstm_units=5, dropout=0.0)
    assert model(inputs).shape == (2, 3) and model(inputs).dtype == tf.float32
    # the task BiLSTM reads [x_k; ELMo_k] (4 + 2P wide); the head reads [h; ELMo'] with a second mix
    assert model.bilstm.forward_layer.cell.kernel.shape[0] == 4 + (32 if num_mixes else 0)
    assert model.head.kernel.shape[0] == 10 + (32 if num_mixes == 2 else 0)
    frozen = {id(w) for w in bilm.weights}
    assert not frozen & {id(w) for w in model.trainable_weights}
    mixes = embedder.trainable_weights if embedder else []
    assert len(mixes) == 2 * num_mixes                                  # s (L+1 scalars) and γ per mix
    with tf.GradientTape() as tape:
        loss = model.compute_loss_sums((inputs, tf.constant([0, 2])), training=True)["loss"]
    grads = tape.gradient(loss, model.trainable_weights + bilm.weights)
    trainable = grads[:len(model.trainable_weights)]
    assert all(g is not None for g in trainable)
    by_id = {id(w): g for w, g in zip(model.trainable_weights, trainable)}
    assert all(np.abs(by_id[id(w)]).max() > 0 for w in mixes)          # the mixes learn
    assert all(g is None for g in grads[len(model.trainable_weights):])  # the biLM does not


def test_padding_and_batch_mates_do_not_change_a_sentence(bilm, inputs):
    model = ElmoClassifier(9, 2, embedder=ElmoEmbedder(bilm, num_mixes=2), embedding_dim=4, lstm_units=5)
    together = model(inputs, training=False).numpy()
    alone = model({k: v[:1, :3] for k, v in inputs.items()}, training=False).numpy()
    np.testing.assert_allclose(together[:1], alone, atol=1e-5)
    empty = model({"word_ids": tf.zeros((1, 2), tf.int32), "char_ids": tf.zeros((1, 2, 50), tf.int32)})
    np.testing.assert_allclose(empty.numpy(), model.head.bias.numpy()[None], atol=1e-6)  # pooled vector 0


@pytest.fixture(scope="module")
def job(bilm, tmp_path_factory):
    root = tmp_path_factory.mktemp("elmo_classifier")
    data = {"train": write_tsv(root / "train.tsv", toy_rows(64, 0)), "dev": write_tsv(root / "dev.tsv", toy_rows(16, 1))}
    elmo = save_bilm_run(bilm, ["<S>", "</S>", "<UNK>"], str(root / "elmo")).path
    # The shared job road (tests/job_harness.py): 4 steps straight, and 2 steps stopped and resumed to 4.
    check = check_job(lambda out, steps: finetune_elmo_classifier(out, steps=steps, elmo=elmo,
                                                                  log=lambda *_: None, **data, **CLASSIFIER_TINY),
                      root, steps=4, split_at=2, family="elmo_classifier")
    return {"root": root, "data": data, "second": check.resumed_summary, "whole": check.summary,
            "straight": check.run}


def test_job_resumes_exactly_and_reports_dev(job):
    assert job["second"]["steps_this_run"] == 2 and job["second"]["step"] == 4 and job["whole"]["step"] == 4
    a, b = job["second"]["classifier"], job["whole"]["classifier"]
    assert len(a.weights) == len(b.weights)
    for x, y in zip(a.weights, b.weights):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6, err_msg=x.path)
    assert job["second"]["dev"] == pytest.approx(job["whole"]["dev"])
    with open(os.path.join(job["straight"], "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["dev"]["examples"] == 16 and 0 <= metrics["dev"]["accuracy"] <= 1
    assert len(metrics["mix_weights"]) == 1 and sum(metrics["mix_weights"][0]["s"]) == pytest.approx(1.0)


def test_loader_restores_the_whole_model(job):
    model = load_run(job["straight"])
    assert isinstance(model, ElmoClassifier) and model.labels == ["0", "1"] and model.run_info.step == 4
    assert isinstance(model.preprocessor, ClassifierPreprocessor) and model.preprocessor.max_length == 8
    texts = ["good great movie", "the awful plot was poor"]
    np.testing.assert_allclose(model.predict_texts(texts), job["whole"]["classifier"].predict_texts(texts), atol=1e-5)
    with open(os.path.join(job["straight"], "config.json")) as f:
        config = json.load(f)
    assert config["model"]["config"]["labels"] == ["0", "1"]
    assert config["model"]["config"]["backbone"]["config"]["num_mixes"] == 1
    # the word vocabulary stays a file of the run (named relative to it), not a list inside config.json
    assert config["preprocessor"]["config"]["vocab"] == "words.txt" and config["assets"] == {"vocab": "words.txt"}


def test_a_damaged_word_vocabulary_is_one_line_naming_the_file(job, tmp_path):
    run = str(tmp_path / "run")
    shutil.copytree(job["straight"], run)
    with open(os.path.join(run, "words.txt"), "a") as f:
        f.write("extra\n")
    with pytest.raises(RunDirError, match=r"words\.txt: \d+ words, but the model has \d+") as info:
        load_elmo_classifier(run)
    assert "\n" not in str(info.value)


def test_preprocessor_and_labels_round_trip(tmp_path, inputs):
    words = tmp_path / "words.txt"
    words.write_text("<PAD>\n<UNK>\ngood\n")
    pre = ClassifierPreprocessor(str(words), max_length=5, max_characters=20, pad_to_multiple=4)
    spec = serialize(pre, str(tmp_path))
    assert spec["config"]["vocab"] == "words.txt"
    again = deserialize(spec, str(tmp_path))
    assert again.vocabulary_file == str(words) and again.vocab == pre.vocab and again.max_characters == 20
    texts = tf.constant(["good bad good"])
    for key, value in pre(texts).items():
        np.testing.assert_array_equal(again(texts)[key], value)
    inline = serialize(ClassifierPreprocessor(["<PAD>", "<UNK>", "x"]), str(tmp_path))   # a list stays a list
    assert deserialize(inline, str(tmp_path)).vocab == inline["config"]["vocab"] == ["<PAD>", "<UNK>", "x"]
    model = ElmoClassifier(9, embedder=None, labels=["neg", "pos", "neutral"], embedding_dim=4, lstm_units=3)
    rebuilt = deserialize(serialize(model, str(tmp_path)), str(tmp_path))
    assert rebuilt.labels == ["neg", "pos", "neutral"] and rebuilt.num_labels == 3 and rebuilt.backbone is None
    with pytest.raises(ValueError, match="2 labels for num_labels=3"):
        ElmoClassifier(9, 3, labels=["a", "b"])


def test_cli_static_baseline_and_errors(job, capsys):
    out = str(job["root"] / "static")
    argv = ["finetune", "elmo-classifier", "--train", job["data"]["train"], "--dev", job["data"]["dev"], "--no-elmo",
            "--steps", "2", "--embedding-dim", "4", "--lstm-units", "4", "--batch-size", "8", "--quiet", "--out", out]
    assert main(argv) == 0
    assert "dev accuracy" in capsys.readouterr().out
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["model"]["config"]["backbone"] is None
    assert load_run(out).backbone is None
    assert main(argv[:6] + ["--steps", "1", "--out", str(job["root"] / "no_elmo_given")]) == 2
    assert "give the ELMo run" in capsys.readouterr().err
