"""BERT pretraining heads and task: harness, loss sums against numpy, ALBERT/SOP/none, HF BertForPreTraining."""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.pretrainer import BertPretrainer
from tests.harness import check_model

TINY = dict(vocab_size=50, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32, max_positions=16)
BATCH = {"token_ids": tf.constant([[2, 4, 6, 4, 3, 8, 3], [2, 9, 4, 3, 0, 0, 0]]),
         "segment_ids": tf.constant([[0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0]]),
         "padding_mask": tf.constant([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]]),
         "masked_positions": tf.constant([[1, 3, 5], [2, 0, 0]]),
         "masked_ids": tf.constant([[11, 12, 13], [14, 0, 0]]),
         "masked_weights": tf.constant([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]),
         "next_sentence_label": tf.constant([0, 1])}


def tiny(sentence_task="nsp", **overrides):
    return BertPretrainer(BertBackbone(**{**TINY, **overrides}), sentence_task=sentence_task)


def test_harness(tmp_path):
    check_model(tiny, BATCH, tmp_path=tmp_path,
                expected_shapes={"mlm_logits": (2, 3, 50), "sentence_logits": (2, 2)})


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_head_is_tied_gathered_and_losses_match_numpy():
    model = tiny(dropout=0.0, attention_dropout=0.0)
    out = model(BATCH, training=False)
    # Logits at the masked positions equal the head applied to the whole sequence, then picked.
    hidden = model.backbone(BATCH)["sequence_output"]
    head = model.mlm_head
    full = head.layer_norm(head.dense(hidden)).numpy() @ model.word_embeddings.numpy().T + head.bias.numpy()
    picked = np.take_along_axis(full, BATCH["masked_positions"].numpy()[..., None], axis=1)
    np.testing.assert_allclose(out["mlm_logits"].numpy(), picked, atol=1e-5)
    assert model.word_embeddings is model.backbone.embeddings.embedding.embeddings   # tied, not copied

    sums = model.compute_loss_sums(BATCH, training=False)
    logp = _log_softmax(out["mlm_logits"].numpy())
    w = BATCH["masked_weights"].numpy()
    ce = -np.take_along_axis(logp, BATCH["masked_ids"].numpy()[..., None], axis=-1)[..., 0]
    mlm_loss, mlm_count = sums["losses"]["mlm"]
    np.testing.assert_allclose(float(mlm_loss), (ce * w).sum(), rtol=1e-5)
    assert float(mlm_count) == 4.0
    correct = (logp.argmax(-1) == BATCH["masked_ids"].numpy()) * w
    assert float(sums["mlm_accuracy"][0]) == correct.sum()
    nsp = _log_softmax(out["sentence_logits"].numpy())
    nsp_loss, nsp_count = sums["losses"]["nsp"]
    np.testing.assert_allclose(float(nsp_loss), -(nsp[0, 0] + nsp[1, 1]), rtol=1e-5)
    assert float(nsp_count) == 2.0 and "nsp_accuracy" in sums


def _dense_reference_loss(model, batch):
    """The MLM + NSP loss with the last block run at every position and the masked rows picked afterwards."""
    outputs = model.backbone(batch, training=False)
    logits = model.mlm_head(outputs["sequence_output"], batch["masked_positions"], model.word_embeddings)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["masked_ids"], logits=logits)
    nsp = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["next_sentence_label"],
                                                         logits=model.sentence_head(outputs["pooled_output"]))
    return tf.reduce_sum(ce * batch["masked_weights"]) + tf.reduce_sum(nsp)


