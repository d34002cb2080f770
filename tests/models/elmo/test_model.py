"""ELMo: character ids (bilm-tf's conventions), the biLM (harness, counts, LSTM cell, directions), the LM
loss, ScalarMix (eq. (1)) and the frozen ElmoEmbedder in a downstream model."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models import presets
from kerasplm.models.elmo.model import (ElmoBiLM, ElmoConfig, ElmoEmbedder, ElmoLanguageModel, ProjectedLSTMCell,
                                  ScalarMix, fused_lstm_weights, num_parameters)
from kerasplm.runs.serialization import deserialize, serialize
from kerasplm.text.characters import ElmoPreprocessor, add_sentence_boundaries, sentence_char_ids, word_char_ids
from tests.harness import check_model

SENTENCES = ["the cat sat", "a dog", "über naïve words here"]


def bilm_tf_word_ids(word, max_chars=50):
    """bilm-tf's UnicodeCharsVocabulary._convert_word_to_char_ids, plus its Batcher's +1 (written from its docs)."""
    code = [260] * max_chars
    encoded = word.encode("utf-8")[:max_chars - 2]
    code[0] = 258
    for k, byte in enumerate(encoded, start=1):
        code[k] = byte
    code[len(encoded) + 1] = 259
    return [c + 1 for c in code]


def tokens(sentences):
    return tf.strings.split(tf.constant(sentences))


def test_word_char_ids_follow_bilm_tf():
    words = ["the", "", "é", "x" * 60, "日本"]
    got = word_char_ids(words).numpy()
    assert got.shape == (5, 50) and got.dtype == np.int32
    np.testing.assert_array_equal(got, [bilm_tf_word_ids(w) for w in words])
    assert word_char_ids(tf.constant([], tf.string)).shape == (0, 50)
    assert list(word_char_ids([b"a\xff"])[0, :4]) == [259, 98, 256, 260]   # invalid UTF-8: bytes as they are


def test_sentence_char_ids_boundaries_and_padding():
    ids = sentence_char_ids(tokens(SENTENCES)).numpy()
    assert ids.shape == (3, 6, 50)
    np.testing.assert_array_equal(ids[1, 0, :4], [259, 257, 260, 261])            # <S>
    np.testing.assert_array_equal(ids[1, 3, :4], [259, 258, 260, 261])            # </S> after "a dog"
    assert (ids[1, 4:] == 0).all() and (ids[2] > 0).any(axis=-1).all()
    np.testing.assert_array_equal(ids[1, 1], bilm_tf_word_ids("a"))
    bare = sentence_char_ids(tokens(SENTENCES), add_boundaries=False)
    np.testing.assert_array_equal(add_sentence_boundaries(bare).numpy(), ids)


def test_counts_formula_and_published_sizes():
    assert ElmoBiLM.from_preset("elmo_tiny").count_params() == num_parameters(presets.get_preset("elmo_tiny"))
    assert ElmoBiLM.from_preset("elmo_mini").count_params() == num_parameters(presets.get_preset("elmo_mini")) == 696_288
    fused = ElmoBiLM.from_preset("elmo_tiny", projection_dim=None, cell_clip=None, proj_clip=None)
    assert isinstance(fused.forward_layers[0], keras.layers.LSTM)
    assert fused.count_params() == num_parameters(fused.config)
    # AllenNLP's published sizes of its biLMs (Original 93.6M, Medium 28.0M, Small 13.6M).
    for name, millions in (("elmo_original", 93.6), ("elmo_medium", 28.0), ("elmo_small", 13.6)):
        assert round(num_parameters(presets.get_preset(name)) / 1e6, 1) == millions
    with pytest.raises(ValueError, match="proj_clip needs a projection"):
        ElmoConfig(projection_dim=None).validate()


def test_harness_bilm_and_lm(tmp_path):
    ids = sentence_char_ids(tokens(SENTENCES))
    check_model(lambda: ElmoBiLM.from_preset("elmo_tiny"), ids, tmp_path=tmp_path,
                select=lambda out: out["layers"], expected_shapes=(3, 3, 6, 32))
    check_model(lambda: ElmoLanguageModel.from_preset("elmo_tiny", vocab_size=11), ids, tmp_path=tmp_path,
                expected_shapes={"backward_logits": (3, 6, 11), "forward_logits": (3, 6, 11)},
                checks=("config", "checkpoint"))


def test_projected_lstm_cell_matches_numpy():
    rng = np.random.default_rng(0)
    cell = ProjectedLSTMCell(6, projection_dim=3, cell_clip=0.5, proj_clip=0.2)
    layer = keras.layers.RNN(cell, return_sequences=True)
    x = rng.normal(size=(2, 4, 5)).astype("float32")
    out = layer(x).numpy()
    cell.kernel.assign(rng.normal(size=cell.kernel.shape).astype("float32"))
    cell.bias.assign(rng.normal(size=cell.bias.shape).astype("float32"))
    out = layer(x).numpy()
    w, b, wp = (np.asarray(v) for v in (cell.kernel, cell.bias, cell.projection))
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    c, m = np.zeros((2, 6)), np.zeros((2, 3))
    for t in range(4):
        i, j, f, o = np.split(np.concatenate([x[:, t], m], -1) @ w + b, 4, -1)
        c = np.clip(sig(f + 1.0) * c + sig(i) * np.tanh(j), -0.5, 0.5)
        m = np.clip((sig(o) * np.tanh(c)) @ wp, -0.2, 0.2)
        np.testing.assert_allclose(out[:, t], m, atol=1e-5)


def test_fused_lstm_equals_the_cell_without_projection():
    """Keras' fused LSTM (used when there is no projection/clipping) computes the same as the cell."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    mine = keras.layers.RNN(ProjectedLSTMCell(6), return_sequences=True)
    fused = keras.layers.LSTM(6, return_sequences=True)
    mine.build(x.shape)
    fused.build(x.shape)
    kernel = rng.normal(scale=0.5, size=mine.cell.kernel.shape).astype("float32")
    bias = rng.normal(scale=0.5, size=mine.cell.bias.shape).astype("float32")
    mine.cell.kernel.assign(kernel)
    mine.cell.bias.assign(bias)
    fused.set_weights(fused_lstm_weights(kernel, bias, input_dim=4))
    np.testing.assert_allclose(fused(x), mine(x), atol=1e-5)


