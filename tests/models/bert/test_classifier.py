"""BertClassifier (harness, loss sums against hand computations, regression) and the exact classification metrics."""
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.classifier import BertClassifier, pool_sequence
from kerasplm.training.metrics import classification_metrics
from tests.harness import check_model

INPUTS = {"token_ids": tf.constant([[2, 5, 6, 7, 3], [2, 9, 3, 0, 0]]),
          "segment_ids": tf.constant([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]]),
          "padding_mask": tf.constant([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])}
TINY = dict(vocab_size=50, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32, max_positions=16)


def tiny_classifier(num_labels=3, dropout=0.1, pooling="cls"):
    keras.utils.set_random_seed(0)
    return BertClassifier(BertBackbone(**TINY), num_labels, dropout=dropout, pooling=pooling)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_harness(tmp_path, pooling):
    check_model(lambda: tiny_classifier(pooling=pooling), INPUTS, tmp_path=tmp_path, expected_shapes=(2, 3))


@pytest.mark.parametrize("pooling,reduce", [("mean", np.mean), ("max", np.max)])
def test_mean_and_max_pooling_read_the_real_tokens_only(pooling, reduce):
    model = tiny_classifier(pooling=pooling)
    logits = model(INPUTS, training=False).numpy()
    hidden = model.backbone(INPUTS, training=False)["sequence_output"].numpy()
    pooled = np.stack([reduce(hidden[0], 0), reduce(hidden[1, :3], 0)])   # row 1 has 3 real tokens of 5
    np.testing.assert_allclose(logits, pooled @ model.head.kernel.numpy() + model.head.bias.numpy(), atol=1e-5)
    padded = {k: tf.concat([v, tf.zeros([2, 2], v.dtype)], axis=1) for k, v in INPUTS.items()}
    np.testing.assert_allclose(model(padded, training=False).numpy(), logits, atol=1e-5)   # padding is not read
    assert BertClassifier.from_config(model.get_config()).pooling == pooling


def test_loss_sums_equal_hand_computation():
    model = tiny_classifier()
    labels = tf.constant([2, 0])
    sums = model.compute_loss_sums((INPUTS, labels), training=False)
    logits = model(INPUTS, training=False).numpy().astype(np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    assert float(sums["weight"]) == 2.0
    np.testing.assert_allclose(float(sums["loss"]), -(log_probs[0, 2] + log_probs[1, 0]), rtol=1e-5)
    assert float(sums["accuracy"]) == float((logits.argmax(-1) == [2, 0]).sum())
    pooled = model.backbone(INPUTS, training=False)["pooled_output"].numpy()
    np.testing.assert_allclose(logits, pooled @ model.head.kernel.numpy() + model.head.bias.numpy(), atol=1e-5)


def test_regression_is_mean_squared_error():
    model = tiny_classifier(num_labels=1)
    targets = tf.constant([0.5, -1.25])
    sums = model.compute_loss_sums((INPUTS, targets), training=False)
    values = model(INPUTS, training=False).numpy()[:, 0]
    assert set(sums) == {"loss", "weight"} and model.is_regression
    np.testing.assert_allclose(float(sums["loss"]), ((values - targets.numpy()) ** 2).sum(), rtol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_labels must be a positive integer"):
        BertClassifier(BertBackbone(**TINY), 0)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        BertClassifier(BertBackbone(**TINY), 2, dropout=1.0)
    with pytest.raises(ValueError, match="pooling must be one of cls, mean, max"):
        pool_sequence(tf.zeros([1, 2, 3]), tf.ones([1, 2]), "sum")
    with pytest.raises(ValueError, match="pooling must be one of cls, mean, max, got 'sum'"):
        BertClassifier(BertBackbone(**TINY), 2, pooling="sum")


def test_pooling():
    hidden = tf.constant([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = tf.constant([[1, 1, 0]])
    assert pool_sequence(hidden, mask, "mean").numpy().tolist() == [[2.0, 3.0]]
    assert pool_sequence(hidden, mask, "cls").numpy().tolist() == [[1.0, 2.0]]
    assert pool_sequence(hidden, mask, "max").numpy().tolist() == [[3.0, 4.0]]     # the padding's 100 ignored


def _mcc(tp, tn, fp, fn):
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / denominator if denominator else 0.0


def test_binary_metrics_equal_hand_formulas():
    labels = [1, 1, 1, 1, 1, 0, 0, 0]
    predictions = [1, 1, 1, 0, 0, 0, 0, 1]            # TP 3, FN 2, TN 2, FP 1
    got = classification_metrics(labels, predictions, 2)
    precision, recall = 3 / 4, 3 / 5
    assert got["accuracy"] == 5 / 8 and got["examples"] == 8
    assert got["f1"] == pytest.approx(2 * precision * recall / (precision + recall))
    assert got["mcc"] == pytest.approx(_mcc(3, 2, 1, 2))
    perfect = classification_metrics([0, 1, 1], [0, 1, 1], 2)
    assert perfect == {"accuracy": 1.0, "f1": 1.0, "mcc": pytest.approx(1.0), "examples": 3}
    inverted = classification_metrics([0, 1, 1, 0], [1, 0, 0, 1], 2)
    assert inverted["mcc"] == pytest.approx(-1.0) and inverted["f1"] == 0.0
    constant = classification_metrics([0, 1, 1, 0], [1, 1, 1, 1], 2)   # one predicted class: MCC's 0/0 -> 0
    assert constant["mcc"] == 0.0 and constant["f1"] == pytest.approx(2 * 0.5 * 1 / 1.5)


def test_multiclass_metrics_equal_hand_formulas():
    labels = [0, 0, 1, 1, 2, 2, 2]
    predictions = [0, 1, 1, 1, 2, 0, 2]
    got = classification_metrics(labels, predictions, 4)   # class 3 never seen: skipped in the macro F1
    f1 = [2 * 1 / (2 + 2), 2 * 2 / (3 + 2), 2 * 2 / (2 + 3)]
    assert got["accuracy"] == pytest.approx(5 / 7)
    assert got["f1"] == pytest.approx(sum(f1) / 3)
    # Gorodkin's R_K: (c·s − Σ p_k t_k) / sqrt((s² − Σ p_k²)(s² − Σ t_k²)), c correct, s total.
    p, t = [2, 3, 2], [2, 2, 3]
    expected = (5 * 7 - sum(a * b for a, b in zip(p, t))) / math.sqrt((49 - sum(a * a for a in p)) * (49 - sum(b * b for b in t)))
    assert got["mcc"] == pytest.approx(expected)
    with pytest.raises(ValueError, match="vectors of one length"):
        classification_metrics([0, 1], [0], 2)
