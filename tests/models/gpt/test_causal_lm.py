"""The decoder-only LM, the base classes and the preset registry."""
import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.gpt import CausalLM, DecoderOnlyBackbone
from kerasplm.models import Preprocessor, Task, get_preset, list_presets, presets
from kerasplm.models.transformer import Transformer
from kerasplm.models.gpt import causal_lm as causal_lm
from kerasplm.models.transformer import model as transformer
from tests.harness import check_model

IDS = tf.constant([[5, 6, 7, 8, 9], [10, 11, 0, 0, 0]])


def tiny_lm(**overrides):
    keras.utils.set_random_seed(0)
    return CausalLM.from_preset("causal_lm_tiny", **overrides)


def test_causal_lm_harness(tmp_path):
    check_model(tiny_lm, IDS, expected_shapes=(2, 5, 64), tmp_path=tmp_path)


def test_backbone_harness_post_ln_sinusoidal(tmp_path):
    def make():
        return DecoderOnlyBackbone.from_preset("causal_lm_tiny", normalize_first=False, activation="gelu",
                                               position_embedding="sinusoidal", attention_dropout=0.0)
    model = check_model(make, IDS, expected_shapes={"sequence_output": (2, 5, 32)}, tmp_path=tmp_path,
                        checks=("config", "checkpoint"))
    assert not hasattr(model, "final_layernorm")


def test_future_tokens_do_not_change_earlier_logits():
    model = tiny_lm()
    a = model(IDS[:1], training=False).numpy()
    b = model(tf.constant([[5, 6, 7, 1, 2]]), training=False).numpy()
    np.testing.assert_allclose(a[0, :3], b[0, :3], atol=1e-5)
    assert not np.allclose(a[0, 3:], b[0, 3:], atol=1e-3)


@pytest.mark.parametrize("overrides", [{}, {"normalize_first": False, "position_embedding": "sinusoidal"},
                                       {"num_layers": 3, "dff": 48}])
def test_num_parameters_formula_matches_built_model(overrides):
    config = get_preset("causal_lm_tiny", **overrides)
    model = DecoderOnlyBackbone.from_config_object(config)
    assert causal_lm.num_parameters(config) == model.count_params()
    assert CausalLM(backbone=model).count_params() == model.count_params()  # tied output embedding


def test_transformer_num_parameters_formula():
    config = transformer.get_preset("transformer_tiny", input_vocab_size=50, target_vocab_size=60)
    assert transformer.num_parameters(config) == Transformer.from_config_object(config).count_params()


def test_registry_lists_every_family_with_counts():
    rows = {r.name: r for r in list_presets()}
    assert {"transformer_tiny", "transformer_seed", "transformer_base", "transformer_big", "causal_lm_tiny"} <= set(rows)
    base = rows["transformer_base"]
    assert base.family == "transformer" and "input_vocab_size=8000" in base.note
    assert base.num_parameters == transformer.num_parameters(
        dataclasses.replace(base.config, input_vocab_size=8000, target_vocab_size=8000))
    assert 40e6 < base.num_parameters < 70e6
    assert [r.family for r in list_presets("causal_lm")] == ["causal_lm"]
    table = presets.format_presets(list_presets())
    assert "transformer_big" in table and f"{base.num_parameters:,}" in table


def test_registry_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown preset 'bert_huge'"):
        get_preset("bert_huge")
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['hidden'\]"):
        get_preset("causal_lm_tiny", hidden=3)
    with pytest.raises(ValueError, match="belongs to family 'transformer'"):
        DecoderOnlyBackbone.from_preset("transformer_tiny")
    with pytest.raises(ValueError, match="already registered by family 'transformer'"):
        presets.register_presets("other", DecoderOnlyBackbone, {"transformer_tiny": None}, num_parameters=len)
    with pytest.raises(ValueError, match="vocab_size must be a positive integer"):
        DecoderOnlyBackbone.from_preset("causal_lm_tiny", vocab_size=0)
    # The generic lookup also finds the translator's presets (benchmarks use it that way).
    assert get_preset("transformer_seed", input_vocab_size=5).input_vocab_size == 5


def test_compute_loss_sums_is_the_next_token_cross_entropy():
    model = tiny_lm(rate=0.0, attention_dropout=0.0)
    sums = Task.trainer_loss(model, IDS, training=False)
    logits = model(IDS[:, :-1], training=False).numpy()
    labels = IDS[:, 1:].numpy()
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    real = labels != 0
    expected = -np.take_along_axis(logp, labels[..., None], -1)[..., 0][real].sum()
    assert float(sums["weight"]) == real.sum() == 5
    np.testing.assert_allclose(float(sums["loss"]), expected, rtol=1e-5)
    assert 0 <= float(sums["accuracy"]) <= 5


def test_trainer_fits_a_causal_lm_through_the_task_loss():
    from kerasplm.training import Trainer

    data = np.tile(np.arange(4, 12)[None], (32, 1))  # one repeated sequence: learnable
    ds = tf.data.Dataset.from_tensor_slices(data).batch(8).repeat()
    trainer = Trainer(lambda: tiny_lm(rate=0.0, attention_dropout=0.0), lambda: keras.optimizers.Adam(1e-2),
                      Task.trainer_loss, jit_compile=False, verbose=0)
    history = trainer.fit(ds, steps=40, log_every=20)
    assert history["loss"][-1] < 0.5 * history["loss"][0]


def test_preprocessor_pads_and_truncates():
    pre = Preprocessor(sequence_length=4, pad_id=0)
    ids = tf.ragged.constant([[2, 5, 6, 7, 8, 3], [2, 5, 3]], tf.int64)
    assert pre.pad_and_truncate(ids).numpy().tolist() == [[2, 5, 6, 7], [2, 5, 3, 0]]
    assert pre.pad_and_truncate(ids, sequence_length=2).numpy().tolist() == [[2, 5], [2, 5]]
    assert pre.special_token_ids == {"pad": 0}
    with pytest.raises(ValueError, match="sequence_length"):
        Preprocessor(sequence_length=0)


def test_presets_command_lists_families_and_counts(capsys):
    from kerasplm import cli

    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    for row in list_presets():
        assert row.name in out and f"{row.num_parameters:,}" in out
    assert cli.main(["presets", "--family", "nope"]) == 2
    assert "unknown model family 'nope'" in capsys.readouterr().err
