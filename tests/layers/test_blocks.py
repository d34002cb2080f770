"""The configurable blocks, embeddings, cache step and list tracking against formulas computed by hand."""
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.layers import (DecoderLayer, EncoderLayer, MultiHeadAttention, TracksLayerLists, TransformerEmbedding,
                             create_look_ahead_mask, point_wise_feed_forward_network, positional_encoding,
                             write_cache)

RNG = np.random.default_rng(0)


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def mha_numpy(mha, q_in, kv_in, mask=None):
    """Multi-head attention computed from the layer's weights with numpy (mask: 1.0 = hidden)."""
    def dense(layer, x):
        return x @ layer.kernel.numpy() + layer.bias.numpy()

    q, k, v = dense(mha.wq, q_in), dense(mha.wk, kv_in), dense(mha.wv, kv_in)
    d = mha.depth
    heads = []
    for h in range(mha.num_heads):
        sl = slice(h * d, (h + 1) * d)
        logits = q[..., sl] @ np.swapaxes(k[..., sl], -1, -2) / math.sqrt(d)
        if mask is not None:
            logits = logits - 1e9 * mask
        w = np.exp(logits - logits.max(-1, keepdims=True))
        heads.append((w / w.sum(-1, keepdims=True)) @ v[..., sl])
    return dense(mha.dense, np.concatenate(heads, -1))


def ffn_numpy(ffn, x, act):
    d1, d2 = ffn.layers
    return act(x @ d1.kernel.numpy() + d1.bias.numpy()) @ d2.kernel.numpy() + d2.bias.numpy()


def relu(x):
    return np.maximum(x, 0)


