"""ULMFiT's three stages on a toy corpus with the tiny AWD-LSTM: the general LM (held-out perplexity, its vocabulary),
target-domain LM fine-tuning (init weights and vocabulary, the vocabulary grown by the target text's new words,
discriminative rates and STLR reaching the optimizer),
the classifier (gradual unfreezing leaves the encoder untouched in the first epoch, the backward direction must
match the LM's), the forward/backward ensemble, and the ensemble's classifier export under the contract of every
classifier export (kerasplm-free, bad inputs, served)."""
import json
import os
import random

import numpy as np
import pytest
import tensorflow as tf

from kerasplm import serving
from kerasplm.export import read_metadata
from kerasplm.export.classifier import ClassifierModule, export_classifier
from kerasplm.jobs.finetuning import make_classification_dataset, read_classification_tsv
from kerasplm.models.ulmfit.job import (ULMFiTClassifierJob, ULMFiTFineTuneLMJob, encode_lines, ensemble_probabilities,
                                  grown_vocabulary_weights, load_ulmfit_classifier, train_ulmfit_lm)
from kerasplm.runs import load_run
from kerasplm.text.word_vocab import WordSequencePreprocessor
from kerasplm.training import SlantedTriangular
from tests.job_harness import check_job
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, run_isolated
from tests.serving.client import predict

WORDS = "the a movie film plot actor was is very not".split()
POSITIVE, NEGATIVE = ["good", "great", "fine"], ["bad", "awful", "poor"]
QUIET = dict(log=lambda *_: None, verbose=0)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("ulmfit")
    rng = random.Random(0)
    with open(root / "corpus.txt", "w") as f:
        for _ in range(300):
            f.write(" ".join(rng.choice(WORDS + POSITIVE + NEGATIVE) for _ in range(rng.randint(4, 12))) + " .\n")
    with open(root / "train.tsv", "w") as f:
        f.write("sentence\tlabel\n")
        for _ in range(48):
            y = rng.randrange(2)
            words = rng.sample(POSITIVE if y else NEGATIVE, 2) + rng.sample(WORDS, rng.randint(1, 6))
            rng.shuffle(words)
            f.write(" ".join(words) + f"\t{'pos' if y else 'neg'}\n")
    lm = str(root / "lm")
    summary = train_ulmfit_lm(lm, corpus=str(root / "corpus.txt"), preset="awd_lstm_tiny", num_layers=2,
                              embedding_dim=8, hidden_dim=12, steps=2, batch_size=4, bptt=10, eval_batch_size=2,
                              **QUIET)
    return {"root": root, "corpus": str(root / "corpus.txt"), "train": str(root / "train.tsv"), "lm": lm,
            "lm_summary": summary}


@pytest.fixture(scope="module")
def finetuned(toy):
    job = ULMFiTFineTuneLMJob(str(toy["root"] / "ft"), init=toy["lm"], corpus=toy["corpus"], steps=1, batch_size=4,
                              bptt=10, eval_batch_size=2, **QUIET)
    return job, job.run()


@pytest.fixture(scope="module")
def classifier(toy, finetuned):
    job = ULMFiTClassifierJob(str(toy["root"] / "clf"), steps=3, **classifier_options(toy, finetuned))
    return job, job.run()


def classifier_options(toy, finetuned):
    return dict(init=finetuned[0].out, train=toy["train"], dev=toy["train"], schedule_steps=3, batch_size=8, bptt=16,
                max_length=16, gradual_unfreezing=True, **QUIET)


def test_the_classifier_job_road_tiny_run_resume(toy, finetuned, classifier, tmp_path):
    """The shared job road (tests/job_harness.py) for the classifier: stopped after step 1 and resumed (gradual
    unfreezing and STLR continue), the same weights as 3 steps straight. (The language models carry their recurrent
    state from window to window outside the checkpoint, so their resume restarts it from zero: not exact, by design;
    kerasplm/models/ulmfit/job.py.)"""
    check = check_job(lambda out, steps: ULMFiTClassifierJob(out, steps=steps, **classifier_options(toy, finetuned))
                      .run(), tmp_path, steps=3, split_at=1, run=classifier[0].out, family="ulmfit_classifier")
    assert check.resumed_summary["steps_this_run"] == 2


