"""BERT multiple choice: packing per choice, shapes, padding choices, loss by hand, harness, a tiny overfit."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.multiple_choice import BertMultipleChoice, BertMultipleChoicePreprocessor
from kerasplm.text.bert_tokenizer import BertPreprocessor, BertTokenizer
from tests.harness import check_model
from tests.models.bert.multiple_choice_toy import TINY, VOCAB

CONTEXTS = ["the cat sat", "the dog"]
CHOICES = [["on the mat .", "away", "ran"], ["ran away ."]]          # the second row has one choice


@pytest.fixture(scope="module")
def preprocessor():
    return BertMultipleChoicePreprocessor(BertPreprocessor(BertTokenizer(VOCAB), sequence_length=10))


def tiny_model(dropout=0.1):
    keras.utils.set_random_seed(0)
    backbone_dropout = {} if dropout else {"dropout": 0.0, "attention_dropout": 0.0}
    return BertMultipleChoice(BertBackbone(**TINY, **backbone_dropout), dropout=dropout)


def test_packs_each_choice_with_its_context(preprocessor):
    out = {k: v.numpy() for k, v in preprocessor(CONTEXTS, CHOICES).items()}
    assert out["token_ids"].shape == (2, 3, 10)
    # [CLS] the cat sat [SEP] on the mat . [SEP]
    np.testing.assert_array_equal(out["token_ids"][0, 0], [2, 5, 6, 8, 3, 10, 5, 11, 13, 3])
    np.testing.assert_array_equal(out["segment_ids"][0, 0], [0] * 5 + [1] * 5)
    np.testing.assert_array_equal(out["token_ids"][1, 0], [2, 5, 7, 3, 9, 12, 13, 3, 0, 0])
    # the row with one choice gets two all-zero padding choices
    assert not out["padding_mask"][1, 1:].any() and not out["token_ids"][1, 1:].any()
    fixed = BertMultipleChoicePreprocessor(preprocessor.bert_preprocessor, num_choices=4)
    assert fixed(tf.constant(CONTEXTS), tf.ragged.constant(CHOICES))["token_ids"].shape == (2, 4, 10)
    with pytest.raises(tf.errors.InvalidArgumentError, match="more than num_choices=2"):
        BertMultipleChoicePreprocessor(preprocessor.bert_preprocessor, num_choices=2)(CONTEXTS, CHOICES)


def test_padding_choices_change_nothing(preprocessor):
    model = tiny_model()
    wide = preprocessor(CONTEXTS, CHOICES)                       # row 1: one real choice, two padding choices
    probabilities = tf.nn.softmax(model(wide, training=False)).numpy()
    np.testing.assert_allclose(probabilities[1], [1.0, 0.0, 0.0], atol=1e-7)
    alone = model(preprocessor(CONTEXTS[:1], CHOICES[:1]), training=False)
    np.testing.assert_allclose(probabilities[0], tf.nn.softmax(alone).numpy()[0], rtol=1e-5)
    # a batch padded to more choices gives the same loss
    labels = tf.constant([1, 0])
    sums = model.compute_loss_sums((wide, labels), training=False)
    wider = BertMultipleChoicePreprocessor(preprocessor.bert_preprocessor, num_choices=5)(CONTEXTS, CHOICES)
    np.testing.assert_allclose(float(model.compute_loss_sums((wider, labels), training=False)["loss"]),
                               float(sums["loss"]), rtol=1e-6)


def test_loss_equals_hand_computation(preprocessor):
    model = tiny_model()
    inputs = preprocessor(CONTEXTS, CHOICES)
    labels = np.array([2, 0])
    sums = model.compute_loss_sums((inputs, tf.constant(labels)), training=False)
    # each choice scored on its own: the pooled output of its sequence alone, then w·pooled + b
    kernel, bias = (w.numpy().astype(np.float64) for w in model.head.weights)
    expected, correct = 0.0, 0
    for row, choices in enumerate(CHOICES):
        scores = []
        for c in range(len(choices)):
            single = {k: v[row:row + 1, c] for k, v in inputs.items()}
            pooled = model.backbone(single, training=False)["pooled_output"].numpy().astype(np.float64)
            scores.append(float(pooled[0] @ kernel[:, 0] + bias[0]))
        scores = np.array(scores)
        log_p = scores - scores.max() - np.log(np.exp(scores - scores.max()).sum())
        expected -= log_p[labels[row]]
        correct += int(scores.argmax() == labels[row])
    np.testing.assert_allclose(float(sums["loss"]), expected, rtol=1e-5)
    assert float(sums["weight"]) == 2.0 and float(sums["accuracy"]) == correct


def test_harness(tmp_path, preprocessor):
    inputs = preprocessor(CONTEXTS, CHOICES)
    model = check_model(tiny_model, inputs, expected_shapes=(2, 3), tmp_path=tmp_path,
                        checks=("config", "keras_file", "checkpoint", "xla"))
    assert model.get_config()["dropout"] == 0.1
    with pytest.raises(ValueError, match="dropout"):
        BertMultipleChoice(model.backbone, dropout=1.0)


def test_overfits_two_examples(preprocessor):
    model = tiny_model(dropout=0.0)
    model.preprocessor = preprocessor
    choices = [["ran", "sat"], ["sat", "away"]]
    inputs, labels = preprocessor(CONTEXTS, choices), tf.constant([1, 0])
    optimizer = keras.optimizers.Adam(1e-2)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            sums = model.compute_loss_sums((inputs, labels), training=True)
            loss = sums["loss"] / sums["weight"]
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    losses = [float(step()) for _ in range(20)]
    probabilities = model.predict_texts(CONTEXTS, choices)
    assert losses[-1] < 0.3 * losses[0] and probabilities[0, 1] > 0.9 and probabilities[1, 0] > 0.9
