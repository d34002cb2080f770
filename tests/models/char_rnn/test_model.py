"""The character-level RNN LM: the GRU/LSTM equations in numpy, the parameter formula, the cache (the state after
every position) against the full call, the loss, configs and presets."""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models import list_presets
from kerasplm.models.char_rnn.model import CharRNNBackbone, CharRNNConfig, CharRNNLanguageModel, num_parameters
from tests.harness import check_model


def make(cell="gru", num_layers=2, units=12, embedding_dim=8, vocab_size=20, max_positions=32, **kw):
    return CharRNNLanguageModel(CharRNNBackbone(vocab_size=vocab_size, cell=cell, num_layers=num_layers, units=units,
                                                embedding_dim=embedding_dim, max_positions=max_positions, **kw))


def ids(batch=3, length=9, vocab_size=20, seed=0):
    return tf.constant(np.random.RandomState(seed).randint(3, vocab_size, (batch, length)), tf.int32)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def numpy_lm(model, token_ids):
    """The module docstring's equations with the model's weights (Keras' gate orders: GRU z, r, h with
    ``reset_after``; LSTM i, f, c, o)."""
    c = model.backbone.config
    x = (model.backbone.embedding.get_weights()[0][token_ids] if c.embedding_dim
         else np.eye(c.vocab_size, dtype=np.float32)[token_ids])
    u = c.units
    for rnn in model.backbone.rnns:
        weights = rnn.get_weights()
        h = np.zeros((x.shape[0], u), np.float32)
        cell_state = np.zeros_like(h)
        outputs = []
        for t in range(x.shape[1]):
            if c.cell == "gru":
                kernel, recurrent, bias = weights
                xs, hs = x[:, t] @ kernel + bias[0], h @ recurrent + bias[1]
                z = sigmoid(xs[:, :u] + hs[:, :u])
                r = sigmoid(xs[:, u:2 * u] + hs[:, u:2 * u])
                candidate = np.tanh(xs[:, 2 * u:] + r * hs[:, 2 * u:])
                h = z * h + (1 - z) * candidate
            else:
                kernel, recurrent, bias = weights
                gates = x[:, t] @ kernel + h @ recurrent + bias
                i, f, g, o = (gates[:, k * u:(k + 1) * u] for k in range(4))
                cell_state = sigmoid(f) * cell_state + sigmoid(i) * np.tanh(g)
                h = sigmoid(o) * np.tanh(cell_state)
            outputs.append(h)
        x = np.stack(outputs, axis=1)
    kernel, bias = model.head.get_weights()
    return x @ kernel + bias


@pytest.mark.parametrize("cell,embedding_dim", [("gru", 8), ("lstm", 0)])
def test_the_model_computes_the_rnn_equations(cell, embedding_dim):
    model = make(cell, embedding_dim=embedding_dim)
    token_ids = ids()
    np.testing.assert_allclose(model(token_ids).numpy(), numpy_lm(model, token_ids.numpy()), atol=1e-5)


@pytest.mark.parametrize("cell,num_layers,embedding_dim", [("gru", 1, 0), ("gru", 2, 8), ("lstm", 1, 8),
                                                           ("lstm", 3, 0)])
def test_the_parameter_formula_counts_the_weights(cell, num_layers, embedding_dim):
    model = make(cell, num_layers=num_layers, embedding_dim=embedding_dim)
    assert model.count_params() == num_parameters(model.backbone.config)


def test_presets_are_listed_with_their_counts():
    rows = {r.name: r for r in list_presets("char_rnn")}
    assert set(rows) == {"char_rnn_tiny", "char_rnn_seed", "char_rnn_lstm"}
    # The seed's model: one GRU of 256 on one-hot inputs over 68 tokens, then a dense layer.
    assert rows["char_rnn_seed"].num_parameters == 3 * (68 * 256 + 256 * 256) + 6 * 256 + 256 * 68 + 68
    tiny = CharRNNLanguageModel.from_preset("char_rnn_tiny")
    assert tiny.count_params() == rows["char_rnn_tiny"].num_parameters


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_the_cache_holds_every_position_s_state(cell):
    """Right-padded prompts of lengths 2, 5 and 7 prefilled together (pad positions run through the RNN too), then
    each row stepped at its own position: the logits of the full call at those positions."""
    model = make(cell)
    token_ids = ids(length=10)
    full = model(token_ids).numpy()
    lengths = np.array([2, 5, 7], np.int32)
    prompts = token_ids.numpy()[:, :7] * (np.arange(7) < lengths[:, None])     # 0 past each row's length
    cache = model.init_cache(3, 12)
    _, _, cache = model.call_with_cache(tf.constant(prompts[:, :6]), cache, 0)
    for step in range(3):
        position = lengths - 1 + step
        current = token_ids.numpy()[np.arange(3), position][:, None]
        logits, _, cache = model.call_with_cache(tf.constant(current), cache, tf.constant(position))
        np.testing.assert_allclose(logits.numpy()[:, 0], full[np.arange(3), position], atol=1e-5)


def test_harness_config_checkpoint_bfloat16_and_xla(tmp_path):
    check_model(lambda: make("lstm", dropout=0.1), ids(), expected_shapes=(3, 9, 20), tmp_path=tmp_path,
                checks=("config", "checkpoint", "mixed_bfloat16", "xla"))


def test_the_loss_is_the_summed_next_character_cross_entropy():
    model = make()
    batch = ids(length=8).numpy()
    batch[0, 5:] = 0                                       # padding labels are ignored
    sums = model.compute_loss_sums(tf.constant(batch), training=False)
    logits = model(tf.constant(batch[:, :-1])).numpy().astype(np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    labels = batch[:, 1:]
    picked = np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
    np.testing.assert_allclose(float(sums["loss"]), -(picked * (labels > 0)).sum(), rtol=1e-5)
    assert float(sums["weight"]) == (labels > 0).sum()


@pytest.mark.parametrize("overrides,message", [
    ({"cell": "rnn"}, "cell must be one of ['gru', 'lstm']"),
    ({"units": 0}, "units must be a positive integer"),
    ({"embedding_dim": -1}, "embedding_dim must be an integer >= 0"),
    ({"dropout": 1.0}, "dropout must be in [0, 1)"),
])
def test_bad_configs_are_refused_in_one_line(overrides, message):
    with pytest.raises(ValueError) as error:
        CharRNNConfig(**{"vocab_size": 10, **overrides}).validate()
    assert message in str(error.value)


def test_a_vocabulary_of_another_size_is_refused():
    from kerasplm.text.char_vocab import CharacterTokenizer, build_char_vocab

    with pytest.raises(ValueError, match="4 tokens, but the model predicts vocab_size=20"):
        make().check_preprocessor(CharacterTokenizer(build_char_vocab("a")))
