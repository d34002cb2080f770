"""bilm-tf conversion: an HDF5 file written here in bilm-tf's layout with known random values, converted into
a run directory, gives the ELMo layers of a NumPy re-implementation of bilm-tf's forward pass."""
import json

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from kerasplm.cli import main  # noqa: E402
import tensorflow as tf  # noqa: E402

from kerasplm.models.elmo.convert import load_bilm_tf  # noqa: E402
from kerasplm.models.elmo.model import ElmoLanguageModel  # noqa: E402
from kerasplm.models.elmo.runs import load_elmo  # noqa: E402
from kerasplm.runs import load_run  # noqa: E402
from tests.models.elmo.toys import (CHAR_DIM, FILTERS, MAX_CHARS, OPTIONS, P, U, bilm_tf_arrays,  # noqa: E402
                                   write_files)

SENTENCES = ["the cat sat down", "é ok"]


# ---- bilm-tf's forward pass in NumPy (from its model.py as documented: char CNN, highway, LSTMCell, residual)
def char_rows(sentence):
    def row(ids):
        return np.array([c + 1 for c in ids + [260] * (MAX_CHARS - len(ids))])
    words = [row([258, *w.encode("utf-8")[:MAX_CHARS - 2], 259]) for w in sentence.split()]
    return np.stack([row([258, 256, 259]), *words, row([258, 257, 259])])


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def lstm(xs, w, b, wp):
    c, m, out = np.zeros(U), np.zeros(P), []
    for x in xs:
        i, j, f, o = np.split(np.concatenate([x, m]) @ w + b, 4)
        c = np.clip(sigmoid(f + 1.0) * c + sigmoid(i) * np.tanh(j), -1.5, 1.5)
        m = np.clip((sigmoid(o) * np.tanh(c)) @ wp, -0.8, 0.8)
        out.append(m)
    return np.stack(out)


def numpy_elmo_layers(a, sentence):
    ids = char_rows(sentence)
    chars = np.concatenate([np.zeros((1, CHAR_DIM)), a["char_embed"]])[ids]           # (T, C, dim)
    pooled = []
    for i, (w, _) in enumerate(FILTERS):
        kernel = a[f"CNN/W_cnn_{i}"][0]
        conv = np.stack([np.einsum("twd,wdn->tn", chars[:, p:p + w], kernel) for p in range(MAX_CHARS - w + 1)], 1)
        pooled.append(np.maximum((conv + a[f"CNN/b_cnn_{i}"]).max(1), 0))
    h = np.concatenate(pooled, -1)
    for k in range(2):
        g = sigmoid(h @ a[f"CNN_high_{k}/W_carry"] + a[f"CNN_high_{k}/b_carry"])
        h = g * np.maximum(h @ a[f"CNN_high_{k}/W_transform"] + a[f"CNN_high_{k}/b_transform"], 0) + (1 - g) * h
    x = h @ a["CNN_proj/W_proj"] + a["CNN_proj/b_proj"]
    directions = []
    for d, seq in ((0, x), (1, x[::-1])):
        outs, inp = [], seq
        for layer in range(2):
            root = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            out = lstm(inp, a[f"{root}/W_0"], a[f"{root}/B"], a[f"{root}/W_P_0"])
            out = out + inp if layer > 0 else out                                           # residual
            outs.append(out)
            inp = out
        directions.append(outs if d == 0 else [o[::-1] for o in outs])
    layers = [np.concatenate([x, x], -1)] + [np.concatenate([f, b], -1) for f, b in zip(*directions)]
    return np.stack(layers)[:, 1:-1]                                                        # drop <S>, </S>


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("bilm_tf")
    arrays = bilm_tf_arrays()
    paths = write_files(root, arrays)
    out = root / "run"
    assert main(["convert", "elmo", "--options", paths[0], "--weights", paths[1], "--vocab", paths[2],
                 "--out", str(out)]) == 0
    return arrays, out


def test_converted_run_matches_numpy_bilm_tf(converted):
    arrays, out = converted
    model = load_run(out)
    assert isinstance(model, ElmoLanguageModel) and model.vocab_size is None
    assert model.preprocessor.vocabulary_file == str(out / "vocab.txt")
    # a softmax-less run's checkpoint holds the biLM alone, as model/backbone
    variables = tf.train.list_variables(tf.train.latest_checkpoint(str(out / "checkpoints")))
    assert {name.split("/")[1] for name, _ in variables if name.startswith("model/")} == {"backbone"}
    elmo = load_elmo(out)
    assert elmo.model.vocab_size is None and elmo.vocab[:3] == ["</S>", "<S>", "<UNK>"]
    got = elmo.embed(SENTENCES)
    for row, sentence in enumerate(SENTENCES):
        expected = numpy_elmo_layers(arrays, sentence)
        n = expected.shape[1]
        np.testing.assert_allclose(got["elmo_layers"][row, :, :n], expected, atol=2e-5, rtol=1e-4)
        assert (got["elmo_layers"][row, :, n:] == 0).all()
    # the clips are active with these weights (so the test checks them)
    assert np.isclose(np.abs(got["elmo_layers"][:, 1:, :, :P]).max(), 0.8, atol=1e-6)


def test_mismatched_options_are_one_clear_error(tmp_path):
    arrays = bilm_tf_arrays()
    del arrays["CNN_high_1/b_carry"]
    arrays["extra/thing"] = np.zeros(2, np.float32)
    options = json.loads(json.dumps(OPTIONS))
    options["lstm"]["dim"] = 7
    opts, weights, _ = write_files(tmp_path, arrays, options)
    with pytest.raises(ValueError) as info:
        load_bilm_tf(opts, weights)
    message = str(info.value)
    assert "does not match" in message and "missing CNN_high_1/b_carry" in message
    assert "RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_0 has shape (10, 24), the options need (10, 28)" in message
    assert "unexpected extra/thing" in message and "\n" not in message
    options["char_cnn"]["n_characters"] = 300
    (tmp_path / "options.json").write_text(json.dumps(options))
    with pytest.raises(ValueError, match="n_characters is 300"):
        load_bilm_tf(opts, weights)
