"""ELECTRA pretraining (generator + discriminator): harness, RTD labels, losses against numpy, the sampling's
determinism and distribution, shared embeddings, parameter counts."""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.electra.model import (PRESETS, RTD_PRIOR_LOGIT, ElectraConfig, ElectraPretrainer, corrupt,
                                     discriminator_parameters, generator_config, generator_parameters, num_parameters,
                                     rtd_sums, sample_replacements)
from kerasplm.models.presets import get_preset, list_presets
from tests.harness import check_model

V = 40
# token_ids hold the MASKED input: [MASK] = 4 at the masked positions 1, 3, 5 of row 0 and position 2 of row 1.
BATCH = {"token_ids": tf.constant([[2, 4, 6, 4, 3, 4, 3], [2, 9, 4, 3, 0, 0, 0]]),
         "segment_ids": tf.constant([[0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0]]),
         "padding_mask": tf.constant([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]]),
         "masked_positions": tf.constant([[1, 3, 5], [2, 0, 0]]),
         "masked_ids": tf.constant([[11, 12, 13], [14, 0, 0]]),
         "masked_weights": tf.constant([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]),
         "next_sentence_label": tf.constant([0, 0])}


def tiny(**overrides):
    return ElectraPretrainer.from_preset("electra_tiny", vocab_size=V, max_positions=16, **overrides)


@pytest.fixture(scope="module")
def model():
    return tiny(dropout=0.0, attention_dropout=0.0)


def test_harness(tmp_path):
    # No mixed_bfloat16 check: the replacements are drawn from the logits, so bfloat16 logits may draw other ids.
    check_model(tiny, BATCH, tmp_path=tmp_path, checks=("config", "keras_file", "checkpoint", "xla"),
                expected_shapes={"mlm_logits": (2, 3, V), "replaced_ids": (2, 7), "rtd_labels": (2, 7),
                                 "rtd_logits": (2, 7)})


def test_rtd_labels_on_a_crafted_batch():
    # Row 0: position 1 sampled = original 11 (label 0), position 3 replaced (1), position 5 sampled = [MASK] (1).
    # Row 1: position 2 sampled = original 14 (0); its padded predictions (position 0, weight 0) write nothing.
    sampled = tf.constant([[11, 30, 4], [14, 33, 35]])
    replaced, labels = corrupt(BATCH, sampled)
    np.testing.assert_array_equal(replaced.numpy(), [[2, 11, 6, 30, 3, 4, 3], [2, 9, 14, 3, 0, 0, 0]])
    np.testing.assert_array_equal(labels.numpy(), [[0, 0, 0, 1, 0, 1, 0], [0, 0, 0, 0, 0, 0, 0]])
    # A masked position whose input was kept (BERT's 10%) and sampled back is original too.
    kept = {**BATCH, "token_ids": tf.constant([[2, 11, 6, 12, 3, 13, 3], [2, 9, 14, 3, 0, 0, 0]])}
    _, labels = corrupt(kept, tf.constant([[11, 12, 13], [14, 0, 0]]))
    assert labels.numpy().sum() == 0


def test_a_fresh_detector_starts_at_the_replaced_share():
    # The RTD logit starts at the log-odds of 15% replaced, so the first steps' gradients carry what tells
    # replaced from original tokens rather than "lower every logit" (which collapsed the encoder under Adam).
    assert RTD_PRIOR_LOGIT == pytest.approx(np.log(0.15 / 0.85))
    model = tiny(dropout=0.0, attention_dropout=0.0)
    np.testing.assert_allclose(model.discriminator.rtd_prediction.bias.numpy(), [RTD_PRIOR_LOGIT])
    probabilities = tf.sigmoid(model(BATCH, training=False)["rtd_logits"]).numpy()[BATCH["padding_mask"].numpy() > 0]
    # The head's kernels are N(0, 0.02) draws: every token's probability is near the prior, none near 0.5.
    np.testing.assert_allclose(probabilities, 0.15, atol=0.02)


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def test_rtd_sums_against_numpy_on_fixed_logits():
    logits = np.array([[2.0, -1.0, 0.5, -3.0], [-0.2, 4.0, 1.0, 0.0]], np.float32)
    labels = np.array([[1, 0, 0, 0], [1, 1, 0, 1]], np.float32)
    weights = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], np.float32)
    sums = {k: tuple(float(x) for x in v) for k, v in rtd_sums(logits, labels, weights).items()}
    bce = -(labels * _log_sigmoid(logits) + (1 - labels) * _log_sigmoid(-logits))
    predicted = logits > 0
    np.testing.assert_allclose(sums["loss"], ((bce * weights).sum(), 7.0), rtol=1e-6)
    assert sums["accuracy"] == (((predicted == labels) * weights).sum(), 7.0) == (4.0, 7.0)
    assert sums["precision"] == (2.0, 4.0) and sums["recall"] == (2.0, 3.0)


