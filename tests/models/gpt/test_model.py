"""The GPT family: presets and their parameter counts, both layouts, GPT-2's residual init, generation."""
import math

import keras
import numpy as np
import pytest
import tensorflow as tf


from kerasplm.models.gpt import GPT, GPTBackbone
from kerasplm.models import get_preset, list_presets
from kerasplm.models.gpt import model as gpt
from tests.harness import check_model
from tests.reference_loops import generate_uncached

IDS = tf.constant([[5, 6, 7, 8, 9], [10, 11, 0, 0, 0]])
GPT1_TINY = {"normalize_first": False, "activation": "gelu", "scale_residual_init": False}


def tiny_gpt(**overrides):
    keras.utils.set_random_seed(0)
    return GPT.from_preset("gpt_tiny", **overrides)


def test_gpt2_tiny_harness(tmp_path):
    model = check_model(tiny_gpt, IDS, expected_shapes=(2, 5, 64), tmp_path=tmp_path)
    assert model.backbone.config.normalize_first and hasattr(model.backbone, "final_layernorm")


def test_gpt1_tiny_harness(tmp_path):
    def make():
        keras.utils.set_random_seed(0)
        return GPTBackbone.from_preset("gpt_tiny", **GPT1_TINY)
    model = check_model(make, IDS, expected_shapes={"sequence_output": (2, 5, 32)}, tmp_path=tmp_path,
                        checks=("config", "keras_file", "checkpoint"))
    assert not hasattr(model, "final_layernorm")


@pytest.mark.parametrize("overrides", [{}, GPT1_TINY, {"num_layers": 3, "dff": 48, "max_positions": 16}])
def test_num_parameters_formula_matches_built_model(overrides):
    config = get_preset("gpt_tiny", **overrides)
    backbone = GPTBackbone.from_config_object(config)
    assert gpt.num_parameters(config) == backbone.count_params()
    assert GPT(backbone=backbone).count_params() == backbone.count_params()  # tied output layer


# transformers' GPT2Model(GPT2Config(...)).num_parameters() for the four released sizes; GPT-1: the same
# count for OpenAIGPTModel(OpenAIGPTConfig()) (tokens 40478·768 + positions 512·768 + 12 post-LN blocks).
PUBLISHED = {"gpt2": 124_439_808, "gpt2_medium": 354_823_168, "gpt2_large": 774_030_080,
             "gpt2_xl": 1_557_611_200, "gpt1": 116_534_784}
# GPT-3 paper table 2.1 (rounded figures).
GPT3 = {"gpt3_small": 125e6, "gpt3_medium": 350e6, "gpt3_large": 760e6, "gpt3_xl": 1.3e9, "gpt3_2_7b": 2.7e9,
        "gpt3_6_7b": 6.7e9, "gpt3_13b": 13e9, "gpt3_175b": 175e9}


def test_published_parameter_counts_without_building():
    rows = {r.name: r for r in list_presets("gpt")}
    for name, count in PUBLISHED.items():
        assert rows[name].num_parameters == count, name
    for name, count in GPT3.items():
        assert abs(rows[name].num_parameters - count) / count < 0.03, (name, rows[name].num_parameters)
        assert rows[name].config.max_positions == 2048
    assert get_preset("gpt1").normalize_first is False and get_preset("gpt2").activation == "gelu_tanh"


def test_gpt2_residual_projection_init_is_scaled():
    """Attention-output and FFN-output kernels have std 0.02/√(2L) relative to the other kernels."""
    keras.utils.set_random_seed(1)
    layers = 8
    backbone = GPTBackbone.from_preset("gpt_tiny", num_layers=layers, d_model=128, dff=512, num_heads=4)
    block = backbone.blocks[3]
    plain = np.std(block.mha1.wq.kernel.numpy())
    truncated = 0.02 * 0.8796  # std of a normal truncated at ±2σ
    assert abs(plain - truncated) / truncated < 0.05
    for layer in gpt.residual_projections(block):
        ratio = np.std(layer.kernel.numpy()) / plain
        assert abs(ratio * math.sqrt(2 * layers) - 1) < 0.06, ratio
    unscaled = GPTBackbone.from_preset("gpt_tiny", num_layers=layers, d_model=128, dff=512, num_heads=4,
                                       scale_residual_init=False).blocks[3]
    assert abs(np.std(unscaled.mha1.dense.kernel.numpy()) - truncated) / truncated < 0.05


@pytest.mark.parametrize("overrides", [{}, GPT1_TINY], ids=["gpt2", "gpt1"])
def test_cached_generation_equals_uncached(overrides):
    model = tiny_gpt(rate=0.0, attention_dropout=0.0, **overrides)
    prompts = tf.constant([[5, 6, 7, 8], [9, 10, 0, 0], [11, 0, 0, 0]])
    cached = model.generate(prompts, max_new_tokens=6, jit_compile=False)
    reference = generate_uncached(model, prompts, max_new_tokens=6).numpy()
    np.testing.assert_array_equal(cached.tokens.numpy()[:, :reference.shape[1]], reference)
    assert reference.shape == (3, 6)


def test_sampling_is_seeded_and_beam_one_is_greedy():
    model = tiny_gpt()
    prompts = tf.constant([[5, 6, 7], [9, 0, 0]])
    a = model.generate(prompts, max_new_tokens=5, strategy="sample", top_k=10, top_p=0.9, seed=3, jit_compile=False)
    b = model.generate(prompts, max_new_tokens=5, strategy="sample", top_k=10, top_p=0.9, seed=3, jit_compile=False)
    np.testing.assert_array_equal(a.tokens.numpy(), b.tokens.numpy())
    greedy = model.generate(prompts, max_new_tokens=5, jit_compile=False)
    beam = model.generate(prompts, max_new_tokens=5, strategy="beam", beam_size=1, jit_compile=False)
    np.testing.assert_array_equal(greedy.tokens.numpy(), beam.tokens.numpy())
    stop = int(greedy.tokens[0, 1])
    stopped = model.generate(prompts, max_new_tokens=5, stop_ids=[stop], jit_compile=False)
    assert int(stopped.lengths[0]) <= 2 and int(stopped.tokens[0, int(stopped.lengths[0]) - 1]) == stop