@pytest.mark.parametrize("share_layers", [False, True])
def test_sparse_last_block_gives_the_dense_loss_and_gradients(share_layers):
    """The pretrainer runs the last block only at [CLS] and the masked positions; loss and every gradient
    must equal those of the full-sequence forward pass (ALBERT's shared block included)."""
    model = tiny(dropout=0.0, attention_dropout=0.0, share_layers=share_layers)
    with tf.GradientTape(persistent=True) as tape:
        sums = model.compute_loss_sums(BATCH, training=False)
        sparse = sums["losses"]["mlm"][0] + sums["losses"]["nsp"][0]
        dense = _dense_reference_loss(model, BATCH)
    np.testing.assert_allclose(float(sparse), float(dense), rtol=1e-6)
    for variable, g_sparse, g_dense in zip(model.trainable_variables,
                                           tape.gradient(sparse, model.trainable_variables),
                                           tape.gradient(dense, model.trainable_variables)):
        np.testing.assert_allclose(tf.convert_to_tensor(g_sparse).numpy(), tf.convert_to_tensor(g_dense).numpy(),
                                   atol=1e-6, err_msg=variable.path)


def test_backbone_output_positions_restrict_the_last_block():
    backbone = BertBackbone(**TINY, dropout=0.0, attention_dropout=0.0)
    full = backbone(BATCH, output_hidden_states=True, output_attentions=True)
    positions = tf.constant([[5, 1], [3, 3]])
    part = backbone(BATCH, output_positions=positions, output_hidden_states=True, output_attentions=True)
    picked = np.take_along_axis(full["sequence_output"].numpy(), positions.numpy()[..., None], axis=1)
    np.testing.assert_allclose(part["sequence_output"].numpy(), picked, atol=1e-6)
    np.testing.assert_allclose(part["pooled_output"].numpy(), full["pooled_output"].numpy(), atol=1e-6)
    assert part["attentions"][-1].shape == (2, 2, 3, 7)          # [CLS] + 2 positions, over all 7 keys
    np.testing.assert_allclose(part["attentions"][-1][:, :, 1:].numpy(),
                               np.take_along_axis(full["attentions"][-1].numpy(),
                                                  positions.numpy()[:, None, :, None], axis=2), atol=1e-6)
    np.testing.assert_allclose(part["hidden_states"][1].numpy(), full["hidden_states"][1].numpy())


def test_albert_sop_and_mlm_only():
    albert = tiny("sop", embedding_size=8, share_layers=True)
    assert albert.mlm_head.dense.kernel.shape == (16, 8)      # H -> E, decoder tied to the E-wide table
    sums = albert.compute_loss_sums(BATCH, training=True)
    assert set(sums["losses"]) == {"mlm", "sop"} and "sop_accuracy" in sums
    mlm_only = tiny("none")
    assert set(mlm_only(BATCH)) == {"mlm_logits"}
    assert set(mlm_only.compute_loss_sums(BATCH, training=False)["losses"]) == {"mlm"}
    with pytest.raises(ValueError, match="sentence_task must be one of"):
        tiny("mlm")


def test_hf_bert_for_pretraining_heads(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from kerasplm.models.bert.convert import load_hf_bert_pretrainer

    config = transformers.BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16)
    torch.manual_seed(0)
    reference = transformers.BertForPreTraining(config).eval()
    with torch.no_grad():  # non-zero output bias and LayerNorm so the mapping is really tested
        reference.cls.predictions.bias.normal_()
        reference.cls.predictions.transform.LayerNorm.weight.normal_()
    reference.save_pretrained(tmp_path)
    model = load_hf_bert_pretrainer(str(tmp_path))
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor(BATCH["token_ids"].numpy()).long(),
                             token_type_ids=torch.tensor(BATCH["segment_ids"].numpy()).long(),
                             attention_mask=torch.tensor(BATCH["padding_mask"].numpy()).long())
    out = model(BATCH, training=False)
    mlm = np.take_along_axis(expected.prediction_logits.numpy(), BATCH["masked_positions"].numpy()[..., None], 1)
    np.testing.assert_allclose(out["mlm_logits"].numpy(), mlm, atol=1e-4)
    np.testing.assert_allclose(out["sentence_logits"].numpy(), expected.seq_relationship_logits.numpy(), atol=1e-4)
