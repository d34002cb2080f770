import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.training import (
    MaskedAccuracy,
    MaskedSparseCategoricalCrossentropy,
    fused_masked_cross_entropy,
    loss_function,
    masked_accuracy,
    masked_accuracy_counts,
    masked_sparse_cross_entropy,
)


def np_log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def np_masked_ce(labels, logits, pad_id=0, eps=0.0):
    logp = np_log_softmax(logits.astype(np.float64))
    vocab = logits.shape[-1]
    target = np.eye(vocab)[labels] * (1 - eps) + eps / vocab
    per_token = -(target * logp).sum(-1)
    mask = labels != pad_id
    return per_token[mask].sum(), mask.sum()


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    labels = rng.integers(1, 7, size=(3, 5))
    labels[0, 3:] = 0
    labels[2, 1:] = 0
    logits = rng.normal(size=(3, 5, 7)).astype(np.float32) * 3
    # Make pad positions huge so that including them would change the result a lot.
    logits[labels == 0] = 50.0 * rng.normal(size=7)
    return labels, logits


def test_masked_ce_matches_numpy_and_excludes_padding(batch):
    labels, logits = batch
    loss_sum, num_tokens = masked_sparse_cross_entropy(labels, logits)
    expected_sum, expected_count = np_masked_ce(labels, logits)
    assert float(num_tokens) == expected_count == 15 - 2 - 4
    np.testing.assert_allclose(float(loss_sum), expected_sum, rtol=1e-5)
    np.testing.assert_allclose(float(loss_function(labels, logits)), expected_sum / expected_count,
                               rtol=1e-5)


@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_label_smoothing_matches_numpy(batch, eps):
    labels, logits = batch
    loss_sum, _ = masked_sparse_cross_entropy(labels, logits, label_smoothing=eps)
    expected_sum, _ = np_masked_ce(labels, logits, eps=eps)
    np.testing.assert_allclose(float(loss_sum), expected_sum, rtol=1e-5)


def test_other_pad_id(batch):
    labels, logits = batch
    labels = np.where(labels == 0, -100, labels)
    loss_sum, num_tokens = masked_sparse_cross_entropy(labels, logits, pad_id=-100)
    expected_sum, expected_count = np_masked_ce(labels.clip(0), logits, pad_id=0)
    assert float(num_tokens) == expected_count
    np.testing.assert_allclose(float(loss_sum), expected_sum, rtol=1e-5)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_low_precision_logits_computed_in_float32(batch, dtype):
    labels, logits = batch
    low = tf.cast(logits, dtype)
    loss_sum, _ = masked_sparse_cross_entropy(labels, low)
    assert loss_sum.dtype == tf.float32
    expected_sum, _ = np_masked_ce(labels, tf.cast(low, tf.float32).numpy())
    np.testing.assert_allclose(float(loss_sum), expected_sum, rtol=1e-5)


def test_all_padding_gives_zero_not_nan():
    labels = np.zeros((2, 3), np.int32)
    logits = np.ones((2, 3, 4), np.float32)
    assert float(loss_function(labels, logits)) == 0.0
    assert float(masked_accuracy(labels, logits)) == 0.0


def test_accuracy_counts(batch):
    labels, logits = batch
    correct, total = masked_accuracy_counts(labels, logits)
    mask = labels != 0
    expected = ((logits.argmax(-1) == labels) & mask).sum()
    assert float(correct) == expected and float(total) == mask.sum()
    np.testing.assert_allclose(float(masked_accuracy(labels, logits)), expected / mask.sum())


def test_keras_loss_and_metric_match_functions(batch):
    labels, logits = batch
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    expected_sum, expected_count = np_masked_ce(labels, logits, eps=0.1)
    np.testing.assert_allclose(float(loss(labels, logits)), expected_sum / expected_count,
                               rtol=1e-5)

    metric = MaskedAccuracy()
    metric.update_state(labels[:2], logits[:2])
    metric.update_state(labels[2:], logits[2:])
    correct, total = masked_accuracy_counts(labels, logits)
    np.testing.assert_allclose(float(metric.result()), float(correct) / float(total))
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_keras_objects_serialize():
    loss = keras.losses.deserialize(
        keras.losses.serialize(MaskedSparseCategoricalCrossentropy(pad_id=3, label_smoothing=0.2))
    )
    assert isinstance(loss, MaskedSparseCategoricalCrossentropy)
    assert (loss.pad_id, loss.label_smoothing) == (3, 0.2)
    metric = keras.metrics.deserialize(keras.metrics.serialize(MaskedAccuracy(pad_id=3)))
    assert isinstance(metric, MaskedAccuracy) and metric.pad_id == 3


