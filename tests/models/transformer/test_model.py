"""The Transformer translator: shapes, presets, serialization, masks, and parity with the seed's code."""
import numpy as np
import pytest
import tensorflow as tf
import keras

from kerasplm.models.transformer import PRESETS as TRANSFORMER_PRESETS, Transformer
from kerasplm.models import get_preset
from tests import seed_reference as seed
from tests.harness import check_model


def tiny(**kw):
    return Transformer.from_preset("transformer_tiny", input_vocab_size=50, target_vocab_size=60, **kw)


def batch():
    inp = tf.constant([[2, 5, 6, 7, 3, 0], [2, 9, 3, 0, 0, 0]], tf.int64)
    tar = tf.constant([[2, 11, 12, 13], [2, 14, 0, 0]], tf.int64)
    return inp, tar


def test_outputs_and_attention_dict():
    model = tiny()
    logits, att = model(batch(), training=False)
    assert logits.shape == (2, 4, 60) and logits.dtype == tf.float32
    assert sorted(att) == ["decoder_layer1_block1", "decoder_layer1_block2",
                           "decoder_layer2_block1", "decoder_layer2_block2"]
    assert att["decoder_layer1_block1"].shape == (2, 4, 4, 4)
    assert att["decoder_layer2_block2"].shape == (2, 4, 4, 6)
    # Cross-attention gives zero weight to padded source tokens, self-attention none to the future.
    assert np.all(att["decoder_layer2_block2"].numpy()[1, :, :, 3:] == 0)
    assert np.all(np.triu(att["decoder_layer1_block1"].numpy()[0], k=1) == 0)


def test_source_padding_does_not_change_logits():
    model = tiny()
    inp, tar = batch()
    short = model((inp[1:, :3], tar[1:, :2]), training=False)[0]
    padded = model((inp[1:], tar[1:]), training=False)[0][:, :2]
    np.testing.assert_allclose(short.numpy(), padded.numpy(), atol=1e-5)


def test_presets_match_the_paper():
    assert get_preset("transformer_seed") == get_preset("transformer_seed")
    base, big, s = (TRANSFORMER_PRESETS[n] for n in ("transformer_base", "transformer_big", "transformer_seed"))
    assert (base.num_layers, base.d_model, base.dff, base.num_heads) == (6, 512, 2048, 8)
    assert (big.num_layers, big.d_model, big.dff, big.num_heads) == (6, 1024, 4096, 16)
    assert (s.num_layers, s.d_model, s.dff, s.num_heads, s.rate) == (4, 128, 512, 8, 0.1)
    # Base with a shared 37k BPE vocab has 65M parameters in the paper; with separate embeddings and an
    # untied output layer (as the seed builds it) the count is exact to compute:
    model = Transformer.from_preset("transformer_base", input_vocab_size=37000, target_vocab_size=37000)
    d, f, n, v = 512, 2048, 6, 37000
    attn = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    expected = 2 * v * d + n * (attn + ffn + 4 * d) + n * (2 * attn + ffn + 6 * d) + d * v + v
    assert model.count_params() == expected
    assert 60e6 < (expected - 2 * v * d - d * v - v + v * d) < 70e6  # shared embeddings ≈ the paper's 65M
    # The main job's preset: the seed's width, 2 pre-LN layers per stack (a final LayerNorm after each), no dropout.
    q = TRANSFORMER_PRESETS["transformer_quick"]
    assert (q.num_layers, q.d_model, q.dff, q.num_heads, q.rate, q.normalize_first) == (2, 128, 512, 8, 0.0, True)
    d, f, n, vs, vt = 128, 512, 2, 1755, 1552
    attn, ffn = 4 * (d * d + d), d * f + f + f * d + d
    expected = (vs + vt) * d + n * (attn + ffn + 4 * d) + n * (2 * attn + ffn + 6 * d) + 2 * 2 * d + d * vt + vt
    assert Transformer.from_preset("transformer_quick", input_vocab_size=vs, target_vocab_size=vt).count_params() == expected


def test_unknown_preset_and_bad_config():
    with pytest.raises(ValueError, match="unknown preset 'transformer_huge'"):
        Transformer.from_preset("transformer_huge", 10, 10)
    with pytest.raises(ValueError, match="divisible"):
        Transformer(2, 30, 4, 64, 10, 10, 100, 100)
    with pytest.raises(ValueError, match="input_vocab_size"):
        Transformer(2, 32, 4, 64, 0, 10, 100, 100)


def test_too_long_input_names_the_limit():
    model = Transformer.from_preset("transformer_tiny", 50, 60, pe_input=8, pe_target=8)
    with pytest.raises(ValueError, match="maximum_position_encoding=8"):
        model((tf.ones((1, 9), tf.int64), tf.ones((1, 3), tf.int64)))