def gelu_erf(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def randomize(layer):
    """Random LayerNorm gammas/betas so that the formulas are tested with non-trivial values."""
    for w in layer.weights:
        if "gamma" in w.path or "beta" in w.path:
            w.assign(RNG.normal(1.0 if "gamma" in w.path else 0.0, 0.3, size=w.shape).astype(np.float32))


@pytest.mark.parametrize("normalize_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
def test_encoder_layer_matches_hand_computation(normalize_first, activation):
    eps = 1e-12 if activation == "gelu" else 1e-5
    layer = EncoderLayer(8, 2, 16, rate=0.3, normalize_first=normalize_first, activation=activation,
                         layer_norm_epsilon=eps)
    x = RNG.normal(size=(2, 4, 8)).astype(np.float32)
    layer(x)
    randomize(layer)
    act = {"relu": relu, "gelu": gelu_erf, "gelu_tanh": gelu_tanh}[activation]
    ln1 = lambda h: layer_norm(h, layer.layernorm1.gamma.numpy(), layer.layernorm1.beta.numpy(), eps)  # noqa: E731
    ln2 = lambda h: layer_norm(h, layer.layernorm2.gamma.numpy(), layer.layernorm2.beta.numpy(), eps)  # noqa: E731
    if normalize_first:   # x + F(LN(x))
        h = x + mha_numpy(layer.mha, ln1(x), ln1(x))
        expected = h + ffn_numpy(layer.ffn, ln2(h), act)
    else:                 # LN(x + F(x))
        h = ln1(x + mha_numpy(layer.mha, x, x))
        expected = ln2(h + ffn_numpy(layer.ffn, h, act))
    np.testing.assert_allclose(layer(x, training=False).numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_layer_queries_give_the_full_rows(normalize_first):
    """``queries``: the block's output for chosen rows only, attending over all of x (pre- and post-LN)."""
    layer = EncoderLayer(8, 2, 16, rate=0.0, normalize_first=normalize_first, activation="gelu")
    x = RNG.normal(size=(2, 5, 8)).astype(np.float32)
    layer(x)
    randomize(layer)
    mask = tf.constant([[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]], tf.float32)[:, None, None, :]
    full, full_weights = layer(x, padding_mask=mask, return_attention=True)
    rows = np.array([[4, 0], [1, 2]])
    part, weights = layer(x, padding_mask=mask, return_attention=True,
                          queries=np.take_along_axis(x, rows[..., None], axis=1))
    np.testing.assert_allclose(part.numpy(), np.take_along_axis(full.numpy(), rows[..., None], axis=1), atol=1e-5)
    np.testing.assert_allclose(weights.numpy(), np.take_along_axis(full_weights.numpy(), rows[:, None, :, None],
                                                                   axis=2), atol=1e-6)


def test_gelu_variants_follow_their_formulas_and_differ():
    x = np.linspace(-4, 4, 81).astype(np.float32)[None, :, None].repeat(2, -1)
    outs = {}
    for name, formula in (("gelu", gelu_erf), ("gelu_tanh", gelu_tanh)):
        ffn = point_wise_feed_forward_network(2, 3, activation=name)
        outs[name] = ffn(x).numpy()
        np.testing.assert_allclose(outs[name], ffn_numpy(ffn, x, formula), rtol=1e-5, atol=1e-6)
    erf, tanh = gelu_erf(x), gelu_tanh(x)
    assert 1e-5 < np.abs(erf - tanh).max() < 1e-2  # the approximation is close but not equal
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        EncoderLayer(8, 2, 16, activation="swish")


def test_exact_gelu_gradient_is_phi_plus_x_times_density():
    """The hand-written gradient of the exact GELU: Φ(x) + x φ(x), against the formula and against
    autodiff through Keras' erf GELU, at float32 and in a mixed bfloat16 graph."""
    from kerasplm.layers.transformer import gelu

    x = tf.constant(np.linspace(-6, 6, 241).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours, keras_gelu = gelu(x), keras.activations.gelu(x, approximate=False)
    xs = x.numpy().astype(np.float64)
    phi = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in xs])
    expected = phi + xs * np.exp(-xs ** 2 / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(tape.gradient(ours, x).numpy(), expected, atol=2e-6)
    np.testing.assert_allclose(tape.gradient(ours, x).numpy(), tape.gradient(keras_gelu, x).numpy(), atol=1e-6)
    np.testing.assert_allclose(ours.numpy(), keras_gelu.numpy(), atol=1e-6)
    half = tf.cast(x, tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(half)
        y = gelu(half)
    assert y.dtype == tf.bfloat16 and tape.gradient(y, half).dtype == tf.bfloat16


def test_decoder_layer_pre_ln_with_cross_attention_matches_hand_computation():
    layer = DecoderLayer(8, 2, 16, rate=0.0, normalize_first=True, layer_norm_epsilon=1e-5)
    x = RNG.normal(size=(1, 3, 8)).astype(np.float32)
    enc = RNG.normal(size=(1, 5, 8)).astype(np.float32)
    mask = create_look_ahead_mask(3).numpy()
    layer(x, enc)
    randomize(layer)
    ln = [lambda h, n=n: layer_norm(h, n.gamma.numpy(), n.beta.numpy(), 1e-5)
          for n in (layer.layernorm1, layer.layernorm2, layer.layernorm3)]
    h = x + mha_numpy(layer.mha1, ln[0](x), ln[0](x), mask)
    h = h + mha_numpy(layer.mha2, ln[1](h), enc)
    expected = h + ffn_numpy(layer.ffn, ln[2](h), relu)
    out, _, _ = layer(x, enc, training=False, look_ahead_mask=mask)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_attention_dropout_only_in_training():
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    plain = MultiHeadAttention(8, 2)
    x = tf.constant(RNG.normal(size=(2, 6, 8)).astype(np.float32))
    mha(x, x, x)
    plain(x, x, x)
    plain.set_weights(mha.get_weights())
    out, w = mha(x, x, x, training=False)
    np.testing.assert_allclose(out.numpy(), plain(x, x, x)[0].numpy(), atol=1e-6)
    out_train, w_train = mha(x, x, x, training=True)
    assert not np.allclose(out_train.numpy(), out.numpy(), atol=1e-3)
    # The returned weights are the probabilities before dropout (they still sum to 1).
    np.testing.assert_allclose(w_train.numpy().sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(w_train.numpy(), w.numpy(), atol=1e-6)
    # An EncoderLayer with only attention dropout is deterministic at inference, random in training.
    layer = EncoderLayer(8, 2, 16, rate=0.0, attention_dropout=0.5)
    np.testing.assert_allclose(layer(x, training=False).numpy(), layer(x, training=False).numpy())
    assert not np.allclose(layer(x, training=True).numpy(), layer(x, training=False).numpy(), atol=1e-3)


def test_cached_attention_equals_full_causal_attention():
    mha = MultiHeadAttention(8, 2)
    x = tf.constant(RNG.normal(size=(2, 6, 8)).astype(np.float32))
    full, _ = mha(x, x, x, create_look_ahead_mask(6))
    # Prefill 3 positions at once, then one at a time (scalar index).
    cache = mha.init_cache(2, 8)
    out, weights, cache = mha.call_with_cache(x[:, :3], cache, 0)
    outs = [out]
    for t in range(3, 6):
        out, weights, cache = mha.call_with_cache(x[:, t:t + 1], cache, t)
        outs.append(out)
        assert np.all(weights.numpy()[..., t + 1:] == 0)  # no weight on slots after the position
    np.testing.assert_allclose(tf.concat(outs, 1).numpy(), full.numpy(), atol=1e-5)
    # Rows at different positions (per-row index): row 0 at positions 2..3, row 1 at 4..5.
    cache = mha.init_cache(2, 8)
    _, _, cache = mha.call_with_cache(x[:, :4], cache, 0)
    new = tf.stack([x[0, 2:4], x[1, 4:6]])
    out, _, _ = mha.call_with_cache(new, cache, tf.constant([2, 4]))
    np.testing.assert_allclose(out.numpy()[0], full.numpy()[0, 2:4], atol=1e-5)
    np.testing.assert_allclose(out.numpy()[1], full.numpy()[1, 4:6], atol=1e-5)


def test_write_cache_writes_exactly_the_new_positions():
    cache = tf.constant(RNG.normal(size=(2, 1, 6, 2)).astype(np.float32))
    new = tf.constant(RNG.normal(size=(2, 1, 2, 2)).astype(np.float32))
    out = write_cache(cache, new, tf.constant([1, 3])).numpy()
    expected = cache.numpy().copy()
    expected[0, :, 1:3], expected[1, :, 3:5] = new.numpy()[0], new.numpy()[1]
    np.testing.assert_allclose(out, expected, atol=1e-6)
    one = write_cache(cache, new[:, :, :1], 5).numpy()
    expected = cache.numpy().copy()
    expected[:, :, 5] = new.numpy()[:, :, 0]
    np.testing.assert_allclose(one, expected, atol=1e-6)


def test_one_position_cache_step_writes_its_slot_elementwise():
    """Traced as a SavedModel traces it (batch and cache length unknown), a one-position decoding step keeps
    its position count static, so the cache write is the elementwise one-hot blend, not the n-position
    contraction (an Einsum over the whole cache per layer, which made exported greedy decoding 1.4x slower)."""
    block = DecoderLayer(8, 2, 16)
    block.build()

    @tf.function
    def step(x, k, v, enc):
        out, (k, v), _ = block.call_with_cache(x, (k, v), tf.constant(3), block.mha2.project_kv(enc, enc))
        return out, k, v

    cache_spec = tf.TensorSpec([None, 2, None, 4])
    graph = step.get_concrete_function(tf.TensorSpec([None, 1, 8]), cache_spec, cache_spec,
                                       tf.TensorSpec([None, None, 8])).graph
    assert "Einsum" not in {op.type for op in graph.get_operations()}
    assert block.mha1.split_heads(tf.zeros((2, 1, 8)), 2).shape == (2, 2, 1, 4)
    x, enc = tf.random.uniform((2, 1, 8)), tf.random.uniform((2, 3, 8))
    k, v = (tf.random.uniform((2, 2, 6, 4)) for _ in range(2))
    out, k_new, _ = step(x, k, v, enc)
    np.testing.assert_allclose(k_new.numpy()[:, :, [0, 1, 2, 4, 5]], k.numpy()[:, :, [0, 1, 2, 4, 5]])
    np.testing.assert_allclose(k_new.numpy()[:, :, 3:4], block.mha1.project_kv(x, x)[0].numpy(), atol=1e-6)


def test_decoder_only_block_has_no_cross_attention():
    block = DecoderLayer(8, 2, 16, cross_attention=False, normalize_first=True)
    x = tf.random.uniform((1, 4, 8))
    out, w_self, w_cross = block(x, look_ahead_mask=create_look_ahead_mask(4))
    assert out.shape == (1, 4, 8) and w_cross is None and np.all(np.triu(w_self.numpy()[0], 1) == 0)
    assert not any("mha2" in w.path or "layernorm2" in w.path for w in block.weights)
    with pytest.raises(ValueError, match="cross_attention=False"):
        block(x, x)
    with pytest.raises(ValueError, match="pass the encoder output"):
        DecoderLayer(8, 2, 16)(x)
    clone = DecoderLayer.from_config(block.get_config())
    assert clone.get_config() == block.get_config() and not clone.cross_attention


def test_learned_and_sinusoidal_positions_and_segments():
    ids = tf.constant([[5, 6, 7], [1, 2, 0]])
    seg = tf.constant([[0, 0, 1], [1, 1, 0]])
    sinus = TransformerEmbedding(10, 4, 8)  # the seed's: E[x] sqrt(d) + PE
    out = sinus(ids).numpy()
    table = sinus.embedding.embeddings.numpy()
    np.testing.assert_allclose(out, table[ids.numpy()] * 2.0 + positional_encoding(8, 4).numpy()[:, :3], atol=1e-6)
    learned = TransformerEmbedding(10, 4, 8, position_embedding="learned", num_segments=2, scale_embeddings=False)
    out = learned(ids, segment_ids=seg).numpy()
    tok = learned.embedding.embeddings.numpy()
    pos = learned.position_embedding.embeddings.numpy()
    segs = learned.segment_embedding.embeddings.numpy()
    np.testing.assert_allclose(out, tok[ids.numpy()] + pos[:3] + segs[seg.numpy()], atol=1e-6)
    # Explicit positions (per row) pick those rows of the table.
    out = learned(ids, positions=tf.constant([[3, 4, 5], [0, 1, 2]])).numpy()
    np.testing.assert_allclose(out[0], tok[[5, 6, 7]] + pos[3:6] + segs[0], atol=1e-6)
    with pytest.raises(ValueError, match="num_segments=0"):
        sinus(ids, segment_ids=seg)
    with pytest.raises(ValueError, match="maximum_position_encoding=8"):
        learned(tf.zeros((1, 9), tf.int32))
    with pytest.raises(ValueError, match="position_embedding"):
        TransformerEmbedding(10, 4, 8, position_embedding="rotary")


def test_factorized_embedding_projects_to_model_width():
    layer = TransformerEmbedding(10, 16, 8, position_embedding="learned", embedding_size=4, scale_embeddings=False,
                                 normalize=True, layer_norm_epsilon=1e-12)
    ids = tf.constant([[1, 2, 3]])
    out = layer(ids).numpy()
    assert out.shape == (1, 3, 16)
    assert layer.embedding.embeddings.shape == (10, 4) and layer.position_embedding.embeddings.shape == (8, 4)
    assert layer.embedding_projection.kernel.shape == (4, 16)
    h = layer.embedding.embeddings.numpy()[[1, 2, 3]] + layer.position_embedding.embeddings.numpy()[:3]
    h = layer_norm(h, layer.embedding_layernorm.gamma.numpy(), layer.embedding_layernorm.beta.numpy(), 1e-12)
    expected = h @ layer.embedding_projection.kernel.numpy() + layer.embedding_projection.bias.numpy()
    np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-5)
    clone = TransformerEmbedding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


def test_initializer_is_configurable():
    init = keras.initializers.TruncatedNormal(stddev=0.02, seed=1)
    layer = EncoderLayer(64, 4, 128, kernel_initializer=init)
    layer(tf.zeros((1, 2, 64)))
    kernel = layer.mha.wq.kernel.numpy()
    assert abs(kernel.std() - 0.02 * 0.88) < 0.003 and np.abs(kernel).max() <= 0.04 + 1e-6  # truncated at 2σ
    assert EncoderLayer.from_config(layer.get_config()).get_config() == layer.get_config()


class _Stack(TracksLayerLists, keras.Model):
    """A model that keeps its blocks in a list and never calls track_layer_list."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.blocks = [keras.layers.Dense(4, name=f"block{i}") for i in range(3)]

    def call(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class _UntrackedStack(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.blocks = [keras.layers.Dense(4, name=f"block{i}") for i in range(3)]

    def call(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_layer_lists_are_checkpointed_automatically(tmp_path):
    def saved_count(model, name):
        model(tf.zeros((1, 4)))
        path = tf.train.Checkpoint(model=model).save(str(tmp_path / name))
        return len([n for n, _ in tf.train.list_variables(path) if n.startswith("model/")])

    assert saved_count(_Stack(), "tracked") == len(_Stack().blocks) * 2 == 6
    assert saved_count(_UntrackedStack(), "untracked") == 0  # why the mixin exists


def test_layers_sharing_an_initializer_object_get_different_weights():
    # An unseeded Keras initializer instance returns the same values on every call: each layer must
    # get its own copy, or every projection of a block starts identical.
    init = keras.initializers.TruncatedNormal(stddev=0.02)
    layer = EncoderLayer(8, 2, 8, kernel_initializer=init)
    layer(tf.zeros((1, 2, 8)))
    kernels = [layer.mha.wq.kernel, layer.mha.wk.kernel, layer.mha.wv.kernel, layer.mha.dense.kernel,
               layer.ffn.layers[0].kernel, layer.ffn.layers[1].kernel]
    for i, a in enumerate(kernels):
        for b in kernels[i + 1:]:
            assert not np.allclose(a.numpy(), b.numpy())
    emb = TransformerEmbedding(8, 8, 8, position_embedding="learned", embeddings_initializer=init)
    emb(tf.zeros((1, 2), tf.int32))
    assert not np.allclose(emb.embedding.embeddings.numpy(), emb.position_embedding.embeddings.numpy())