@pytest.fixture(scope="module")
def tiny_bilm():
    keras.utils.set_random_seed(0)
    return ElmoBiLM.from_preset("elmo_tiny")


def test_directions_read_their_own_way(tiny_bilm):
    """Changing token k changes forward outputs only at positions >= k and backward outputs only at <= k."""
    base = sentence_char_ids(tokens(["one two three four five", "x"]))
    changed = sentence_char_ids(tokens(["one two CHANGED four five", "x"]))
    a, b = tiny_bilm(base), tiny_bilm(changed)
    k = 3  # <S> one two [three] ...
    for j in range(2):
        diff_f = np.abs(np.asarray(a["forward"][j] - b["forward"][j]))[0].max(-1)
        diff_b = np.abs(np.asarray(a["backward"][j] - b["backward"][j]))[0].max(-1)
        assert (diff_f[:k] == 0).all() and (diff_f[k:7] > 0).all(), diff_f
        assert (diff_b[k + 1:] == 0).all() and (diff_b[:k + 1] > 0).all(), diff_b
    # the other row and the padding are untouched; padding is zero
    np.testing.assert_array_equal(a["layers"][1], b["layers"][1])
    assert (np.asarray(a["layers"])[1, :, 3:] == 0).all()
    # the token layer is [x; x]
    np.testing.assert_array_equal(a["layers"][:, 0, :, :16], a["layers"][:, 0, :, 16:])