def test_loss_sums_against_numpy(model):
    out = model(BATCH, training=False)
    sums = model.compute_loss_sums(BATCH, training=False)   # evaluation draws from the batch: same replacements
    np.testing.assert_array_equal(out["replaced_ids"].numpy(), model(BATCH, training=False)["replaced_ids"].numpy())
    logits = out["mlm_logits"].numpy().astype(np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(
        -1, keepdims=True)
    w = BATCH["masked_weights"].numpy()
    ce = -np.take_along_axis(logp, BATCH["masked_ids"].numpy()[..., None], -1)[..., 0]
    mlm, mlm_count = (float(x) for x in sums["losses"]["mlm"])
    np.testing.assert_allclose((mlm, mlm_count), ((ce * w).sum(), 4.0), rtol=1e-5)
    x, y = out["rtd_logits"].numpy().astype(np.float64), out["rtd_labels"].numpy()
    real = BATCH["padding_mask"].numpy()
    bce = -(y * _log_sigmoid(x) + (1 - y) * _log_sigmoid(-x))
    rtd, rtd_count, lam = sums["losses"]["rtd"]
    np.testing.assert_allclose((float(rtd), float(rtd_count)), ((bce * real).sum(), 11.0), rtol=1e-5)
    assert lam == 50.0
    # The Trainer's objective: L = S_mlm / C_mlm + 50 S_rtd / C_rtd.
    from kerasplm.training.trainer import _parse_results

    spec, parsed = _parse_results(sums)
    loss = spec.means(tf.nest.map_structure(lambda t: t.numpy(), parsed))["loss"]
    np.testing.assert_allclose(loss, (ce * w).sum() / 4 + 50 * (bce * real).sum() / 11, rtol=1e-5)
    # The discriminator saw the corrupted text: its logits are its own call on replaced_ids.
    direct = model.discriminator({**BATCH, "token_ids": out["replaced_ids"]})["rtd_logits"]
    np.testing.assert_allclose(direct.numpy(), out["rtd_logits"].numpy(), atol=1e-6)


def test_sampling_is_seeded_and_follows_the_softmax():
    logits = tf.constant(np.log([[0.5, 0.3, 0.15, 0.05]] * 20000), tf.float32)
    seed = tf.constant([3, 7], tf.int32)
    eager = sample_replacements(logits, seed).numpy()
    graph = tf.function(sample_replacements)(logits, seed).numpy()
    xla = tf.function(sample_replacements, jit_compile=True)(logits, seed).numpy()
    np.testing.assert_array_equal(eager, graph)
    np.testing.assert_array_equal(eager, xla)
    assert (sample_replacements(logits, tf.constant([3, 8])).numpy() != eager).any()
    np.testing.assert_allclose(np.bincount(eager, minlength=4) / 20000, [0.5, 0.3, 0.15, 0.05], atol=0.015)


def test_training_draws_are_the_seed_generators_in_eager_and_graph(model):
    state = model.replacement_seed.state.numpy()
    eager = model(BATCH, training=True)["replaced_ids"].numpy()
    assert (model.replacement_seed.state.numpy() != state).any()   # the generator moved on: the next draw differs
    model.replacement_seed.state.assign(state)
    graph = tf.function(lambda b: model(b, training=True))(BATCH)["replaced_ids"].numpy()
    np.testing.assert_array_equal(eager, graph)


def test_shared_embeddings_are_one_variable_and_rtd_reaches_no_generator_weight(model):
    disc, gen = model.backbone.embeddings, model.generator.backbone.embeddings
    assert gen.source is disc and model.generator.word_embeddings is disc.embedding.embeddings
    assert model.discriminator.backbone is model.backbone
    ids = [id(v) for v in model.trainable_variables]
    assert len(ids) == len(set(ids))
    shared = {id(v) for v in disc.trainable_variables} - {id(v) for v in disc.embedding_projection.trainable_variables}
    assert shared <= {id(v) for v in gen.trainable_variables}
    assert gen.embedding_projection.kernel.shape == (16, 8)   # the generator's own E -> H_G projection
    with tf.GradientTape() as tape:
        sums = model.compute_loss_sums(BATCH, training=True)
        rtd = sums["losses"]["rtd"][0]
    grads = tape.gradient(rtd, model.trainable_variables)
    by_id = {id(v): g for v, g in zip(model.trainable_variables, grads)}
    generator_own = [v for v in model.generator.trainable_variables if id(v) not in shared]
    assert generator_own and all(by_id[id(v)] is None for v in generator_own)   # sampling passes no gradient
    assert by_id[id(disc.embedding.embeddings)] is not None


def test_parameter_counts():
    config = get_preset("electra_tiny", vocab_size=V, max_positions=16)
    built = ElectraPretrainer.from_config_object(config)
    assert built.count_params() == num_parameters(config)
    assert built.discriminator.count_params() == discriminator_parameters(config)
    assert built.generator.count_params() == generator_parameters(config)
    # The paper's sizes; without BERT's pooler the counts are transformers' ElectraForPreTraining /
    # ElectraForMaskedLM of the same configurations (google/electra-{small,base}-discriminator's 13.5M and 109.5M;
    # base generator = google/electra-base-generator's 33.7M).
    rows = {r.name: r for r in list_presets("electra")}
    assert rows["electra_small"].parts == {"discriminator": 13_614_849, "discriminator without pooler": 13_549_057,
                                           "generator": 4_620_026}
    assert rows["electra_base"].parts == {"discriminator": 110_073_601, "discriminator without pooler": 109_483_009,
                                          "generator": 33_740_602}
    assert rows["electra_small"].num_parameters == 13_614_849 + 4_620_026 - (30522 + 512 + 2) * 128 - 2 * 128
    # The benchmark's pairs.
    assert PRESETS["electra_mini"].discriminator_config() == get_preset("bert_mini")
    assert PRESETS["electra_bert_tiny"].discriminator_config() == get_preset("bert_tiny")
    # transformers' ElectraForPreTraining / ElectraForMaskedLM of these sizes (generator: hidden 32, 1 head, FFN 128).
    assert rows["electra_bert_tiny"].parts == {"discriminator": 4_386_049 + 128 * 128 + 128,
                                               "discriminator without pooler": 4_386_049, "generator": 4_037_402}
    small, base = (generator_config(PRESETS[n].discriminator_config(), PRESETS[n].generator_size)
                   for n in ("electra_small", "electra_base"))
    assert (small.hidden_size, small.num_heads, small.intermediate_size, small.embedding_size) == (64, 1, 256, 128)
    assert (base.hidden_size, base.num_heads, base.intermediate_size, base.embedding_size) == (256, 4, 1024, 768)


def test_bad_sizes_name_the_problem():
    with pytest.raises(ValueError, match="generator_size must be in"):
        tiny(generator_size=1.5)
    with pytest.raises(ValueError, match="multiple of the heads"):
        ElectraConfig(vocab_size=10, num_layers=1, hidden_size=24, num_heads=8, intermediate_size=8,
                      generator_size=0.3).validate()
    with pytest.raises(ValueError, match="rtd_weight"):
        ElectraPretrainer.from_config_object(get_preset("electra_tiny", vocab_size=V), rtd_weight=-1.0)
