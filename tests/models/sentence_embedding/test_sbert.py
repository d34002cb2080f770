"""Sentence-BERT: the three objectives' losses against NumPy on the same vectors, max pooling with padding, the
correlations against SciPy, config and checkpoint round trips, bad arguments."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.sentence_embedding.sbert import (BertSentenceBert, cosine_similarity, euclidean_distance, pair_features,
                                        pearson, spearman, triplet_losses)
from kerasplm.models.bert.classifier import pool_sequence
from kerasplm.text.bert_tokenizer import BertPreprocessor, BertTokenizer
from tests.harness import check_model
from tests.models.bert.multiple_choice_toy import TINY, VOCAB

# Three sentences per example: enough for every objective (pairs read the first two).
EXAMPLES = [["the cat sat on the mat .", "the dog ran away", "mat"],
            ["cat and dog", "the mat", "the cat ran on the mat ."],
            ["dog", "the dog sat", "away ."]]


def numpy_cross_entropy(logits, labels):
    shifted = logits - logits.max(-1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return -log_softmax[np.arange(len(labels)), labels]


def numpy_cosine(u, v):
    return (u * v).sum(-1) / (np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1))


def numpy_triplet(a, p, n, margin):
    return np.maximum(np.linalg.norm(a - p, axis=-1) - np.linalg.norm(a - n, axis=-1) + margin, 0.0)


def test_the_formulas_on_fixed_vectors():
    rng = np.random.default_rng(0)
    a, p, n = (rng.normal(size=(6, 5)) for _ in range(3))
    p[1] = a[1]                                          # d(a, p) = 0: finite, and its gradient too
    np.testing.assert_allclose(pair_features(a, p).numpy(), np.concatenate([a, p, np.abs(a - p)], -1))
    np.testing.assert_allclose(cosine_similarity(a, n).numpy(), numpy_cosine(a, n), rtol=1e-6)
    losses, positive, negative = triplet_losses(tf.constant(a), tf.constant(p), tf.constant(n), margin=1.5)
    np.testing.assert_allclose(losses.numpy(), numpy_triplet(a, p, n, 1.5), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(negative.numpy(), np.linalg.norm(a - n, axis=-1), rtol=1e-6)
    assert positive.numpy()[1] == pytest.approx(0.0, abs=1e-5)
    x = tf.constant(a)
    with tf.GradientTape() as tape:
        tape.watch(x)
        distance = euclidean_distance(x, tf.constant(p))
    assert np.isfinite(tape.gradient(distance, x).numpy()).all()


@pytest.fixture(scope="module")
def preprocessor():
    return BertPreprocessor(BertTokenizer(VOCAB), sequence_length=10)


def columns_inputs(preprocessor, k):
    """EXAMPLES' first k sentences as the model's ``(B, k, T)`` inputs."""
    packed = preprocessor(tf.constant([s for row in EXAMPLES for s in row[:k]]))
    return {key: tf.reshape(value, [len(EXAMPLES), k, -1]) for key, value in packed.items()}


def tiny_sbert(objective, pooling="mean", **kwargs):
    keras.utils.set_random_seed(0)
    labels = ["contradiction", "entailment", "neutral"] if objective == "classification" else None
    return BertSentenceBert(BertBackbone(**TINY), objective, pooling, labels=labels, **kwargs)


@pytest.mark.parametrize("objective,pooling", [("classification", "mean"), ("regression", "max"),
                                               ("triplet", "cls")])
def test_the_model_losses_are_the_formulas_on_its_own_embeddings(preprocessor, objective, pooling):
    model = tiny_sbert(objective, pooling, margin=0.5)
    inputs = columns_inputs(preprocessor, model.columns)
    embeddings = model.embed_columns(inputs, training=False).numpy().astype(np.float64)
    # the columns' embeddings are the model's call on each sentence alone (what the embedder export serves)
    alone = model.embed_texts([row[1] for row in EXAMPLES], preprocessor=preprocessor)
    np.testing.assert_allclose(embeddings[:, 1], alone, atol=1e-5)
    u, v = embeddings[:, 0], embeddings[:, 1]
    if objective == "classification":
        labels = np.array([2, 0, 1])
        kernel, bias = (w.numpy().astype(np.float64) for w in model.head.weights)
        logits = np.concatenate([u, v, np.abs(u - v)], -1) @ kernel + bias        # W_t (u, v, |u - v|)
        sums = model.compute_loss_sums((inputs, tf.constant(labels)), training=False)
        expected = {"loss": numpy_cross_entropy(logits, labels).sum(), "accuracy": (logits.argmax(-1) == labels).sum()}
    elif objective == "regression":
        scores = np.array([0.0, 0.4, 1.0])
        sums = model.compute_loss_sums((inputs, tf.constant(scores, tf.float32)), training=False)
        expected = {"loss": ((numpy_cosine(u, v) - scores) ** 2).sum()}
    else:
        n = embeddings[:, 2]
        sums = model.compute_loss_sums(inputs, training=False)
        closer = np.linalg.norm(u - v, axis=-1) < np.linalg.norm(u - n, axis=-1)
        expected = {"loss": numpy_triplet(u, v, n, 0.5).sum(), "accuracy": closer.sum()}
    assert float(sums["weight"]) == len(EXAMPLES) and set(sums) == {"weight", *expected}
    for key, value in expected.items():
        assert float(sums[key]) == pytest.approx(value, rel=1e-4, abs=1e-5), key


def test_max_pooling_ignores_padding():
    hidden = np.array([[[-3.0, 5.0], [-1.0, -2.0], [9.0, 9.0]],      # row 0: two real tokens, padding holds 9s
                       [[-4.0, -6.0], [0.0, 0.0], [0.0, 0.0]],       # row 1: one real negative token, zero padding
                       [[7.0, 7.0], [7.0, 7.0], [7.0, 7.0]]])        # row 2: no real token
    mask = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    expected = [[-1.0, 5.0], [-4.0, -6.0], [0.0, 0.0]]
    for dtype in (tf.float32, tf.bfloat16):
        pooled = pool_sequence(tf.constant(hidden, dtype), tf.constant(mask), "max")
        assert pooled.dtype == dtype and tf.cast(pooled, tf.float32).numpy().tolist() == expected
    # the gradient reaches the winning real positions only
    x = tf.constant(hidden, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        total = tf.reduce_sum(pool_sequence(x, tf.constant(mask), "max"))
    np.testing.assert_array_equal(tape.gradient(total, x).numpy(),
                                  [[[0, 1], [1, 0], [0, 0]], [[1, 1], [0, 0], [0, 0]], [[0, 0], [0, 0], [0, 0]]])


def test_a_sentences_embedding_does_not_depend_on_its_padding(preprocessor):
    backbone = tiny_sbert("triplet").backbone
    texts = tf.constant(["the cat sat", "the dog ran away on the mat ."])
    narrow, wide = preprocessor(texts), preprocessor.with_length(16, pad_to_length=True)(texts)
    assert narrow["token_ids"].shape[1] == 10 and wide["token_ids"].shape[1] == 16
    for pooling in ("max", "mean"):
        model = BertSentenceBert(backbone, "triplet", pooling)
        np.testing.assert_allclose(model(narrow, training=False).numpy(), model(wide, training=False).numpy(),
                                   atol=1e-5, err_msg=pooling)


def test_correlations_equal_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    gold = rng.integers(0, 6, size=40) / 5.0                      # many ties, as STS scores have
    predicted = gold + rng.normal(scale=0.3, size=40)
    predicted[:4] = predicted[4]                                  # ties among the predictions too
    assert spearman(predicted, gold) == pytest.approx(stats.spearmanr(predicted, gold)[0], abs=1e-12)
    assert pearson(predicted, gold) == pytest.approx(stats.pearsonr(predicted, gold)[0], abs=1e-12)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0) and pearson([1, 1, 1], [1, 2, 3]) == 0.0


def test_round_trips_and_errors(tmp_path, preprocessor):
    inputs = preprocessor(tf.constant([row[0] for row in EXAMPLES]))
    model = check_model(lambda: tiny_sbert("classification", "max"), inputs, expected_shapes=(3, 16),
                        tmp_path=tmp_path, checks=("config", "checkpoint"))
    config = model.get_config()
    assert (config["objective"], config["pooling"], config["num_labels"], config["margin"]) == \
        ("classification", "max", 3, 1.0)
    assert config["labels"] == ["contradiction", "entailment", "neutral"]
    regression = BertSentenceBert.from_config(tiny_sbert("regression").get_config())
    assert regression.head is None and regression.num_labels is None and regression.columns == 2
    backbone = model.backbone
    for kwargs, message in [(dict(objective="contrastive"), "objective must be one of classification, regression, "
                                                            "triplet"),
                            (dict(objective="classification"), "needs num_labels >= 2"),
                            (dict(objective="classification", labels=["a", "b"], num_labels=3), "2 label names"),
                            (dict(objective="triplet", labels=["a", "b"]), "takes no labels"),
                            (dict(objective="triplet", margin=0), "margin must be a number > 0"),
                            (dict(objective="triplet", pooling="sum"), "pooling must be one of cls, mean, max")]:
        with pytest.raises(ValueError, match=message):
            BertSentenceBert(backbone, **kwargs)
    with pytest.raises(ValueError, match="no classification head"):
        regression.pair_logits(tf.zeros([1, 16]), tf.zeros([1, 16]))
