"""Knowledge distillation (kerasplm.models.distilbert.distillation, kerasplm distill): the soft-target loss against numpy
(T², the tagger's real-token mask), alpha = 1 equal to plain fine-tuning, the layer maps and DistilBERT's
every-other-block start, the projections, the vocabulary check, and a tiny teacher distilled end to end and
exported as an ordinary classifier."""
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.cli import main
from kerasplm.export.classifier import export_classifier
from kerasplm.models.distilbert.distillation_job import augmented_batches, distill
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.tagger import BertTokenClassifier
from kerasplm.models.bert.classifier import BertClassifier
from kerasplm.models.distilbert.distillation import (Augmentation, DistillationProjections, DistillationSettings, augment_batch,
                                          check_same_vocabulary, distillation_loss_sums, init_from_teacher,
                                          parse_layer_map, student_config, teacher_init_layers, uniform_layer_map)
from kerasplm.models.presets import get_preset
from kerasplm.runs import RunDir, load_run
from kerasplm.text import BertTokenizer
from kerasplm.text.bert_tokenizer import BertPreprocessor
from kerasplm.training.losses import soft_target_loss_sums
from kerasplm.models.bert.tagger import BertTaggerPreprocessor
from kerasplm.text.wordpiece import WordPieceTokenizer
from tests.job_harness import check_job
from tests.models.bert.classifier_toy import NAMES, VOCAB
from tests.models.bert.tagger_toy import SENTENCES, TINY as TAGGER_TINY, VOCAB as TAGGER_VOCAB, write_conll

TEACHER = dict(vocab_size=len(VOCAB), num_layers=4, hidden_size=16, num_heads=2, intermediate_size=32,
               max_positions=16)


def numpy_soft_loss(teacher, student, temperature, mask):
    """T² · Σ_c p_c (log p_c − log q_c) per position, p/q the softmaxes at T; summed over mask, and mask's sum."""
    def log_softmax(z):
        z = z / temperature
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))
    log_p, log_q = log_softmax(teacher.astype(np.float64)), log_softmax(student.astype(np.float64))
    per_position = temperature ** 2 * (np.exp(log_p) * (log_p - log_q)).sum(-1)
    return (per_position * mask).sum(), mask.sum()


def test_soft_loss_matches_numpy_with_the_t_squared_factor_and_a_mask():
    rng = np.random.default_rng(0)
    teacher, student = rng.normal(size=(2, 3, 5, 4)).astype(np.float32) * 3
    mask = (rng.random((3, 5)) > 0.4).astype(np.float32)
    for temperature in (1.0, 2.0, 5.0):
        total, count = soft_target_loss_sums(teacher, student, temperature, mask)
        expected, expected_count = numpy_soft_loss(teacher, student, temperature, mask)
        np.testing.assert_allclose(float(total), expected, rtol=1e-5)
        assert float(count) == expected_count
    # Without a mask every position counts; equal logits give 0.
    total, count = soft_target_loss_sums(teacher[0], student[0], 2.0)
    np.testing.assert_allclose(float(total), numpy_soft_loss(teacher[0], student[0], 2.0, np.ones(5))[0], rtol=1e-5)
    assert float(count) == 5 and float(soft_target_loss_sums(teacher, teacher, 3.0)[0]) == pytest.approx(0, abs=1e-5)


def _tiny(cls, layers=4, width=16, seed=0, **kwargs):
    keras.utils.set_random_seed(seed)
    backbone = BertBackbone(**{**TEACHER, "num_layers": layers, "hidden_size": width, "intermediate_size": 2 * width})
    return cls(backbone, 3, dropout=0.1, **kwargs)


def _batch(rows=3, length=6, seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.array([length, 4, 2][:rows])
    padding = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)
    tokens = rng.integers(5, len(VOCAB), size=(rows, length)).astype(np.int32) * padding
    return {"token_ids": tf.constant(tokens), "segment_ids": tf.zeros_like(tokens),
            "padding_mask": tf.constant(padding)}


def _objective(results):
    """The Trainer's L = Σ λ_i S_i / C_i of a several-term result."""
    return sum(term[2] * term[0] / term[1] for term in results["losses"].values())