def test_lm_loss_sums_match_logits(tiny_bilm):
    model = ElmoLanguageModel(tiny_bilm, vocab_size=9)
    ids = sentence_char_ids(tokens(["a b c", "d"]))
    token_ids = tf.constant([[0, 3, 4, 5, 1], [0, 6, 1, -1, -1]])
    sums = model.compute_loss_sums({"char_ids": ids, "token_ids": token_ids}, training=False)["losses"]
    logits = model(ids)
    lp = {k: tf.nn.log_softmax(v).numpy() for k, v in logits.items()}
    t = token_ids.numpy()
    fwd = [-lp["forward_logits"][b, k, t[b, k + 1]] for b in range(2) for k in range(4) if t[b, k + 1] >= 0]
    bwd = [-lp["backward_logits"][b, k, t[b, k - 1]] for b in range(2) for k in range(1, 5) if t[b, k] >= 0]
    np.testing.assert_allclose(sums["forward"], (sum(fwd), len(fwd)), rtol=1e-5)
    np.testing.assert_allclose(sums["backward"], (sum(bwd), len(bwd)), rtol=1e-5)
    sampled = ElmoLanguageModel(tiny_bilm, vocab_size=9, num_sampled=3)
    sampled.set_weights(model.get_weights())
    s, c = sampled.compute_loss_sums({"char_ids": ids, "token_ids": token_ids}, training=True)["losses"]["forward"]
    assert np.isfinite(float(s)) and float(c) == len(fwd)
    full_eval = sampled.compute_loss_sums({"char_ids": ids, "token_ids": token_ids}, training=False)["losses"]
    np.testing.assert_allclose(full_eval["forward"][0], sums["forward"][0], rtol=1e-5)   # eval: full softmax


def _layer_norm(h, mask):
    keep = mask[:, :, None].astype(h.dtype)
    n = keep.sum() * h.shape[-1]
    mean = (h * keep).sum() / n
    var = (((h - mean) * keep) ** 2).sum() / n
    return (h - mean) / np.sqrt(var + 1e-12)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_scalar_mix_is_equation_1(layer_norm):
    rng = np.random.default_rng(2)
    layers = rng.normal(size=(2, 3, 4, 5)).astype("float32")
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)
    mix = ScalarMix(3, layer_norm=layer_norm, initial_weights=[0.1, -0.4, 0.7], initial_gamma=1.5)
    got = mix(layers, mask=mask).numpy()
    s = np.exp([0.1, -0.4, 0.7]) / np.exp([0.1, -0.4, 0.7]).sum()
    hs = [_layer_norm(layers[:, j], mask) if layer_norm else layers[:, j] for j in range(3)]
    np.testing.assert_allclose(got, 1.5 * sum(s[j] * hs[j] for j in range(3)), rtol=1e-5, atol=1e-6)


def test_embedder_in_a_downstream_model_trains_only_the_mix(tiny_bilm, tmp_path):
    ids = sentence_char_ids(tokens(SENTENCES), add_boundaries=False)          # (3, 4, 50)
    embedder = ElmoEmbedder(tiny_bilm, num_mixes=2)
    char_in = keras.Input((None, 50), dtype="int32")
    word_in = keras.Input((None, 4))                                             # x_k: a static embedding
    out = embedder(char_in)
    h = keras.layers.Concatenate()([word_in, out["elmo"]])                         # [x_k; ELMo_k]
    h = keras.layers.LSTM(8, return_sequences=True)(h)
    h = keras.layers.Concatenate()([h, out["elmo_representations"][1]])           # [h_k; ELMo_k] at the output
    model = keras.Model([char_in, word_in], keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(h)))
    mix_weights = embedder.trainable_weights
    assert len(mix_weights) == 4 and not tiny_bilm.trainable_weights
    assert not {id(w) for w in tiny_bilm.weights} & {id(w) for w in model.trainable_weights}
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model([ids, tf.ones((3, 4, 4))]) ** 2)
    grads = tape.gradient(loss, mix_weights + tiny_bilm.weights)
    assert all(g is not None and np.abs(g).max() > 0 for g in grads[:4])        # s_j and γ of both mixes
    assert all(g is None for g in grads[4:])                                      # the frozen biLM
    # a .keras round trip keeps the biLM frozen (it once came back trainable)
    path = str(tmp_path / "downstream.keras")
    model.save(path)
    reloaded = keras.models.load_model(path)
    assert len(reloaded.trainable_weights) == len(model.trainable_weights)
    # the representations are the biLM's without <S>/</S>
    layers = embedder(ids)["layers"].numpy()
    full = tiny_bilm(add_sentence_boundaries(ids))["layers"].numpy()
    np.testing.assert_allclose(layers[0, :, :3], full[0, :, 1:4], atol=1e-6)
    assert (layers[1, :, 2:] == 0).all()


