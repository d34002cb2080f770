"""``DecoderOnlyBackbone(..., output_attentions=True)``: the causal self-attention weights of every block
(what notebook 03 plots for a generated continuation)."""
import keras
import numpy as np
import tensorflow as tf

from kerasplm.models.gpt import CausalLM

IDS = tf.constant([[5, 6, 7, 8, 9, 3], [10, 11, 12, 0, 0, 0]])


def test_attentions_are_the_blocks_causal_softmax():
    keras.utils.set_random_seed(0)
    backbone = CausalLM.from_preset("causal_lm_tiny", rate=0.0, attention_dropout=0.0).backbone
    plain = backbone(IDS, training=False)
    outputs = backbone(IDS, training=False, output_attentions=True)
    assert "attentions" not in plain
    np.testing.assert_array_equal(plain["sequence_output"].numpy(), outputs["sequence_output"].numpy())
    attentions = [a.numpy() for a in outputs["attentions"]]
    config = backbone.config
    assert len(attentions) == config.num_layers
    for weights in attentions:
        assert weights.shape == (2, config.num_heads, 6, 6)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)           # a distribution per query
        assert np.all(np.triu(np.ones((6, 6)), k=1)[None, None] * weights < 1e-6)  # no weight on the future
    # Block 1 by hand: softmax(Q Kᵀ / √depth + causal mask) of the (pre-LN) normalized embeddings.
    block = backbone.blocks[0]
    h = block.layernorm1(backbone.embeddings(IDS, training=False))
    q = block.mha1.project_q(h)
    k, _ = block.mha1.project_kv(h, h)
    logits = tf.matmul(q, k, transpose_b=True).numpy() / np.sqrt(config.d_model // config.num_heads)
    logits = np.where(np.triu(np.ones((6, 6)), k=1) > 0, -np.inf, logits)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(attentions[0], expected, atol=1e-5)