def test_general_language_model_reports_held_out_perplexity(toy):
    summary = toy["lm_summary"]
    assert summary["step"] == 2 and np.isfinite(summary["held_out_loss"])
    assert summary["held_out_perplexity"] == pytest.approx(np.exp(summary["held_out_loss"]), rel=1e-3)
    with open(os.path.join(toy["lm"], "config.json")) as f:
        config = json.load(f)
    assert (config["family"], config["preset"], config["options"]["backward"]) == ("ulmfit_lm", "awd_lstm_tiny", False)
    vocab = open(os.path.join(toy["lm"], "vocab.txt")).read().split("\n")
    assert vocab[:4] == ["<pad>", "<unk>", "<bos>", "<eos>"] and "movie" in vocab
    model = load_run(toy["lm"])
    ids = encode_lines(model.preprocessor, "the movie\n\nis good")
    assert ids.tolist() == [vocab.index(w) for w in ["the", "movie", "<eos>", "is", "good", "<eos>"]]
    assert encode_lines(model.preprocessor, "the movie\nis good", backward=True).tolist() == ids[::-1].tolist()


def test_target_lm_fine_tuning_uses_discriminative_rates_and_stlr(toy, finetuned):
    job, summary = finetuned
    optimizer = job.trainer.optimizer
    schedule = optimizer._learning_rate.schedule
    assert isinstance(schedule, SlantedTriangular) and schedule.max_learning_rate == 4e-3
    multipliers = {v.path: m for v, m in zip(job.trainer.model.trainable_variables, optimizer._lr_multipliers)}
    expected = {"lstm1": 2.6 ** -2, "lstm2": 2.6 ** -1, "embeddings": 1.0, "decoder_bias": 1.0}   # 2 layers
    for path, factor in multipliers.items():
        part = next(k for k in expected if k in path)
        assert factor == pytest.approx(expected[part]), path
    # The init run's vocabulary, and its weights as the starting point; the preset's dropouts × 0.3.
    assert open(os.path.join(job.out, "vocab.txt")).read() == open(os.path.join(toy["lm"], "vocab.txt")).read()
    assert job.model_config.weight_dropout == pytest.approx(0.5 * 0.3)
    assert np.isfinite(summary["held_out_perplexity"])


def test_target_lm_fine_tuning_adds_the_target_texts_new_words(toy):
    target = toy["root"] / "target.txt"
    target.write_text("the movie was superb .\nsuperb dreadful plot .\na dreadful film\n" * 3 + "superb once-only words\n")
    job = ULMFiTFineTuneLMJob(str(toy["root"] / "ft_new_words"), init=toy["lm"], corpus=str(target),
                              valid_corpus=str(target), steps=1, batch_size=2, bptt=5, eval_batch_size=1,
                              learning_rate=1e-12, **QUIET)
    job.run()
    init, tuned = load_run(toy["lm"]), load_run(job.out)
    old_vocab = open(os.path.join(toy["lm"], "vocab.txt")).read().split("\n")[:-1]
    vocab = open(os.path.join(job.out, "vocab.txt")).read().split("\n")[:-1]
    # Appended after the init vocabulary, most frequent first; "once-only" and "words" were seen once.
    assert vocab == old_vocab + ["superb", "dreadful"]
    assert encode_lines(tuned.preprocessor, "superb dreadful").tolist() == [len(old_vocab), len(old_vocab) + 1, 3]
    # Their vectors and output biases start at the init model's mean; the old rows are the init run's (a 1e-12 rate
    # leaves them where they were).
    table, bias = init.backbone.embeddings.numpy(), init.decoder_bias.numpy()
    np.testing.assert_allclose(tuned.backbone.embeddings.numpy()[:len(old_vocab)], table, atol=1e-6)
    np.testing.assert_allclose(tuned.backbone.embeddings.numpy()[len(old_vocab):], [table.mean(0)] * 2, atol=1e-6)
    np.testing.assert_allclose(tuned.decoder_bias.numpy()[len(old_vocab):], [bias.mean()] * 2, atol=1e-6)
    # --extend-vocab 0 keeps the init vocabulary: the same weights, the new words <unk>.
    weights = grown_vocabulary_weights(init, 0)
    assert all(np.array_equal(a, b) for a, b in zip(weights, init.get_weights()))


