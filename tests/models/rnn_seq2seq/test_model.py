"""The RNN encoder-decoder translator (kerasplm/models/rnn_seq2seq/model.py): exact weight counts, the model harness,
source masking, teacher forcing equal to step-by-step decoding, and parity with the seed's formulas in numpy.

Seed parity (seed 001_7c98251cd258b33a.txt, §3.2 "注意力机制+循环神经网络"): the numpy functions below
re-implement

* ``masked_softmax(X, valid_lens)``: ``X = sequence_mask(X, valid_lens, value=-1e6)``, then softmax on the last
  axis (positions s >= valid_len replaced by -1e6);
* ``AdditiveAttention.forward``: ``features = tanh(W_q(queries).unsqueeze(2) + W_k(keys).unsqueeze(1))``,
  ``scores = w_v(features).squeeze(-1)``, ``attention_weights = masked_softmax(scores, valid_lens)``,
  ``bmm(attention_weights, values)`` (W_q, W_k, w_v: ``nn.Linear(..., bias=False)``);
* ``Seq2SeqAttentionDecoder.forward``, one step: ``query = hidden_state[-1]``, ``context = attention(query,
  enc_outputs, enc_outputs, enc_valid_lens)``, ``x = torch.cat((context, x), dim=-1)``, ``out, hidden_state =
  self.rnn(x, hidden_state)`` (``nn.GRU``: r = σ(W_ir x + b_ir + W_hr h + b_hr), z = σ(W_iz x + b_iz + W_hz h +
  b_hz), n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)), h' = (1 - z) ⊙ n + z ⊙ h), ``dense(out)``;

and §3.1's ``Seq2SeqDecoder.forward`` (no attention): ``X_and_context = torch.cat((X, context), 2)`` with the
context the encoder's last top-layer state. The kerasplm layers' weights are read into the seed's layout (Keras'
GRU kernel columns are [z | r | n], bias row 0 the input biases, row 1 the recurrent ones) and the outputs must
agree to 1e-5.
"""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.rnn_seq2seq import RNNSeq2Seq
from kerasplm.models import get_preset, list_presets
from kerasplm.models.rnn_seq2seq.model import PRESETS, num_parameters
from tests.harness import check_model

SRC = tf.constant([[2, 5, 6, 7, 3, 0], [2, 9, 3, 0, 0, 0]])
TGT = tf.constant([[2, 8, 9, 4], [2, 4, 0, 0]])
VARIANTS = {"gru_additive": {}, "none": dict(attention="none"), "dot": dict(attention="dot"),
            "general_lstm_bi_2": dict(attention="general", cell="lstm", bidirectional=True, num_layers=2)}


def _model(seed=0, **overrides):
    tf.keras.utils.set_random_seed(seed)
    config = get_preset("gru_bahdanau_tiny", input_vocab_size=12, target_vocab_size=10, **overrides)
    return RNNSeq2Seq.from_config_object(config, name="tiny")


@pytest.mark.parametrize("overrides", [{}, dict(attention="none", num_layers=2), dict(cell="lstm", bidirectional=True,
                                       num_layers=3, attention_units=6), dict(attention="general")])
def test_formula_counts_equal_count_params(overrides):
    model = _model(**overrides)
    assert num_parameters(model.config) == model.count_params()


def test_presets_are_listed_with_their_counts():
    rows = {r.name: r for r in list_presets("rnn_seq2seq")}
    assert set(rows) == set(PRESETS) >= {"gru_bahdanau", "rnn_seq2seq", "gru_bahdanau_tiny", "rnn_seq2seq_tiny"}
    # gru_bahdanau: 8000·128 ·2 embeddings; encoder GRUs 3·256·(128+256)+6·256 and 3·256·(256+256)+6·256;
    # decoder GRUs 3·256·(128+256+256)+6·256 and the same as the encoder's second; attention 2·256² + 256;
    # output 256·8000 + 8000.
    gru = lambda i, u: 3 * u * (i + u) + 6 * u
    expected = (2 * 8000 * 128 + gru(128, 256) + gru(256, 256) + gru(384, 256) + gru(256, 256)
                + 2 * 256 * 256 + 256 + 256 * 8000 + 8000)
    assert rows["gru_bahdanau"].num_parameters == expected
    assert rows["rnn_seq2seq"].num_parameters == expected - (2 * 256 * 256 + 256)


def test_model_harness(tmp_path):
    check_model(lambda: _model(**VARIANTS["general_lstm_bi_2"]), (SRC, TGT), expected_shapes=((2, 4, 10), {
        "decoder_layer1_block2": (2, 1, 4, 6)}), tmp_path=tmp_path, checks=("config", "checkpoint", "xla"))


