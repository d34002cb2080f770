"""Cached decoding of the Transformer translator against full (uncached) decoder runs."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.generation import (attention_for, beam_search_decode, greedy_decode, length_penalty, make_beam_search_fn,
                                 make_greedy_fn, sequence_log_probs)
from kerasplm.models.transformer import Transformer
from tests.reference_loops import greedy_decode_uncached

END = 3
# Sources of different lengths, padded with 0.
SRC = tf.constant([[2, 5, 6, 7, 8, 9, 3], [2, 9, 3, 0, 0, 0, 0], [2, 11, 12, 13, 3, 0, 0], [2, 4, 4, 3, 0, 0, 0]])


def tiny(seed=1):
    keras.utils.set_random_seed(seed)
    return Transformer.from_preset("transformer_tiny", input_vocab_size=30, target_vocab_size=30)


@pytest.fixture(scope="module")
def model():
    """A random-weight tiny model whose [END] logit is raised until some, but not all, sentences emit
    [END] early, so cached/uncached runs must agree on rows that finish while others continue."""
    m = tiny()
    bias = m.final_layer.bias.numpy()
    fn = make_greedy_fn(m, max_length=12, jit_compile=False)
    for extra in np.arange(0.0, 4.0, 0.125):
        m.final_layer.bias.assign(bias + extra * np.eye(30)[END])
        ended = (fn(SRC).numpy() == END).any(axis=1)
        if ended.any() and not ended.all():
            return m
    pytest.fail("no [END] bias gives a batch where only some sentences end")


@pytest.fixture(scope="module")
def uncached(model):
    return greedy_decode_uncached(model, SRC, max_length=12).numpy()


def test_cached_step_logits_match_full_decoder(model):
    tgt = tf.constant([[2, 7, 8, 9, 10, 3], [2, 7, 3, 0, 0, 0], [2, 12, 13, 14, 3, 0], [2, 5, 5, 3, 0, 0]])
    full, _ = model((SRC, tgt), training=False)
    enc_output, padding_mask = model.encode(SRC)
    cross_kv = model.decoder.cross_attention_kv(enc_output)
    cache = model.decoder.init_cache(4, 8)
    for t in range(tgt.shape[1]):
        logits, cache = model.decode_step(tgt[:, t:t + 1], tf.constant(t), cache, cross_kv, padding_mask)
        real = tgt[:, t].numpy() != 0  # the full model also masks target padding as keys; compare real tokens
        np.testing.assert_allclose(logits.numpy()[real], full[:, t].numpy()[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_cached_greedy_equals_uncached(model, uncached, jit_compile):
    cached = greedy_decode(model, SRC, max_length=12, jit_compile=jit_compile).numpy()
    np.testing.assert_array_equal(cached, uncached)
    ended = (cached == END).any(axis=1)
    assert ended.any() and not ended.all()
    for row in cached[ended]:  # nothing but padding after [END]
        assert not row[list(row).index(END) + 1:].any()


def test_loop_ends_when_every_sentence_ended(model):
    bias = model.final_layer.bias.numpy()
    try:
        model.final_layer.bias.assign(bias + 50.0 * np.eye(30)[END])
        ids = greedy_decode(model, SRC, max_length=12, jit_compile=False).numpy()
        ids_beam, _ = beam_search_decode(model, SRC, beam_size=3, max_length=12, jit_compile=False)
    finally:
        model.final_layer.bias.assign(bias)
    assert ids.tolist() == [[2, END]] * 4  # one step, not 12
    assert ids_beam.numpy().tolist() == [[2, END]] * 4


def test_beam_size_one_equals_greedy(model, uncached):
    ids, scores = beam_search_decode(model, SRC, beam_size=1, alpha=0.6, max_length=12, jit_compile=False)
    np.testing.assert_array_equal(ids.numpy(), uncached)


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_beam_is_at_least_as_likely_as_greedy(seed):
    model = tiny(seed)
    greedy = greedy_decode(model, SRC, max_length=8, jit_compile=False)
    ids, scores = beam_search_decode(model, SRC, beam_size=4, alpha=0.0, max_length=8, jit_compile=False)
    beam_lp = sequence_log_probs(model, SRC, ids).numpy()
    np.testing.assert_allclose(scores.numpy(), beam_lp, atol=1e-4)  # alpha=0: score = log P
    assert (beam_lp >= sequence_log_probs(model, SRC, greedy).numpy() - 1e-4).all()


def test_beam_scores_use_gnmt_length_penalty(model):
    ids, scores = beam_search_decode(model, SRC, beam_size=3, alpha=0.6, max_length=12, jit_compile=True)
    lengths = (ids.numpy()[:, 1:] != 0).sum(axis=1)
    expected = sequence_log_probs(model, SRC, ids).numpy() / length_penalty(lengths, 0.6).numpy()
    np.testing.assert_allclose(scores.numpy(), expected, atol=1e-4)


def test_length_cap_relative_to_source(model):
    bias = model.final_layer.bias.numpy()
    try:
        model.final_layer.bias.assign(bias - 50.0 * np.eye(30)[END])  # never [END]: every row hits its cap
        ids = greedy_decode(model, SRC, max_length_ratio=1.0, max_length_offset=2, jit_compile=False).numpy()
        ids_beam, _ = beam_search_decode(model, SRC, beam_size=2, max_length_ratio=1.0, max_length_offset=2,
                                         jit_compile=False)
    finally:
        model.final_layer.bias.assign(bias)
    caps = [min(9, n + 2) for n in (7, 3, 5, 4)]  # floor(1.0 * src_len + 2); static T = ceil(7 + 2) = 9
    assert ids.shape == (4, 1 + max(caps))
    assert (ids[:, 1:] != 0).sum(axis=1).tolist() == caps
    assert (ids_beam.numpy()[:, 1:] != 0).sum(axis=1).tolist() == caps


def test_compiled_function_is_reused(model):
    fn = make_greedy_fn(model, max_length=12, jit_compile=False)
    fn(SRC)
    fn(tf.cast(SRC, tf.int64))
    fn(SRC[:2])
    assert fn.core.experimental_get_tracing_count() == 2  # one per source shape, not per call or dtype


def test_attention_for_plots_a_decoded_output(model, uncached):
    attention = attention_for(model, SRC, uncached)
    assert attention["decoder_layer2_block2"].shape == (4, 4, uncached.shape[1], SRC.shape[1])
    assert np.all(attention["decoder_layer2_block2"].numpy()[1, :, :, 3:] == 0)  # source padding


def test_bad_arguments(model):
    with pytest.raises(ValueError, match="beam_size"):
        make_beam_search_fn(model, beam_size=0)
    with pytest.raises(ValueError, match="target_vocab_size"):
        make_beam_search_fn(model, beam_size=16)
    with pytest.raises(ValueError, match="pe_target"):
        greedy_decode(model, SRC, max_length=model.config.pe_target + 1, jit_compile=False)
    with pytest.raises(ValueError, match="batch, inp_len"):
        greedy_decode(model, SRC[0], jit_compile=False)