def test_classifier_gradual_unfreezing_trains_the_head_alone_in_the_first_epoch(toy, finetuned, classifier):
    job, summary = classifier
    assert summary["labels"] == ["neg", "pos"] and summary["dev"]["examples"] == 48
    model, init = job.trainer.model, load_run(finetuned[0].out)
    for trained, start in zip(model.backbone.trainable_variables, init.backbone.trainable_variables):
        np.testing.assert_array_equal(trained.numpy(), start.numpy())          # frozen: 3 steps of a 6-step epoch
    thaw = dict(zip([v.path for v in model.trainable_variables], job.trainer.optimizer._thaw_steps))
    assert len(model.backbone.lstms) == 2     # the LM's size overrides (--num-layers 2) carried through
    assert thaw["awd_lstm/embeddings"] == 3 * 6 and thaw["awd_lstm/lstm2/kernel"] == 6
    assert thaw["classifier/kernel"] == 0
    # Its dropouts are the preset's × 0.5, as the target LM's were the preset's × 0.3: the stages' factors scale the
    # architecture's rates and do not compound (0.3 · 0.5).
    config = model.backbone.config
    assert (config.weight_dropout, config.input_dropout) == pytest.approx((0.5 * 0.5, 0.65 * 0.5))
    assert load_run(job.out).backbone.config.weight_dropout == pytest.approx(0.5 * 0.5)
    with pytest.raises(ValueError, match="is a forward language model; a backward model needs a backward"):
        ULMFiTClassifierJob(str(toy["root"] / "backward"), init=toy["lm"], train=toy["train"], steps=1,
                            backward=True, **QUIET).run()
    with pytest.raises(ValueError, match="--eval-every: this ULMFiT classifier run has no held-out data to score"):
        ULMFiTClassifierJob(str(toy["root"] / "eval_every"), init=toy["lm"], train=toy["train"], dev=toy["train"],
                            steps=1, eval_every=1, **QUIET).run()
    assert not os.path.exists(toy["root"] / "eval_every" / "config.json")   # no half-made run left behind


def test_ensemble_averages_forward_and_backward_probabilities(classifier):
    forward = load_ulmfit_classifier(classifier[0].out)
    backward = load_ulmfit_classifier(classifier[0].out)
    p = forward.preprocessor
    backward.preprocessor = WordSequencePreprocessor(p.tokenizer, p.sequence_length, reverse=True, pad=False)
    texts = ["good great movie", "awful plot", ""]
    average = ensemble_probabilities([forward, backward], texts)
    expected = (tf.nn.softmax(forward.predict_texts(texts)) + tf.nn.softmax(backward.predict_texts(texts))) / 2
    np.testing.assert_allclose(average, expected, atol=1e-6)
    backward.labels = ["x", "y"]
    with pytest.raises(ValueError, match="labels differ"):
        ensemble_probabilities([forward, backward], texts)
    with pytest.raises(ValueError, match=r"must share labels and inputs: \['neg', 'pos'\] vs \['x', 'y'\]"):
        ClassifierModule(forward, ensemble_with=[backward])


@pytest.fixture(scope="module")
def backward_classifier(toy):
    """A backward language model and its classifier (a step or two each): the other half of ULMFiT's ensemble."""
    lm = str(toy["root"] / "backward_lm")
    train_ulmfit_lm(lm, corpus=toy["corpus"], preset="awd_lstm_tiny", num_layers=2, embedding_dim=8, hidden_dim=12,
                    steps=1, batch_size=4, bptt=10, eval_batch_size=2, backward=True, **QUIET)
    out = str(toy["root"] / "backward_clf")
    ULMFiTClassifierJob(out, init=lm, train=toy["train"], steps=2, batch_size=8, bptt=16, max_length=16,
                        **QUIET).run()
    return {"lm": lm, "classifier": out}