def test_compile_fit_smoke(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.integers(1, 9, size=(32, 6)).astype(np.int32)
    x[:, 4:] = 0
    y = np.where(x > 0, 9 - x, 0).astype(np.int32)
    model = keras.Sequential([
        keras.Input((6,), dtype="int32"),
        keras.layers.Embedding(10, 16),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer=keras.optimizers.Adam(0.05),
                  loss=MaskedSparseCategoricalCrossentropy(), metrics=[MaskedAccuracy()])
    history = model.fit(x, y, batch_size=32, epochs=30, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]
    assert history.history["masked_accuracy"][-1] > 0.9
    # model.evaluate over one full batch equals the functional computation.
    results = model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)
    logits = model.predict(x, verbose=0)
    np.testing.assert_allclose(results["loss"], float(loss_function(y, logits)), rtol=1e-4)
    np.testing.assert_allclose(results["masked_accuracy"], float(masked_accuracy(y, logits)),
                               rtol=1e-6)
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.loss, MaskedSparseCategoricalCrossentropy)


# ---------------------------------------------------------------- fused (XLA) loss + accuracy
def _np_ce_grad(labels, logits, pad_id=0, eps=0.0):
    """d(masked CE sum)/d(logits) = mask * (softmax(logits) - q), q the smoothed one-hot target."""
    p = np.exp(np_log_softmax(logits.astype(np.float64)))
    vocab = logits.shape[-1]
    target = np.eye(vocab)[np.where(labels == pad_id, 0, labels)] * (1 - eps) + eps / vocab
    return (p - target) * (labels != pad_id)[..., None]


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_fused_loss_counts_and_gradient_match_numpy(batch, eps):
    labels, logits = batch
    logits_var = tf.Variable(logits)
    with tf.GradientTape() as tape:
        loss_sum, num_tokens, correct = fused_masked_cross_entropy(labels, logits_var, label_smoothing=eps)
    grad = tape.gradient(loss_sum, logits_var)
    expected_sum, expected_count = np_masked_ce(labels, logits, eps=eps)
    np.testing.assert_allclose(float(loss_sum), expected_sum, rtol=1e-5)
    assert float(num_tokens) == expected_count
    assert float(correct) == float(masked_accuracy_counts(labels, logits)[0])
    np.testing.assert_allclose(grad.numpy(), _np_ce_grad(labels, logits, eps=eps), atol=1e-6)


def test_fused_loss_scales_upstream_gradient_and_other_pad_id(batch):
    labels, logits = batch
    labels = np.where(labels == 0, -100, labels)
    logits_var = tf.Variable(logits)
    with tf.GradientTape() as tape:
        loss_sum, num_tokens, _ = fused_masked_cross_entropy(labels, logits_var, pad_id=-100)
        scaled = 2.5 * loss_sum  # e.g. a loss-scale factor: the chain rule must apply it
    grad = tape.gradient(scaled, logits_var)
    expected_sum, expected_count = np_masked_ce(labels.clip(0), logits)
    np.testing.assert_allclose(float(loss_sum), expected_sum, rtol=1e-5)
    assert float(num_tokens) == expected_count
    np.testing.assert_allclose(grad.numpy(), 2.5 * _np_ce_grad(labels, logits, pad_id=-100), atol=1e-5)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_fused_loss_inside_a_compiled_step_equals_the_unfused_one(batch, jit_compile):
    labels, logits = batch
    logits_var = tf.Variable(logits)

    @tf.function(jit_compile=jit_compile)
    def both():
        with tf.GradientTape(persistent=True) as tape:
            fused_sum, _, fused_correct = fused_masked_cross_entropy(labels, logits_var, label_smoothing=0.2)
            plain_sum, _ = masked_sparse_cross_entropy(labels, logits_var, label_smoothing=0.2)
        return (fused_sum, plain_sum, fused_correct, masked_accuracy_counts(labels, logits_var)[0],
                tape.gradient(fused_sum, logits_var), tape.gradient(plain_sum, logits_var))

    fused_sum, plain_sum, fused_correct, plain_correct, fused_grad, plain_grad = both()
    np.testing.assert_allclose(float(fused_sum), float(plain_sum), rtol=1e-6)
    assert float(fused_correct) == float(plain_correct)
    np.testing.assert_allclose(fused_grad.numpy(), plain_grad.numpy(), atol=1e-6)


def test_fused_loss_low_precision_logits(batch):
    labels, logits = batch
    low = tf.Variable(tf.cast(logits, tf.bfloat16))
    with tf.GradientTape() as tape:
        loss_sum, _, _ = fused_masked_cross_entropy(labels, low)
    grad = tape.gradient(loss_sum, low)
    assert loss_sum.dtype == tf.float32 and grad.dtype == tf.bfloat16
    expected_sum, _ = np_masked_ce(labels, tf.cast(low, tf.float32).numpy())
    np.testing.assert_allclose(float(loss_sum), expected_sum, rtol=1e-5)


def test_fused_accuracy_counts_a_tie_with_the_label_as_correct():
    labels = np.array([[2, 1, 0]])
    logits = np.zeros((1, 3, 4), np.float32)  # every class ties; argmax would say class 0
    logits[0, 1, 3] = 1.0                      # position 1: a strict winner that is not the label
    _, num_tokens, correct = fused_masked_cross_entropy(labels, logits)
    assert float(num_tokens) == 2.0 and float(correct) == 1.0
    assert float(masked_accuracy_counts(labels, logits)[0]) == 0.0  # argmax semantics differ on ties