def test_alpha_one_is_plain_fine_tuning_and_the_tagger_soft_loss_counts_real_tokens_only():
    teacher, student = _tiny(BertClassifier, 4, seed=1), _tiny(BertClassifier, 2, seed=2)
    inputs, labels = _batch(), tf.constant([0, 2, 1])
    settings = DistillationSettings(temperature=2.0, alpha=1.0)
    variables = student.trainable_variables
    with tf.GradientTape(persistent=True) as tape:
        distilled = _objective(distillation_loss_sums(student, teacher, (inputs, labels), False, settings))
        plain = student.compute_loss_sums((inputs, labels), training=False)
        plain = plain["loss"] / plain["weight"]
    np.testing.assert_allclose(float(distilled), float(plain), rtol=1e-6)
    for a, b in zip(tape.gradient(distilled, variables), tape.gradient(plain, variables)):
        np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy(), rtol=1e-5,
                                   atol=1e-7)
    assert all(g is None for g in tape.gradient(distilled, teacher.trainable_variables))
    # The teacher runs in inference mode even in a training step: its logits are teacher(inputs, training=False)'s
    # (a student without dropout makes the whole soft term reproducible; the teacher has dropout 0.1).
    keras.utils.set_random_seed(3)
    still = BertClassifier(BertBackbone(**{**TEACHER, "num_layers": 2, "dropout": 0.0, "attention_dropout": 0.0}),
                           3, dropout=0.0)
    for model in (still, teacher):   # logits far from uniform at T = 3: a soft loss well above rounding
        model.head.kernel.assign(model.head.kernel * 100.0)
    halfway = distillation_loss_sums(still, teacher, (inputs, labels), True, DistillationSettings(3.0, 0.25))
    soft, count, weight = halfway["losses"]["soft"]
    assert weight == 0.75 and halfway["losses"]["hard"][2] == 0.25 and float(count) == 3
    student_logits = still(inputs, training=False).numpy()
    expected = numpy_soft_loss(teacher(inputs, training=False).numpy(), student_logits, 3.0, np.ones(3))[0]
    np.testing.assert_allclose(float(soft), expected, rtol=1e-4)
    dropped = numpy_soft_loss(teacher(inputs, training=True).numpy(), student_logits, 3.0, np.ones(3))[0]
    assert abs(dropped - expected) > 1e-2 * expected   # what a teacher with dropout would have given
    # Tagger: the soft term over the real tokens only (padding_mask), the hard one the tagger's own loss.
    t_tagger, s_tagger = _tiny(BertTokenClassifier, 4, seed=1), _tiny(BertTokenClassifier, 2, seed=2)
    tags, weights = tf.constant(np.ones((3, 6), np.int32)), tf.cast(inputs["padding_mask"], tf.float32)
    batch = {**inputs, "labels": tags, "label_weights": weights}
    result = distillation_loss_sums(s_tagger, t_tagger, batch, False, DistillationSettings(2.0, 0.5))
    expected = numpy_soft_loss(t_tagger(inputs, training=False).numpy(), s_tagger(inputs, training=False).numpy(),
                               2.0, inputs["padding_mask"].numpy())
    np.testing.assert_allclose([float(v) for v in result["losses"]["soft"][:2]], expected, rtol=1e-4)
    own = s_tagger.compute_loss_sums(batch, training=False)
    np.testing.assert_allclose(float(result["losses"]["hard"][0]), float(own["loss"]), rtol=1e-6)


CLS, SEP, MASK = 101, 102, 103