def test_harness_config_keras_file_checkpoint_bfloat16_xla(tmp_path):
    # Replaces the former round-trip and checkpoint tests (the harness runs both, and more).
    model = check_model(lambda: tiny(rate=0.2), batch(), tmp_path=tmp_path,
                        expected_shapes=((2, 4, 60), {f"decoder_layer{i}_block{j}": (2, 4, 4, 4 if j == 1 else 6)
                                                      for i in (1, 2) for j in (1, 2)}))
    assert model.get_config()["rate"] == 0.2


def _seed_model_with_our_weights(model, cfg):
    ref = seed.Transformer(cfg.num_layers, cfg.d_model, cfg.num_heads, cfg.dff, cfg.input_vocab_size,
                           cfg.target_vocab_size, cfg.pe_input, cfg.pe_target, cfg.rate)
    inp, tar = batch()
    masks = seed.create_masks(inp, tar)
    ref(inp, tar, training=False, enc_padding_mask=masks[0], look_ahead_mask=masks[1],
        dec_padding_mask=masks[2])  # build
    # Both models create their variables in the same order (the seed's construction order).
    assert [tuple(w.shape) for w in ref.weights] == [tuple(w.shape) for w in model.weights]
    ref.set_weights(model.get_weights())
    return ref


def test_numerical_parity_with_the_seed_code():
    model = tiny()
    ref = _seed_model_with_our_weights(model, model.config)
    inp, tar = batch()
    ours, our_att = model((inp, tar), training=False)
    masks = seed.create_masks(inp, tar)
    theirs, their_att = ref(inp, tar, training=False, enc_padding_mask=masks[0], look_ahead_mask=masks[1],
                            dec_padding_mask=masks[2])
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)
    assert sorted(our_att) == sorted(their_att)
    for key in our_att:
        np.testing.assert_allclose(our_att[key].numpy(), their_att[key].numpy(), atol=1e-6)


def test_model_fit_works_with_masked_loss():
    from kerasplm.training import MaskedAccuracy, MaskedSparseCategoricalCrossentropy

    keras.utils.set_random_seed(0)
    model = tiny(rate=0.0)
    rng = np.random.default_rng(0)
    src = rng.integers(4, 50, size=(64, 6))
    tgt = np.concatenate([np.full((64, 1), 2), src[:, :4] % 60], axis=1)  # learnable copy task
    ds = tf.data.Dataset.from_tensor_slices(((src, tgt[:, :-1]), tgt[:, 1:])).batch(16)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=MaskedSparseCategoricalCrossentropy(),
                  metrics=[MaskedAccuracy()])
    history = model.fit(ds, epochs=30, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]
    assert "masked_accuracy" in history.history


