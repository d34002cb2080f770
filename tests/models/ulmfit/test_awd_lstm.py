"""AWD-LSTM and ULMFiT's classifier: the harness, the parameter formula and the presets' counts, the tied output
layer, the carried state, BPT3C (the same values, truncated gradients), concat pooling over the real positions only,
layer groups; the variable-length BPTT windows."""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.data.lm_streams import bptt_lengths, make_eval_windows, make_stream_dataset
from kerasplm.models import list_presets
from kerasplm.models.ulmfit.awd_lstm import (AWDLSTMBackbone, AWDLSTMConfig, AWDLSTMLanguageModel, ULMFiTClassifier,
                                      concat_pooling, num_parameters)
from tests.harness import check_model

SMALL = dict(vocab_size=30, embedding_dim=8, hidden_dim=12, num_layers=3)


def backbone(**overrides):
    return AWDLSTMBackbone(**{**SMALL, **overrides})


def ids(batch=2, length=9, seed=0):
    return tf.constant(np.random.RandomState(seed).randint(4, 30, (batch, length)), tf.int32)


def test_language_model_harness_and_parameter_formula(tmp_path):
    check_model(lambda: AWDLSTMLanguageModel(backbone(name="b")), ids(), expected_shapes=(2, 9, 30),
                tmp_path=tmp_path, checks=("config", "checkpoint"))
    for tie in (True, False):
        model = AWDLSTMLanguageModel(backbone(tie_weights=tie))
        assert model.count_params() == num_parameters(model.backbone.config)
        assert [lstm.units for lstm in model.backbone.lstms] == [12, 12, 8 if tie else 12]
    rows = {row.name: row.num_parameters for row in list_presets("awd_lstm")}
    # The paper's sizes with WikiText-2's 33,278 words: 400·V + 4(400·1150 + 1150² + 1150) + 4(2·1150² + 1150)
    # + 4(1150·400 + 400² + 400) + V (the output layer is the embedding).
    assert rows["awd_lstm"] == 400 * 33278 + 4 * (400 * 1150 + 1150 ** 2 + 1150) + 4 * (2 * 1150 ** 2 + 1150) \
        + 4 * (1150 * 400 + 400 ** 2 + 400) + 33278 == 33_545_278
    assert set(rows) == {"awd_lstm", "awd_lstm_tiny"}
    with pytest.raises(ValueError, match="weight_dropout must be in"):
        AWDLSTMConfig(vocab_size=10, weight_dropout=1.0).validate()


def test_tied_output_layer_and_carried_state():
    model = AWDLSTMLanguageModel(backbone())
    x = ids(length=8)
    logits, _ = model.forward(x, training=False)
    hidden = model.backbone(x, training=False)["sequence_output"]
    np.testing.assert_allclose(logits, hidden.numpy() @ model.backbone.embeddings.numpy().T
                               + model.decoder_bias.numpy(), atol=1e-5)
    # Reading the text in two windows, the state carried, equals reading it at once.
    first, state = model.forward(x[:, :5], training=False)
    second, _ = model.forward(x[:, 5:], initial_state=state, training=False)
    np.testing.assert_allclose(np.concatenate([first, second], 1), logits, atol=1e-5)
    sums = model.compute_loss_sums(tf.concat([x, x[:, :1]], 1), training=True)
    assert float(sums["weight"]) == 16 and np.isfinite(float(sums["loss"]))


def test_bpt3c_reads_chunks_with_the_same_values_and_truncated_gradients():
    model = backbone()
    x = ids(length=11)
    whole = model(x, training=False)
    chunked = model(x, chunk_length=4, training=False)
    np.testing.assert_allclose(chunked["sequence_output"], whole["sequence_output"], atol=1e-6)
    np.testing.assert_allclose(chunked["final_state"][-1][0], whole["final_state"][-1][0], atol=1e-6)

    def gradient_of_last_output(chunk):
        with tf.GradientTape() as tape:
            out = model(x, chunk_length=chunk, training=False)["sequence_output"][:, -1]
            loss = tf.reduce_sum(out)
        return tf.convert_to_tensor(tape.gradient(loss, model.embeddings)).numpy()

    first_chunk_words = np.unique(x.numpy()[:, :8])
    last_chunk_words = np.unique(x.numpy()[:, 8:])
    only_early = np.setdiff1d(first_chunk_words, last_chunk_words)
    assert only_early.size
    assert np.abs(gradient_of_last_output(None)[only_early]).max() > 0     # one pass: back to the first words
    assert np.abs(gradient_of_last_output(4)[only_early]).max() == 0       # BPT3C: stops at the chunk boundary