def _packed_rows(lengths, width, seed=0):
    """Single-text rows ``[CLS] text [SEP]`` of ``lengths`` text pieces (ids 200-299), padded with 0 to ``width``."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), width), np.int64)
    for b, n in enumerate(lengths):
        ids[b, :n + 2] = [CLS, *rng.integers(200, 300, size=n), SEP]
    return {"token_ids": tf.constant(ids), "segment_ids": tf.zeros_like(ids),
            "padding_mask": tf.constant((ids != 0).astype(np.int64))}


def cut_rows_long(mask, lengths, rows):
    """How many of ``rows`` hold fewer text pieces than their source."""
    return int(((mask.sum(1) - 2) < lengths)[rows].sum())


def test_augmentation_masks_and_cuts_only_the_rows_it_marks_at_its_rates():
    lengths = np.random.default_rng(1).integers(0, 20, size=4000)
    inputs = _packed_rows(lengths, 24)
    rule = Augmentation(rate=0.6, mask_probability=0.3, ngram_probability=0.5, max_ngram=5)
    out, augmented = augment_batch(inputs, [3, 4], rule, MASK)
    again, _ = tf.function(augment_batch)(inputs, tf.constant([3, 4], tf.int64), rule, MASK)
    other, _ = augment_batch(inputs, [3, 5], rule, MASK)
    ids, mask, augmented = out["token_ids"].numpy(), out["padding_mask"].numpy(), augmented.numpy().astype(bool)
    np.testing.assert_array_equal(ids, again["token_ids"].numpy())          # stateless: eager = traced
    assert not np.array_equal(ids, other["token_ids"].numpy())
    original = inputs["token_ids"].numpy()
    np.testing.assert_array_equal(ids[~augmented], original[~augmented])    # untouched rows
    np.testing.assert_array_equal(mask[~augmented], inputs["padding_mask"].numpy()[~augmented])
    assert np.all(out["segment_ids"].numpy() == 0)
    cut_rows, kept_lengths, masked, text_pieces = 0, [], 0, 0
    for b in np.flatnonzero(augmented):
        n = int(mask[b].sum()) - 2
        assert ids[b, 0] == CLS and ids[b, n + 1] == SEP and np.all(ids[b, n + 2:] == 0) and np.all(mask[b, :n + 2])
        text, source = ids[b, 1:n + 1], original[b, 1:lengths[b] + 1]
        if n == lengths[b]:   # not cut: the text with some pieces masked, in place
            assert np.all((text == source) | (text == MASK))
            masked, text_pieces = masked + int((text == MASK).sum()), text_pieces + n
        else:                 # cut: n consecutive pieces of the (masked) text, 1 <= n <= 5
            cut_rows += 1
            kept_lengths.append(n)
            assert 1 <= n <= 5 and any(np.all((text == source[s:s + n]) | (text == MASK))
                                       for s in range(lengths[b] - n + 1))
    assert abs(augmented.mean() - 0.6) < 0.03                               # rate, 4000 rows
    assert abs(masked / text_pieces - 0.3) < 0.02                           # mask probability over pieces
    # A text longer than 5 pieces always shrinks when cut: there the cut rows' share is the n-gram probability.
    long_rows = augmented & (lengths > 5)
    assert abs(cut_rows_long(mask, lengths, long_rows) / long_rows.sum() - 0.5) < 0.05 and cut_rows > 0
    assert set(kept_lengths) == {1, 2, 3, 4, 5}
    # Rate 0 changes nothing; an empty text ([CLS] [SEP]) is never cut.
    none, flags = augment_batch(inputs, [3, 4], Augmentation(rate=0.0), MASK)
    np.testing.assert_array_equal(none["token_ids"].numpy(), original)
    np.testing.assert_array_equal(flags.numpy(), 0)
    empty = _packed_rows([0, 0], 4)
    cut, _ = augment_batch(empty, [0, 1], Augmentation(1.0, 1.0, 1.0), MASK)
    np.testing.assert_array_equal(cut["token_ids"].numpy(), empty["token_ids"].numpy())
    with pytest.raises(ValueError, match="augmentation rate must be in"):
        Augmentation(rate=1.5)


def test_augmented_rows_carry_the_soft_targets_only():
    teacher, student = _tiny(BertClassifier, 4, seed=1), _tiny(BertClassifier, 2, seed=2)
    inputs, labels = _batch(), tf.constant([0, 2, 1])
    settings = DistillationSettings(temperature=2.0, alpha=0.5)
    weighted = distillation_loss_sums(student, teacher, (inputs, labels, tf.constant([1.0, 0.0, 1.0])), False,
                                      settings)
    full = distillation_loss_sums(student, teacher, (inputs, labels), False, settings)
    logits = student(inputs, training=False).numpy().astype(np.float64)
    log_q = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(log_q[0, 0] + log_q[2, 1])                                  # rows 0 and 2 only
    hard_sum, hard_count, _ = weighted["losses"]["hard"]
    np.testing.assert_allclose(float(hard_sum), expected, rtol=1e-5)
    assert float(hard_count) == 2 and float(weighted["accuracy"][1]) == 2
    np.testing.assert_allclose([float(v) for v in weighted["losses"]["soft"][:2]],   # every row's soft target
                               [float(v) for v in full["losses"]["soft"][:2]], rtol=1e-6)


def test_layer_maps_and_the_every_other_block_start():
    assert uniform_layer_map(2, 4) == [1, 3] and uniform_layer_map(4, 12) == [2, 5, 8, 11]
    assert uniform_layer_map(3, 4) == [1, 2, 3]
    assert teacher_init_layers(6, 12) == [0, 2, 4, 6, 8, 10] and teacher_init_layers(2, 4) == [0, 2]
    assert parse_layer_map("0:0, 1:3", 2, 4) == [(0, 0), (1, 3)]
    assert parse_layer_map(None, 2, 4) == [(0, 1), (1, 3)]
    for bad, message in [("0-1", "not STUDENT:TEACHER"), ("0:4", "outside"), ("0:1,0:2", "mapped twice")]:
        with pytest.raises(ValueError, match=message):
            parse_layer_map(bad, 2, 4)
    with pytest.raises(ValueError, match="cannot start from a teacher of 4"):
        teacher_init_layers(5, 4)

    teacher = _tiny(BertClassifier, 4, seed=1)
    config = student_config(teacher.backbone.config, num_layers=2, from_teacher=True)
    student = BertClassifier(BertBackbone.from_config_object(config), 3)
    assert init_from_teacher(student, teacher) == [0, 2]
    for i, j in [(0, 0), (1, 2)]:
        for ours, theirs in zip(student.backbone.blocks[i].get_weights(), teacher.backbone.blocks[j].get_weights()):
            np.testing.assert_array_equal(ours, theirs)
    for part in ("embeddings", "pooler"):
        for ours, theirs in zip(getattr(student.backbone, part).get_weights(),
                                getattr(teacher.backbone, part).get_weights()):
            np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(student.head.get_weights()[0], teacher.head.get_weights()[0])
    # Default depth from the teacher: half of it; a preset of another width cannot start from the teacher.
    assert student_config(teacher.backbone.config, from_teacher=True).num_layers == 2
    with pytest.raises(ValueError, match="hidden_size is 128 and the teacher's 16"):
        student_config(teacher.backbone.config, get_preset("bert_tiny"), from_teacher=True)
    # A random student takes the preset's shape and the teacher's tokenizer fields.
    random = student_config(teacher.backbone.config, get_preset("bert_tiny"), num_layers=1)
    assert (random.hidden_size, random.num_layers, random.vocab_size, random.max_positions) == (128, 1, len(VOCAB), 16)


def test_projection_shapes_and_the_hidden_and_attention_terms():
    projections = DistillationProjections(8, 16)
    assert [tuple(w.shape) for w in projections.trainable_variables] == [(8, 16), (8, 16)]
    teacher, student = _tiny(BertClassifier, 4, seed=1), _tiny(BertClassifier, 2, width=8, seed=2)
    inputs, labels = _batch(), tf.constant([0, 2, 1])
    settings = DistillationSettings(2.0, 0.5, hidden=True, attention=True, layer_map=((0, 1), (1, 3)))
    with tf.GradientTape() as tape:
        result = distillation_loss_sums(student, teacher, (inputs, labels), False, settings, projections)
        total = _objective(result)
    # hidden: 3 pairs (embeddings + 2 blocks) of (12 real tokens × 16) elements, reported per pair.
    real = float(inputs["padding_mask"].numpy().sum())
    assert float(result["losses"]["hidden"][1]) == real * 16
    # attention: real query × key cells (Σ n_b²) × 2 heads, per pair; the value against numpy.
    lengths = inputs["padding_mask"].numpy().sum(1)
    assert float(result["losses"]["attention"][1]) == 2 * float((lengths ** 2).sum())
    s_att = student.backbone(inputs, output_attentions=True)["attentions"]
    t_att = teacher.backbone(inputs, output_attentions=True)["attentions"]
    keep = np.asarray(inputs["padding_mask"], np.float64)
    keep = keep[:, None, :, None] * keep[:, None, None, :]
    expected = sum((((s_att[i].numpy() - t_att[j].numpy()) ** 2) * keep).sum() for i, j in [(0, 1), (1, 3)])
    np.testing.assert_allclose(float(result["losses"]["attention"][0]), expected, rtol=1e-5)
    assert all(g is not None for g in tape.gradient(total, projections.trainable_variables))


def test_a_student_must_share_the_teachers_vocabulary(tmp_path):
    (tmp_path / "a.txt").write_text("\n".join(VOCAB) + "\n")
    (tmp_path / "b.txt").write_text("\n".join(VOCAB[:-1] + ["other"]) + "\n")
    a, b = (BertPreprocessor.for_tokenizer(BertTokenizer(str(tmp_path / name)), 8) for name in ("a.txt", "b.txt"))
    check_same_vocabulary(a, a)
    with pytest.raises(ValueError, match="do not share a vocabulary .*a.txt vs .*b.txt"):
        check_same_vocabulary(a, b)


# ------------------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def teacher(toy, learned_run):
    """The classifier the finetune tests train (2 blocks of width 32, 30 steps; a session fixture shared with them
    and the export tests) as the teacher."""
    return {"root": toy["root"], "run": learned_run[0], "train": toy["train"], "dev": toy["dev"], "init": toy["init"]}


def test_distill_a_classifier_end_to_end_and_export_the_student(teacher, capsys):
    out, lines = str(teacher["root"] / "student"), []
    summary = distill(out, log=lines.append, teacher=teacher["run"], student_layers=1, train=teacher["train"],
                      dev=teacher["dev"], steps=2, batch_size=16, learning_rate=1e-3, hidden_loss=True,
                      attention_loss=True, verbose=0)
    assert summary["step"] == 2 and set(summary["teacher"]["dev"]) >= {"accuracy", "f1", "mcc"}
    assert summary["dev"]["examples"] == summary["teacher"]["dev"]["examples"] == 64
    assert any("copied from the teacher's blocks [0]" in line for line in lines)
    history = json.load(open(os.path.join(out, "history.json")))
    assert {"hard_loss", "soft_loss", "hidden_loss", "attention_loss", "accuracy"} <= set(history)
    # An ordinary classifier run: loaded by load_run, exported, answering as the Python model.
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["family"] == "bert_classifier" and config["options"]["teacher"] == os.path.abspath(teacher["run"])
    student = load_run(out)
    assert student.backbone.config.num_layers == 1 and student.labels == NAMES and os.path.isfile(
        os.path.join(out, "vocab.txt"))
    texts = ["the movie was good great", "awful bad plot", ""]
    version = export_classifier(out, str(teacher["root"] / "student_export"))
    served = tf.saved_model.load(version).signatures["serving_default"](text=tf.constant(texts))
    np.testing.assert_allclose(served["probabilities"].numpy(), student.predict_texts(texts), atol=1e-5)

    # The command line: a random student of another width with the hidden-state loss (its projections are the
    # checkpoint's `auxiliary`, the student run's `model` stays the classifier), stopped and resumed.
    # The shared job road (tests/job_harness.py) through the CLI: 2 steps straight, and 1 step resumed to 2.
    def cli(out, steps):
        assert main(["distill", "--out", str(out), "--teacher", teacher["run"], "--student-preset", "bert_tiny",
                     "--student-layers", "1", "--student-init", "random", "--hidden-loss", "--train",
                     teacher["train"], "--batch-size", "16", "--steps", str(steps), "--schedule-steps", "2",
                     "--temperature", "3", "--alpha", "0.2", "--quiet"]) == 0

    check = check_job(cli, teacher["root"] / "cli_student", steps=2, split_at=1, family="bert_classifier")
    assert "wrote" in capsys.readouterr().out
    checkpoint = tf.train.latest_checkpoint(os.path.join(check.resumed_run, "checkpoints"))
    assert any(name.startswith("auxiliary/hidden/") for name, _ in tf.train.list_variables(checkpoint))
    cli_student = check.model
    assert cli_student.run_info.step == 2 and cli_student.backbone.config.hidden_size == 128
    # One-line refusals: a teacher that is not a classifier or tagger, a width the teacher's blocks cannot fill.
    with pytest.raises(ValueError, match="a bert run; distil a classifier run"):
        distill(str(teacher["root"] / "x"), teacher=teacher["init"], train=teacher["train"], steps=1)
    with pytest.raises(ValueError, match="student preset's hidden_size is 128"):
        distill(str(teacher["root"] / "y"), teacher=teacher["run"], student_preset="bert_tiny",
                train=teacher["train"], steps=1)


def test_distill_with_augmented_rows_and_their_batches_on_resume(teacher, capsys):
    out, lines = str(teacher["root"] / "augmented_student"), []
    summary = distill(out, log=lines.append, teacher=teacher["run"], student_layers=1, train=teacher["train"],
                      dev=teacher["dev"], steps=2, batch_size=16, augment=0.5, verbose=0)
    assert summary["step"] == 2 and "hard_loss" in json.load(open(os.path.join(out, "history.json")))
    assert json.load(open(os.path.join(out, "config.json")))["options"]["augment"] == 0.5
    assert any(line.startswith("augmentation: 50% of the training rows") for line in lines)
    # Batch k is augmented with the seed (seed, k), so a resumed run's skip(k) sees the rows it would have seen.
    rows = _packed_rows(np.random.default_rng(0).integers(1, 12, size=64), 14)
    plain = lambda: tf.data.Dataset.from_tensor_slices((rows, tf.range(64))).repeat().batch(8)  # noqa: E731
    batches = augmented_batches(plain, Augmentation(0.5, 0.3, 0.5), MASK, 0, seed=7)
    first = [b for b in batches().take(6)]
    resumed = [b for b in batches().skip(4).take(2)]
    for (a_inputs, a_labels, a_weights), (b_inputs, b_labels, b_weights) in zip(first[4:], resumed):
        np.testing.assert_array_equal(a_inputs["token_ids"].numpy(), b_inputs["token_ids"].numpy())
        np.testing.assert_array_equal(a_weights.numpy(), b_weights.numpy())
    weights = np.concatenate([w.numpy() for _, _, w in first])
    assert set(weights) == {0.0, 1.0}
    for inputs, labels, w in first:   # weight 0 exactly on the rows that changed or may have
        changed = np.any(inputs["token_ids"].numpy() != rows["token_ids"].numpy()[labels.numpy()], axis=1)
        assert not np.any(changed & (w.numpy() == 1))
    # The command line keeps the rate in [0, 1].
    with pytest.raises(SystemExit) as exit_info:
        main(["distill", "--out", str(teacher["root"] / "z"), "--teacher", teacher["run"], "--train",
              teacher["train"], "--augment", "1.5"])
    assert exit_info.value.code == 2 and "--augment" in capsys.readouterr().err


def test_distill_a_tagger(tmp_path):
    """A tagger teacher (a hand-made run) distilled for one step: the student is a tagger run of the teacher's tags;
    a CRF teacher is refused."""
    keras.utils.set_random_seed(0)
    labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    for name, crf in (("teacher", False), ("crf_teacher", True)):
        run = RunDir(str(tmp_path / name))
        run.write_text("vocab.txt", "\n".join(TAGGER_VOCAB) + "\n")
        preprocessor = BertTaggerPreprocessor(WordPieceTokenizer(run.file("vocab.txt")), 16)
        model = BertTokenClassifier(BertBackbone(**{**TAGGER_TINY, "num_layers": 2}), len(labels), crf=crf,
                                    labels=labels)
        tf.train.CheckpointManager(tf.train.Checkpoint(model=model), run.checkpoint_dir, max_to_keep=1).save()
        run.write_config("bert_tagger", "token_classification", "custom", model, {}, assets={"vocab": "vocab.txt"},
                         preprocessor=preprocessor)
    train = write_conll(tmp_path / "train.conll", SENTENCES)
    summary = distill(str(tmp_path / "student"), log=lambda *_: None, teacher=str(tmp_path / "teacher"), train=train,
                      dev=train, steps=1, batch_size=4, student_layers=1, attention_loss=True, verbose=0)
    student = load_run(str(tmp_path / "student"))
    assert isinstance(student, BertTokenClassifier) and student.labels == labels
    assert student.backbone.config.num_layers == 1 and summary["teacher"]["dev_sentences"] == 3
    with pytest.raises(ValueError, match="a CRF tagger"):
        distill(str(tmp_path / "x"), teacher=str(tmp_path / "crf_teacher"), train=train, steps=1)
    with pytest.raises(ValueError, match="--augment is for classifier runs"):
        distill(str(tmp_path / "w"), teacher=str(tmp_path / "teacher"), train=train, steps=1, augment=0.5)
    assert not os.path.exists(tmp_path / "w")