def test_config_errors():
    for overrides, message in ((dict(cell="rnn"), "cell must be one of gru, lstm, got 'rnn'"),
                               (dict(attention="luong"), "attention must be one of additive, dot, general, none"),
                               (dict(bidirectional=True, units=15), "needs an even units"),
                               (dict(rate=1.0), r"dropout rate must be in \[0, 1\)")):
        with pytest.raises(ValueError, match=message):
            _model(**overrides)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_padding_changes_nothing_and_attention_skips_it(variant):
    model = _model(**VARIANTS[variant])
    logits, weights = model((SRC, TGT), training=False)
    wider, wider_weights = model((tf.pad(SRC, [[0, 0], [0, 3]]), TGT), training=False)
    np.testing.assert_allclose(wider.numpy(), logits.numpy(), atol=1e-5)
    if weights:
        alpha = weights["decoder_layer1_block2"].numpy()[:, 0]
        np.testing.assert_array_equal(alpha[1, :, 3:], 0.0)        # row 1 has 3 source tokens
        np.testing.assert_allclose(alpha.sum(-1), 1.0, rtol=1e-6)
        np.testing.assert_array_equal(wider_weights["decoder_layer1_block2"].numpy()[:, 0, :, 6:], 0.0)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_teacher_forcing_equals_the_cached_steps(variant):
    model = _model(**VARIANTS[variant])
    logits, _ = model((SRC, TGT), training=False)
    encoded, padding_mask = model.encode(SRC)
    memory = model.cross_attention_kv(encoded)
    cache = model.initial_cache(memory)
    for t in range(TGT.shape[1]):
        step_logits, _, cache = model.call_with_cache(TGT[:, t:t + 1], cache, t, memory, padding_mask)
        np.testing.assert_allclose(step_logits.numpy()[:, 0], logits.numpy()[:, t], atol=1e-5)


# ---- the seed's formulas in numpy ----
def seed_masked_softmax(X, valid_lens):
    X = X.copy()
    X[np.arange(X.shape[-1])[None, None, :] >= valid_lens[:, None, None] + np.zeros_like(X, dtype=int)] = -1e6
    e = np.exp(X - X.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def seed_additive_attention(W_q, W_k, w_v, queries, keys, values, valid_lens):
    features = np.tanh((queries @ W_q.T)[:, :, None, :] + (keys @ W_k.T)[:, None, :, :])
    scores = (features @ w_v.T)[..., 0]
    weights = seed_masked_softmax(scores, valid_lens)
    return weights @ values, weights


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def seed_gru_layer(p, x, h):
    """One step of one nn.GRU layer with PyTorch's weight layout (W_i*, W_h* as (out, in) row blocks r, z, n)."""
    W_ir, W_iz, W_in = np.split(p["weight_ih"], 3)
    W_hr, W_hz, W_hn = np.split(p["weight_hh"], 3)
    b_ir, b_iz, b_in = np.split(p["bias_ih"], 3)
    b_hr, b_hz, b_hn = np.split(p["bias_hh"], 3)
    r = sigmoid(x @ W_ir.T + b_ir + h @ W_hr.T + b_hr)
    z = sigmoid(x @ W_iz.T + b_iz + h @ W_hz.T + b_hz)
    n = np.tanh(x @ W_in.T + b_in + r * (h @ W_hn.T + b_hn))
    return (1 - z) * n + z * h


def torch_layout(cell):
    """A Keras GRUCell's weights as nn.GRU's: Keras' kernel (in, 3u) columns [z | r | n] -> rows r, z, n."""
    kernel, recurrent, bias = (w.numpy() for w in cell.weights)
    reorder = lambda w: np.concatenate([np.split(w, 3, axis=-1)[i] for i in (1, 0, 2)], axis=-1)
    return {"weight_ih": reorder(kernel).T, "weight_hh": reorder(recurrent).T,
            "bias_ih": reorder(bias[0]), "bias_hh": reorder(bias[1])}


@pytest.mark.parametrize("attention", ["additive", "none"])
def test_decoder_matches_the_seeds_formulas(attention):
    tf.keras.utils.set_random_seed(5)
    model = _model(seed=5, attention=attention, num_layers=2)
    encoded, padding_mask = model.encode(SRC)
    enc_outputs, enc_state = (np.asarray(t) for t in (encoded[0], tf.stack([s[0] for s in encoded[1]])))
    valid_lens = np.sum(SRC.numpy() != 0, axis=1)
    embedding = model.target_embedding.embeddings.numpy()
    layers = [torch_layout(cell) for cell in model.decoder_cells]
    dense_w, dense_b = (w.numpy() for w in model.final_layer.weights)
    hidden_state = list(enc_state)              # the seed's init_state: the encoder's last state, every layer
    context_fixed = enc_state[-1]               # §3.1: the encoder's last top-layer state
    expected_logits, expected_weights = [], []
    for t in range(TGT.shape[1]):
        x = embedding[TGT.numpy()[:, t]]
        if attention == "additive":
            a = model.attention
            context, weights = seed_additive_attention(a.W_q.kernel.numpy().T, a.W_k.kernel.numpy().T,
                                                       a.w_v.kernel.numpy().T, hidden_state[-1][:, None, :],
                                                       enc_outputs, enc_outputs, valid_lens)
            x = np.concatenate([context[:, 0], x], axis=-1)          # torch.cat((context, x), dim=-1)
            expected_weights.append(weights[:, 0])
        else:
            x = np.concatenate([x, context_fixed], axis=-1)          # torch.cat((X, context), 2)
        for layer, p in enumerate(layers):
            hidden_state[layer] = x = seed_gru_layer(p, x, hidden_state[layer])
        expected_logits.append(x @ dense_w + dense_b)
    logits, weights = model((SRC, TGT), training=False)
    np.testing.assert_allclose(logits.numpy(), np.stack(expected_logits, 1), atol=1e-5)
    if attention == "additive":
        np.testing.assert_allclose(weights["decoder_layer1_block2"].numpy()[:, 0], np.stack(expected_weights, 1),
                                   atol=1e-5)