def test_concat_pooling_ignores_padding_and_the_classifier_reads_real_positions_only():
    outputs = tf.constant([[[1.0, -2.0], [3.0, 0.0], [50.0, 50.0]]])
    pooled = concat_pooling(outputs, tf.constant([[3.0, 0.0]]), tf.constant([[1.0, 1.0, 0.0]]))
    np.testing.assert_allclose(pooled, [[3.0, 0.0, 3.0, 0.0, 2.0, -1.0]])
    classifier = ULMFiTClassifier(backbone(), 3, labels=["a", "b", "c"], bptt=4)
    x = ids(batch=1, length=6)
    alone = classifier({"token_ids": x, "padding_mask": tf.ones([1, 6])}, training=False)
    padded_ids = tf.concat([x, tf.zeros([1, 5], tf.int32)], 1)
    padded = classifier({"token_ids": padded_ids, "padding_mask": tf.concat([tf.ones([1, 6]), tf.zeros([1, 5])], 1)},
                        training=False)
    np.testing.assert_allclose(padded, alone, atol=1e-5)
    sums = classifier.compute_loss_sums(({"token_ids": padded_ids, "padding_mask": tf.ones([1, 11])},
                                         tf.constant([1])), training=True)   # BPT3C chunks in training
    assert float(sums["weight"]) == 1 and np.isfinite(float(sums["loss"]))
    group, top = classifier.layer_groups()
    assert top == 4 and group(classifier.backbone.embeddings) == 0
    assert [group(lstm.kernel) for lstm in classifier.backbone.lstms] == [1, 2, 3]
    assert group(classifier.classifier.kernel) == 4
    lm_group, lm_top = AWDLSTMLanguageModel(backbone()).layer_groups()
    assert lm_top == 3


def test_classifier_harness(tmp_path):
    inputs = {"token_ids": ids(), "padding_mask": tf.ones([2, 9])}
    check_model(lambda: ULMFiTClassifier(backbone(name="b"), 2, labels=["no", "yes"], bptt=4), inputs,
                expected_shapes=(2, 2), tmp_path=tmp_path, checks=("config", "checkpoint"))


def test_variable_length_bptt_windows_are_seeded_and_cover_the_streams():
    lengths = bptt_lengths(100_000, 70, seed=1, epoch=0)
    assert lengths == bptt_lengths(100_000, 70, seed=1, epoch=0) != bptt_lengths(100_000, 70, seed=1, epoch=1)
    assert sum(lengths) == 100_000 - 1 and max(lengths) <= 90 and min(lengths[:-1]) >= 5
    halves = np.mean(np.array(lengths[:-1]) < 52)        # about 5% drawn around bptt / 2
    assert 0.02 < halves < 0.09
    assert abs(np.mean([n for n in lengths[:-1] if n >= 52]) - 70) < 1.0
    tokens = np.arange(1, 2 * 500 + 1)
    windows = list(make_stream_dataset(tokens, 2, 20, seed=3).take(40).as_numpy_iterator())
    first = windows[0]["tokens"]
    assert first[0, 0] == 1 and first[1, 0] == 501 and windows[0]["reset"].tolist() == [1.0, 1.0]
    for previous, window in zip(windows, windows[1:]):          # each window continues where the last one stopped
        if window["reset"][0] == 0:
            assert window["tokens"][0, 0] == previous["tokens"][0, -1]
    assert any(w["reset"][0] == 1 for w in windows[1:])          # a second epoch started
    held_out = make_eval_windows(tokens, 2, 20)
    assert sum(w.shape[1] - 1 for w in held_out) == 499
