"""ScreenedArgmax: the float32 argmax from a bfloat16 screen with a certificate, and its fallback; greedy decoding
through the engine gives the same tokens with and without the screen."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.generation import engine, generate
from kerasplm.generation.screened_argmax import ScreenedArgmax, rounding_constant
from kerasplm.models.gpt.model import GPT


def numpy_argmax(hidden, table, exclude_id=-1):
    logits = hidden.astype(np.float64) @ table.astype(np.float64).T
    if exclude_id >= 0:
        logits[:, exclude_id] = -np.inf
    return logits.argmax(-1)


def traced(fn):
    """``fn`` XLA-compiled, as the engine runs it (the bfloat16 screen has no plain TensorFlow kernel)."""
    return tf.function(fn, jit_compile=True)


@pytest.mark.parametrize("vocab_size,hidden_size,scale", [(1000, 64, 1.0), (777, 48, 30.0), (50, 16, 1e-3)])
def test_equals_the_float32_argmax(vocab_size, hidden_size, scale):
    """Vocabularies that do not fill the last chunk, large and tiny hidden states; the padding id never wins."""
    rng = np.random.default_rng(vocab_size)
    table = rng.normal(0, 0.05, (vocab_size, hidden_size)).astype(np.float32)
    hidden = (scale * rng.normal(0, 1, (64, hidden_size))).astype(np.float32)
    for exclude_id in (-1, 0, 7):
        screen = ScreenedArgmax(tf.constant(table), exclude_id=exclude_id)
        expected = numpy_argmax(hidden, table, exclude_id)
        np.testing.assert_array_equal(traced(screen)(tf.constant(hidden)).numpy(), expected)
    # The padding id wins the plain argmax of a row built for it, and the screen still never picks it.
    row = table[7:8] * 100
    assert numpy_argmax(row, table) == [7] and traced(screen)(tf.constant(row)).numpy()[0] != 7


def test_the_bound_holds_and_is_tight_enough_to_certify():
    """|screen − float32 logits| <= bound on every entry (also for rows of very different norms), and a random
    GPT-2-like step (σ 0.02 table, unit-variance hidden state) is certified without the fallback."""
    rng = np.random.default_rng(0)
    table = rng.normal(0, 0.02, (5000, 256)).astype(np.float32)
    table[:10] *= 50                                                       # a few long rows
    hidden = (rng.normal(0, 1, (16, 256)) * np.logspace(-3, 3, 16)[:, None]).astype(np.float32)
    screen = ScreenedArgmax(tf.constant(table))
    approx = traced(screen.scores)(tf.constant(hidden)).numpy()[:, :5000]
    exact = hidden.astype(np.float64) @ table.astype(np.float64).T
    bound = screen.bound(tf.constant(hidden)).numpy()
    assert (np.abs(approx - exact) <= bound[:, None]).all()
    assert np.abs(approx - exact).max(axis=1).min() > 0                   # the screen is not exact
    assert 2 ** -7 < rounding_constant(256) < 2 ** -7 + 2 ** -12      # 2u + u², plus float32 summation
    plain = ScreenedArgmax(tf.constant(table[10:]))
    gpt_like = rng.normal(0, 1, (4, 256)).astype(np.float32)
    token, certified = traced(plain.screen)(tf.constant(gpt_like))
    assert bool(certified)                                                # no fallback needed
    np.testing.assert_array_equal(token.numpy(), numpy_argmax(gpt_like, table[10:]))


def test_near_ties_fall_back_to_the_full_logits():
    """Near-twins of the winner in more chunks than are re-scored, closer than the screen's error: the
    certificate fails and the full float32 argmax decides (a near tie inside the re-scored chunks is settled
    exactly and needs no fallback)."""
    rng = np.random.default_rng(1)
    table = rng.normal(0, 0.02, (300, 32)).astype(np.float32)
    hidden = rng.normal(0, 1, (1, 32)).astype(np.float32)
    winner = int(numpy_argmax(hidden, table)[0])
    for chunk in range(9):                                   # slightly lower than the winner: a tie for bfloat16
        if chunk != winner // 32:
            table[chunk * 32 + 5] = table[winner] - (chunk + 1) * 1e-6 * hidden[0] / np.linalg.norm(hidden[0]) ** 2
    assert numpy_argmax(hidden, table)[0] == winner
    screen = ScreenedArgmax(tf.constant(table))
    assert not bool(traced(screen.screen)(tf.constant(hidden))[1])        # no certificate: the fallback decides
    np.testing.assert_array_equal(traced(screen)(tf.constant(hidden)).numpy(), numpy_argmax(hidden, table))
    nan = tf.fill([1, 32], float("nan"))                                  # non-finite: no certificate either
    assert not bool(traced(screen.screen)(nan)[1]) and traced(screen)(nan).numpy().shape == (1,)


def test_greedy_generation_is_the_same_with_and_without_the_screen(monkeypatch):
    """A random GPT (vocabulary not a multiple of the chunk) decodes ragged prompts to the same tokens through
    the screened engine path as through full logits, and as the uncached reference (test_engine)."""
    tf.keras.utils.set_random_seed(0)
    model = GPT.from_preset("gpt_tiny", vocab_size=1003)
    assert model.output_table is not None
    prompts = tf.constant([[5, 9, 11, 0], [7, 3, 0, 0], [1, 2, 3, 4]], tf.int32)
    lengths = tf.constant([3, 2, 4], tf.int32)
    screens = []
    original = engine.ScreenedArgmax
    monkeypatch.setattr(engine, "ScreenedArgmax", lambda *a, **k: screens.append(original(*a, **k)) or screens[-1])
    screened = generate(model, prompts, lengths, max_new_tokens=12, pad_id=0)
    assert len(screens) == 1                                              # traced with the screen
    one_row = generate(model, prompts[:1], lengths[:1], max_new_tokens=12, pad_id=0)
    assert len(screens) == 1                                              # one row: plain logits (not faster)
    plain = generate(model, prompts, lengths, max_new_tokens=12, pad_id=0, screened_greedy=False)
    np.testing.assert_array_equal(screened.tokens.numpy(), plain.tokens.numpy())
    np.testing.assert_array_equal(one_row.tokens.numpy(), plain.tokens.numpy()[:1])
    assert not (screened.tokens.numpy() == 0).any()                       # the padding id is never generated


def test_only_float32_models_are_screened():
    """Under mixed precision the logits are not float32 ones: no table is offered and the plain path decodes."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = GPT.from_preset("gpt_tiny")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert model.output_table is None
    assert generate(model, tf.constant([[5, 9]]), max_new_tokens=3).tokens.shape == (1, 3)