def test_plot_helpers_and_nearest_contexts(tiny_bilm):
    import matplotlib

    matplotlib.use("Agg")
    from kerasplm.models.elmo.runs import Elmo, plot_mix_weights

    mix = ScalarMix(3, initial_weights=[0.0, 1.0, 2.0])
    mix.build()
    ax = plot_mix_weights(mix)
    heights = [p.get_height() for p in ax.patches]
    np.testing.assert_allclose(heights, np.exp([0, 1, 2]) / np.exp([0, 1, 2]).sum(), rtol=1e-6)
    elmo = Elmo(tiny_bilm, ["<S>", "</S>", "<UNK>"])
    candidates = ["we play chess", "they watch a play tonight", "no such word", "kids play outside"]
    ranked = elmo.nearest_contexts("play", "kids play outside", candidates, k=5)
    assert [s for _, s in ranked][0] == "kids play outside" and ranked[0][0] == pytest.approx(1.0, abs=1e-5)
    assert len(ranked) == 3 and ranked[1][0] >= ranked[2][0]
    centred = elmo.nearest_contexts("play", "kids play outside", candidates, k=5, center=True)
    assert centred[0] == (pytest.approx(1.0, abs=1e-5), "kids play outside") and centred[-1][0] < ranked[-1][0]
    with pytest.raises(ValueError, match="not a token of the query"):
        elmo.nearest_contexts("play", "nothing here", candidates)


def test_run_objects_round_trip_and_check_each_other(tmp_path, tiny_bilm):
    """What an ELMo run stores: the LM (with or without softmax) and its ElmoPreprocessor (the vocabulary file)."""
    (tmp_path / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nthe\n")
    pre = ElmoPreprocessor(str(tmp_path / "vocab.txt"))
    spec = serialize(pre, str(tmp_path))
    assert spec["config"] == {"vocabulary": "vocab.txt", "max_characters": 50, "name": "elmo_preprocessor"}
    again = deserialize(spec, str(tmp_path))
    assert again.vocabulary == ["<S>", "</S>", "<UNK>", "the"] and again.token_to_id("cat") == 2
    np.testing.assert_array_equal(again(["the cat sat", "a"]), sentence_char_ids(tokens(["the cat sat", "a"])))
    with pytest.raises(ValueError, match="vocabulary lacks <UNK>"):
        ElmoPreprocessor(["<S>", "</S>"])

    lm = ElmoLanguageModel(tiny_bilm, vocab_size=4, num_sampled=2)
    rebuilt = deserialize(serialize(lm, str(tmp_path)), str(tmp_path))
    assert (rebuilt.vocab_size, rebuilt.num_sampled, rebuilt.backbone.config) == (4, 2, tiny_bilm.config)
    lm.check_preprocessor(pre)
    with pytest.raises(ValueError, match=r"vocab\.txt: 4 tokens, but the model's softmax has 5"):
        ElmoLanguageModel(tiny_bilm, vocab_size=5).check_preprocessor(pre)
    bare = ElmoLanguageModel(tiny_bilm, vocab_size=None)
    bare.check_preprocessor(pre)   # no softmax: any vocabulary size
    assert [w.path for w in bare.weights] == [w.path for w in tiny_bilm.weights]
    with pytest.raises(ValueError, match="no word softmax"):
        bare(sentence_char_ids(tokens(["a"])))
    with pytest.raises(ValueError, match="characters per token"):
        bare.check_preprocessor(ElmoPreprocessor(pre.vocabulary, max_characters=20))
