"""Unsupervised SimCSE: the loss against NumPy, dropout as the only noise, config and checkpoint round trips."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.sentence_embedding.simcse import BertSimCSE, alignment_uniformity, simcse_loss
from kerasplm.text.bert_tokenizer import BertPreprocessor, BertTokenizer
from tests.harness import check_model
from tests.models.bert.multiple_choice_toy import TINY, VOCAB

SENTENCES = ["the cat sat on the mat .", "the dog ran away", "the mat", "cat and dog"]


def numpy_simcse(first, second, temperature):
    a = first / np.linalg.norm(first, axis=-1, keepdims=True)
    b = second / np.linalg.norm(second, axis=-1, keepdims=True)
    logits = a @ b.T / temperature
    log_softmax = logits - logits.max(-1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(-1, keepdims=True))
    return -np.diag(log_softmax), logits


def test_loss_equals_numpy_on_fixed_embeddings():
    rng = np.random.default_rng(0)
    first, second = rng.normal(size=(5, 8)), rng.normal(size=(5, 8))
    second[2] = 3.0 * first[2]                      # a scaled copy: cosine 1, its loss is the smallest
    losses, logits = simcse_loss(tf.constant(first), tf.constant(second), temperature=0.05)
    expected_losses, expected_logits = numpy_simcse(first, second, 0.05)
    np.testing.assert_allclose(logits.numpy(), expected_logits, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(losses.numpy(), expected_losses, rtol=1e-5, atol=1e-5)
    assert losses.numpy().argmin() == 2 and logits.numpy()[2, 2] == pytest.approx(20.0, rel=1e-5)


@pytest.fixture(scope="module")
def inputs():
    return BertPreprocessor(BertTokenizer(VOCAB), sequence_length=10)(tf.constant(SENTENCES))


def tiny_simcse(pooling="cls"):
    keras.utils.set_random_seed(0)
    return BertSimCSE(BertBackbone(**TINY), pooling=pooling)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_dropout_is_the_noise_and_the_loss_matches_numpy(inputs, pooling):
    model = tiny_simcse(pooling)
    assert (model.mlp is not None) == (pooling == "cls")
    first, second = model(inputs, training=True).numpy(), model(inputs, training=True).numpy()
    assert not np.allclose(first, second)                                # two dropout masks, two views
    np.testing.assert_array_equal(model(inputs, training=False), model(inputs, training=False))
    # without dropout both views are equal: every row's positive (the diagonal) has cosine 1 and wins
    sums = model.compute_loss_sums(inputs, training=False)
    representation = model.training_representation(inputs, training=False).numpy().astype(np.float64)
    expected, logits = numpy_simcse(representation, representation, 0.05)
    assert float(sums["accuracy"]) == len(SENTENCES) and float(sums["weight"]) == len(SENTENCES)
    assert (logits.argmax(-1) == np.arange(len(SENTENCES))).all()
    np.testing.assert_allclose(float(sums["loss"]), expected.sum(), rtol=1e-4)


def test_round_trips_and_errors(tmp_path, inputs):
    model = check_model(tiny_simcse, inputs, expected_shapes=(4, 16), tmp_path=tmp_path,
                        checks=("config", "checkpoint"))
    assert model.get_config()["pooling"] == "cls" and model.get_config()["mlp"] is True
    with pytest.raises(ValueError, match="pooling must be one of cls, mean, max"):
        BertSimCSE(model.backbone, pooling="sum")
    with pytest.raises(ValueError, match="temperature"):
        BertSimCSE(model.backbone, temperature=0)


def test_alignment_uniformity_by_hand():
    x = np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0]])
    # unit rows: squared distances 2 (x0,x1), 4 (x0,x2), 2 (x1,x2)
    out = alignment_uniformity(x, x[[0, 2, 1]])
    assert out["uniformity"] == pytest.approx(np.log((2 * np.exp(-4) + np.exp(-8)) / 3))
    assert out["alignment"] == pytest.approx((0 + 2 + 2) / 3)