def test_export_answers_as_the_other_classifiers(classifier, backward_classifier, tmp_path):
    """The forward and backward classifiers exported as one ensemble (``--ensemble-with``): the mean of both
    runs' probabilities, each reading the text its own way, under the contract of every classifier export."""
    run, backward = classifier[0].out, backward_classifier["classifier"]
    path = export_classifier(run, str(tmp_path / "export"), ensemble_with=backward)
    texts = ["good great movie", "awful plot poor", "", "a " * 40]
    members = [load_ulmfit_classifier(run), load_ulmfit_classifier(backward)]
    assert members[1].preprocessor.reverse and not members[0].preprocessor.reverse
    expected = ensemble_probabilities(members, texts)
    assert not np.allclose(expected, tf.nn.softmax(members[0].predict_texts(texts)).numpy(), atol=1e-4)
    (outputs,) = run_isolated(path, [("serving_default", {"text": texts})])
    np.testing.assert_allclose(np.array(outputs["probabilities"]), expected, atol=1e-5)
    assert outputs["label"] == [["neg", "pos"][i] for i in expected.argmax(-1)]
    metadata = read_metadata(path)
    assert metadata["family"] == "ulmfit_classifier" and len(metadata["ensemble"]) == 2
    with pytest.raises(ValueError, match="is a 'ulmfit_lm' run, not a classifier"):
        export_classifier(run, str(tmp_path / "not_a_classifier"), ensemble_with=backward_classifier["lm"])

    def check(inputs, out):
        assert out["probabilities"].shape == (len(inputs), 2)
        np.testing.assert_allclose(out["probabilities"].sum(-1), 1.0, atol=1e-5)

    check_bad_inputs(path, "serving_default", "text", output_check=check)
    check_batch_safe(path)
    check_warmup(path)
    server = serving.ModelServer(os.path.dirname(path), "ulmfit", rest_api_port=0, grpc_port=None, quiet=True)
    server.start()
    try:
        status, body = predict(f"{server.url}/v1/models/ulmfit", {"instances": texts[:2]})
    finally:
        server.stop()
    assert status == 200, body
    np.testing.assert_allclose([row["probabilities"] for row in body["predictions"]], expected[:2], atol=1e-5)


def test_sortish_batches_hold_neighbours_in_length_and_every_example_once():
    """make_classification_dataset(sortish=8): each window of 8 batches' worth of the seeded shuffle is sorted by
    length and cut into batches (4 neighbours in length each), shuffled within the window; a window holds the
    examples it would without sortish, and the same seed gives the same batches."""
    texts, labels = ["x" * (i + 1) for i in range(64)], list(range(64))   # example i is i + 1 characters long

    def batches(sortish):
        ds = make_classification_dataset(lambda text, pair: {"text": text}, texts, None, labels, 4, shuffle=True,
                                         seed=3, repeat=True, sortish=sortish)
        return [sorted(y.numpy().tolist()) for _, y in ds.take(16)]   # two windows: one epoch

    plain, sortish = batches(0), batches(8)
    windows = [sorted(sum(plain[:8], [])), sorted(sum(plain[8:], []))]
    assert [sorted(sum(sortish[:8], [])), sorted(sum(sortish[8:], []))] == windows
    for window, run in zip(windows, (sortish[:8], sortish[8:])):
        assert sorted(run) == [window[k:k + 4] for k in range(0, 32, 4)]   # neighbours in length
        assert run != sorted(run)                                           # in a shuffled order
    spread = [np.mean([b[-1] - b[0] for b in run]) for run in (plain, sortish)]
    assert spread[1] < spread[0] / 3, spread
    assert batches(8) == sortish
    with pytest.raises(ValueError, match="sortish batches are for a repeated"):
        make_classification_dataset(lambda text, pair: {"text": text}, texts, None, labels, 4, sortish=8)


def test_the_language_model_refuses_a_distributed_strategy(tmp_path):
    from kerasplm.models.ulmfit.manifest import ULMFiTLanguageModelOptions

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\n", encoding="utf-8")
    with pytest.raises(ValueError, match="carries each stream's LSTM state .* --distribute default only"):
        ULMFiTLanguageModelOptions(corpus=str(corpus), distribute="multi-worker")
    assert ULMFiTLanguageModelOptions(corpus=str(corpus)).distribute == "default"