def test_training_gradients_match_the_seed_code():
    # The training path (kerasplm's fused XLA cross entropy, translation_loss) against the seed's
    # loss_function on the seed's model with the same weights: same loss, same gradients.
    from kerasplm.models.translator.job import translation_loss

    model = tiny(rate=0.0)
    ref = _seed_model_with_our_weights(model, model.config)
    inp, tar = batch()
    tar_in, tar_out = tar[:, :-1], tar[:, 1:]
    with tf.GradientTape() as tape:
        sums = translation_loss(model, ((inp, tar_in), tar_out), training=True)
        # The seed's loss_function averages over every position, pads included (kerasplm divides
        # by the real-token count instead), so put the seed's denominator here to compare.
        ours = sums["loss"] / tf.cast(tf.size(tar_out), tf.float32)
    our_grads = tape.gradient(ours, model.trainable_variables)
    masks = seed.create_masks(inp, tar_in)
    with tf.GradientTape() as tape:
        logits, _ = ref(inp, tar_in, training=True, enc_padding_mask=masks[0], look_ahead_mask=masks[1],
                        dec_padding_mask=masks[2])
        theirs = seed.loss_function(tar_out, logits)
    their_grads = tape.gradient(theirs, ref.trainable_variables)
    np.testing.assert_allclose(float(ours), float(theirs), rtol=1e-5)
    for mine, reference in zip(our_grads, their_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(mine).numpy(), tf.convert_to_tensor(reference).numpy(),
                                   rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_trainer_learns_a_copy_task_under_each_precision(policy):
    from kerasplm.models.translator.job import translation_loss
    from kerasplm.training import Trainer

    rng = np.random.default_rng(0)
    src = rng.integers(4, 50, size=(64, 6))
    tgt = np.concatenate([np.full((64, 1), 2), src[:, :4] % 60], axis=1)
    ds = tf.data.Dataset.from_tensor_slices(((src, tgt[:, :-1]), tgt[:, 1:])).batch(16).repeat()
    keras.mixed_precision.set_global_policy(policy)
    try:
        trainer = Trainer(lambda: tiny(rate=0.0), lambda: keras.optimizers.Adam(3e-3), translation_loss,
                          jit_compile=False, verbose=0)
        history = trainer.fit(ds, steps=120, log_every=20)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert trainer.model.compute_dtype == policy.replace("mixed_", "")
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    assert history["accuracy"][-1] > history["accuracy"][0]


def test_pre_ln_blocks_end_in_a_final_norm_and_decode_incrementally():
    """normalize_first: x + F(LN(x)) per sub-layer, one LayerNorm after each stack (the job's default preset)."""
    from kerasplm.layers.masks import create_padding_mask

    model = tiny(normalize_first=True)
    assert Transformer.num_parameters(model.config) == model.count_params()
    assert Transformer.from_config(model.get_config()).config == model.config
    inp, tar = batch()
    mask = create_padding_mask(inp)
    x = model.encoder.embed(inp, training=False)
    for layer in model.encoder.enc_layers:
        h = layer.layernorm1(x)
        x = x + layer.mha(h, h, h, mask)[0]
        x = x + layer.ffn(layer.layernorm2(x))
    np.testing.assert_allclose(model.encoder(inp, training=False, padding_mask=mask).numpy(),
                               model.encoder.final_layernorm(x).numpy(), atol=1e-5)
    logits = model((inp, tar), training=False)[0]
    enc, padding_mask = model.encode(inp)
    cross_kv, cache = model.cross_attention_kv(enc), model.init_cache(2, tar.shape[1])
    for t in range(tar.shape[1]):
        step_logits, cache = model.decode_step(tar[:, t:t + 1], t, cache, cross_kv, padding_mask)
        real = tar[:, t].numpy() != 0  # the full call also masks padded target positions as keys
        np.testing.assert_allclose(step_logits.numpy()[real], logits[:, t].numpy()[real], atol=1e-4)


def test_the_translator_owns_its_loss():
    """``compute_loss_sums`` is the translator's Trainer loss (as every task's); the job's
    ``translation_loss`` is the same function, now defined on the model side."""
    from kerasplm.models.base import Task
    from kerasplm.models.transformer.model import translation_loss
    from kerasplm.models.translator import job as translation

    assert translation.translation_loss is translation_loss
    model = tiny(rate=0.0)
    inp, tar = batch()
    data = ((inp, tar[:, :-1]), tar[:, 1:])
    sums = model.compute_loss_sums(data, training=False)
    assert sorted(sums) == ["accuracy", "loss", "weight"] and float(sums["weight"]) == 4.0
    for other in (translation_loss(model, data, training=False), Task.trainer_loss(model, data, training=False)):
        for key in sums:
            np.testing.assert_allclose(float(other[key]), float(sums[key]), rtol=1e-6)
    smoothed = model.compute_loss_sums(data, training=False, label_smoothing=0.1)
    np.testing.assert_allclose(float(translation_loss(model, data, False, label_smoothing=0.1)["loss"]),
                               float(smoothed["loss"]), rtol=1e-6)
    assert float(smoothed["loss"]) != float(sums["loss"])


def _loss_and_grads(model, data, jit, **kwargs):
    from kerasplm.models.transformer.model import translation_loss

    def run():
        with tf.GradientTape() as tape:
            sums = translation_loss(model, data, training=False, **kwargs)
        return sums, tape.gradient(sums["loss"], model.trainable_variables)

    sums, grads = tf.function(run, jit_compile=jit)() if jit is not None else run()
    return {k: float(v) for k, v in sums.items()}, [tf.convert_to_tensor(g).numpy() for g in grads]


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_the_loss_on_real_tokens_only_equals_the_loss_over_every_position(family):
    """The output layer projects only the real target tokens (padded up to a multiple of 128 rows): the sums and
    every gradient equal projecting every position, eagerly, in a graph, and under XLA (which projects them all)."""
    from kerasplm.models.rnn_seq2seq import RNNSeq2Seq
    from kerasplm.models import get_preset

    if family == "transformer":
        model = tiny(rate=0.0)
    else:
        model = RNNSeq2Seq.from_config_object(get_preset("gru_bahdanau_tiny", input_vocab_size=50,
                                                         target_vocab_size=60), name="tiny")
    inp, tar = batch()
    data = ((inp, tar[:, :-1]), tar[:, 1:])
    full, full_grads = _loss_and_grads(model, data, None, real_tokens_only=False, label_smoothing=0.1)
    assert full["weight"] == 4.0
    for jit in (None, False, True):
        sums, grads = _loss_and_grads(model, data, jit, real_tokens_only=not jit, label_smoothing=0.1)
        assert sums == pytest.approx(full, rel=1e-5)
        for got, want in zip(grads, full_grads):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
