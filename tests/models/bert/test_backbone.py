"""BERT / ALBERT backbone: harness, parameter formula, masking, outputs, sharing."""
import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.bert import BertBackbone, BertConfig
from kerasplm.models import get_preset, list_presets
from kerasplm.models.bert import backbone as bert
from tests.harness import check_model

INPUTS = {"token_ids": tf.constant([[2, 5, 6, 7, 3], [2, 9, 3, 0, 0]]),
          "segment_ids": tf.constant([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]]),
          "padding_mask": tf.constant([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])}
TINY = dict(vocab_size=50, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32, max_positions=16)


def tiny(**overrides):
    keras.utils.set_random_seed(0)
    return BertBackbone(**{**TINY, **overrides})


def test_harness(tmp_path):
    check_model(tiny, INPUTS, tmp_path=tmp_path,
                expected_shapes={"pooled_output": (2, 16), "sequence_output": (2, 5, 16)})


def test_albert_harness_shares_one_block(tmp_path):
    def make():
        return tiny(embedding_size=8, share_layers=True, num_layers=3)
    model = check_model(make, INPUTS, tmp_path=tmp_path, checks=("config", "checkpoint"),
                        expected_shapes={"pooled_output": (2, 16), "sequence_output": (2, 5, 16)})
    assert len(model.blocks) == 1 and len(model.layer_blocks()) == 3
    assert model.count_params() == bert.num_parameters(model.config)


@pytest.mark.parametrize("preset", ["bert_tiny", "bert_mini"])
def test_num_parameters_formula_matches_count_params(preset):
    config = get_preset(preset, vocab_size=100)
    assert bert.num_parameters(config) == BertBackbone.from_config_object(config).count_params()


@pytest.mark.parametrize("overrides", [{"embedding_size": 8}, {"embedding_size": 8, "share_layers": True},
                                       {"num_segments": 3, "max_positions": 20}])
def test_num_parameters_formula_variants(overrides):
    model = tiny(**overrides)
    assert bert.num_parameters(model.config) == model.count_params()


def test_published_parameter_counts_without_building():
    # transformers.BertModel(BertConfig()) has 109,482,240 weights; bert-large-uncased 335,141,888;
    # albert-base-v2 (AlbertModel, with pooler) 11,683,584.
    assert bert.num_parameters(get_preset("bert_base")) == 109_482_240
    assert bert.num_parameters(get_preset("bert_large")) == 335_141_888
    assert bert.num_parameters(get_preset("albert_base")) == 11_683_584
    rows = {r.name for r in list_presets()}
    assert {"bert_tiny", "bert_mini", "bert_small", "bert_medium", "bert_base", "bert_large", "albert_base"} <= rows


def test_preset_shapes():
    small, medium = get_preset("bert_small"), get_preset("bert_medium")
    assert (small.num_layers, small.hidden_size, small.num_heads, small.intermediate_size) == (4, 512, 8, 2048)
    assert (medium.num_layers, medium.hidden_size) == (8, 512)


def test_padding_does_not_change_real_positions():
    model = tiny()
    short = {"token_ids": tf.constant([[2, 9, 3]]), "segment_ids": tf.zeros((1, 3), tf.int32),
             "padding_mask": tf.ones((1, 3), tf.int32)}
    padded = {"token_ids": tf.constant([[2, 9, 3, 7, 7]]), "segment_ids": tf.zeros((1, 5), tf.int32),
              "padding_mask": tf.constant([[1, 1, 1, 0, 0]])}
    a, b = model(short, training=False), model(padded, training=False)
    np.testing.assert_allclose(a["sequence_output"], b["sequence_output"][:, :3], atol=1e-5)
    np.testing.assert_allclose(a["pooled_output"], b["pooled_output"], atol=1e-5)
    # Without the mask the padding tokens are attended to and the outputs change.
    unmasked = model({"token_ids": padded["token_ids"]}, training=False)
    assert not np.allclose(unmasked["sequence_output"][:, :3], a["sequence_output"], atol=1e-3)


def test_hidden_states_attentions_and_pooler():
    model = tiny()
    out = model(INPUTS, training=False, output_hidden_states=True, output_attentions=True)
    assert len(out["hidden_states"]) == 3 and len(out["attentions"]) == 2
    np.testing.assert_allclose(out["hidden_states"][-1], out["sequence_output"])
    attn = out["attentions"][0].numpy()
    assert attn.shape == (2, 2, 5, 5)
    np.testing.assert_allclose(attn.sum(-1), 1.0, atol=1e-5)
    assert np.all(attn[1, :, :, 3:] < 1e-6)  # padded keys get no attention
    pooled = np.tanh(out["sequence_output"][:, 0].numpy() @ model.pooler.kernel.numpy() + model.pooler.bias.numpy())
    np.testing.assert_allclose(out["pooled_output"], pooled, atol=1e-5)
    # Post-LN: every hidden state is LayerNorm'd (mean 0 per position before the affine init of 1/0).
    np.testing.assert_allclose(out["sequence_output"].numpy().mean(-1), 0.0, atol=1e-5)


def test_segment_ids_change_outputs():
    model = tiny()
    other = {**INPUTS, "segment_ids": tf.zeros_like(INPUTS["segment_ids"])}
    a, b = model(INPUTS, training=False), model(other, training=False)
    assert not np.allclose(a["sequence_output"][0], b["sequence_output"][0], atol=1e-4)
    np.testing.assert_allclose(a["sequence_output"][1], b["sequence_output"][1], atol=1e-6)


@pytest.mark.parametrize("field, value, message", [
    ("hidden_size", 15, "divisible by num_heads"), ("num_layers", 0, "num_layers"),
    ("dropout", 1.0, "dropout"), ("embedding_size", -1, "embedding_size")])
def test_config_errors(field, value, message):
    with pytest.raises(ValueError, match=message):
        BertConfig(**{**TINY, field: value}).validate()
    with pytest.raises(ValueError, match=message):
        BertBackbone(**{**TINY, field: value})


def test_config_roundtrip():
    config = get_preset("bert_tiny")
    assert dataclasses.asdict(BertBackbone.from_config_object(config).config) == dataclasses.asdict(config)