def test_embedding_geometry_reads_the_runs_table_and_adam_moments(toy):
    """benchmarks/embedding_geometry.py (the rare-word collapse figures) on a real run: the tied table and its Adam
    moments found by name in the checkpoint, the figures equal to a direct computation from them."""
    from benchmarks.embedding_geometry import geometry, mean_pairwise_cosine, read_table

    table, m, v = read_table(toy["lm"])
    np.testing.assert_array_equal(table, load_run(toy["lm"]).backbone.embeddings.numpy())
    assert m.shape == v.shape == table.shape and np.all(v >= 0) and np.any(m != 0)
    result = geometry(toy["lm"], rare=4, frequent=3)
    size = table.shape[0]
    rare = table[size - 4:]
    unit = rare / np.linalg.norm(rare, axis=1, keepdims=True)
    pairs = [unit[i] @ unit[j] for i in range(4) for j in range(4) if i != j]
    assert result["rare"]["mean_cosine"] == pytest.approx(np.mean(pairs), abs=1e-6)
    assert mean_pairwise_cosine(np.eye(3)) == pytest.approx(0.0) and mean_pairwise_cosine(np.ones((3, 2))) == \
        pytest.approx(1.0)
    steps = m[4:7] / (np.sqrt(v[4:7]) + 1e-6)
    assert result["frequent"]["adam_step"] == pytest.approx(np.abs(steps).mean(), rel=1e-5)
    with pytest.raises(SystemExit, match="fewer than --rare"):
        geometry(toy["lm"], rare=size, frequent=1)


def test_embedding_geometry_probe_reads_texts_as_the_classifier_and_fits_ridge(toy):
    """The linear probe of benchmarks/embedding_geometry.py: its features are the classifier's concat pooling and the
    mean word vector of <bos> + the words; the ridge fit separates separable labels and picks its strength on the
    training file's last fifth."""
    from benchmarks.embedding_geometry import linear_probe, probe_features, ridge_accuracy, spread
    from kerasplm.models.ulmfit.awd_lstm import concat_pooling

    model = load_run(toy["lm"])
    pooled, mean_vectors = probe_features(model, ["good movie", "the plot was very bad"], batch_size=1)
    ids = encode_lines(model.preprocessor, "good movie")[:-1]          # the words, without the <eos>
    ids = np.concatenate([[model.preprocessor.bos_id], ids])[np.newaxis]  # <bos> first, as the classifier reads it
    out = model.backbone(ids, training=False)
    expected = concat_pooling(out["sequence_output"], out["final_state"][-1][0], out["padding_mask"]).numpy()
    np.testing.assert_allclose(pooled[:1], expected, atol=1e-5)
    np.testing.assert_allclose(mean_vectors[0], model.backbone.embeddings.numpy()[ids[0]].mean(axis=0), atol=1e-6)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    x = np.stack([y + 0.1 * rng.normal(size=200), rng.normal(size=200)], axis=1)
    accuracy, strength = ridge_accuracy(x[:150], y[:150], x[150:], y[150:])
    assert accuracy == 1.0 and strength in (0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)
    assert ridge_accuracy(rng.normal(size=(150, 2)), y[:150], rng.normal(size=(50, 2)), y[150:])[0] < 0.8
    result = linear_probe(toy["lm"], toy["train"], toy["train"], max_examples=40)
    assert (result["train_examples"], result["dev_examples"]) == (40, 48)
    assert 0.0 <= result["pooled"]["dev_accuracy"] <= 1.0 and 0.0 <= result["mean_word_vector"]["dev_accuracy"] <= 1
    assert spread(np.array([[1.0, -2.0], [3.0, -2.0]])) == pytest.approx((1.0 + 0.0) / 2 / 2.0)   # std 1 and 0, |x| 2
    assert set(result["pooled"]["spread"]) == set(result["pooled"]["size"]) == {"last", "max", "mean"}
    hidden = pooled.shape[1] // 3
    dev_pooled = probe_features(model, read_classification_tsv(toy["train"])[0])[0]
    assert result["pooled"]["spread"]["max"] == pytest.approx(spread(dev_pooled[:, hidden:2 * hidden]), rel=1e-4)
    assert result["pooled"]["size"]["last"] == pytest.approx(np.abs(dev_pooled[:, :hidden]).mean(), rel=1e-4)
