"""finetune_bert_classifier on a toy sentiment task with a tiny BERT run: it learns, reports exact metrics,
resumes exactly (the job harness), refuses conflicting options; the TSV reader; layer-wise learning-rate decay."""
import json
import os
import random
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.cli import main
from kerasplm.models.bert.convert import convert_bert_to_run, save_tf_bert
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.classifier import BertClassifier
from kerasplm.models.bert.classifier_job import (LayerwiseAdamW, finetune_bert_classifier, layer_decay_multiplier,
                                          load_bert_classifier, read_classification_tsv)
from kerasplm.options import OptionsConflict
from kerasplm.text import write_vocab
from tests.job_harness import check_job
from tests.models.bert.classifier_toy import (FILLER, NAMES, POSITIVE, TINY, VOCAB, learned_options,
                                             write_tsv)


def test_learns_reports_and_resumes(learned_run, toy, tmp_path):
    out, summary, lines = learned_run
    dev = summary["dev"]
    assert summary["step"] == 30 and summary["planned_steps"] == 48 and summary["labels"] == NAMES
    assert dev["examples"] == 64 and dev["accuracy"] >= 0.9, dev
    assert any(line.startswith("dev accuracy") for line in lines)
    # The reported metrics are those of the returned model's predictions (exact, over the whole dev file).
    classifier = load_bert_classifier(out)
    texts, _, labels = read_classification_tsv(toy["dev"])
    predicted = classifier.predict_texts(texts).argmax(-1)
    assert dev["accuracy"] == pytest.approx(np.mean(predicted == np.array([NAMES.index(y) for y in labels])))
    assert json.load(open(os.path.join(out, "metrics.json")))["dev"] == dev
    # The shared job road (tests/job_harness.py): stopped at step 15 and resumed, the same job reaches the
    # uninterrupted run's weights; a resume given other values of its stored options is refused.
    check = check_job(lambda to, steps: finetune_bert_classifier(to, log=lambda *_: None, steps=steps,
                                                                 **learned_options(toy)),
                      tmp_path, steps=30, split_at=15, run=out, family="bert_classifier")
    assert check.resumed_summary["steps_this_run"] == 15
    assert check.resumed_summary["dev"]["accuracy"] == pytest.approx(dev["accuracy"])
    with pytest.raises(OptionsConflict, match="learning_rate"):
        finetune_bert_classifier(check.resumed_run, steps=50, learning_rate=1e-4)
    # A new run trains on sortish batches cut to multiples of 16 tokens; a run recorded before the options keeps
    # plain shuffled batches padded to --max-length.
    assert json.load(open(os.path.join(out, "config.json")))["options"]["length_bucket"] == 16
    assert json.load(open(os.path.join(out, "config.json")))["options"]["sortish"] == 50
    assert any("sortish batches (windows of 50 batches sorted by tokens); batches padded to their longest example, "
               "rounded up to a multiple of 16 tokens" in line for line in lines)
    old, lines = str(tmp_path / "old"), []
    shutil.copytree(out, old)
    config = json.load(open(os.path.join(old, "config.json")))
    del config["options"]["length_bucket"], config["options"]["sortish"]
    json.dump(config, open(os.path.join(old, "config.json"), "w"))
    assert finetune_bert_classifier(old, steps=31, verbose=0, log=lines.append)["step"] == 31
    data = [line for line in lines if line.startswith("data: ")]
    assert data and not any("rounded up" in line or "sortish" in line for line in data)


def test_resume_reaches_the_planned_total_and_a_budget_alone_fits_the_schedule(toy, tmp_path):
    """--steps sets the schedule's length (not --epochs) and is recorded: asking the finished run for more steps
    stops where the learning rate reached 0. Given a time budget only, the job times its first steps and fits
    the schedule to what the budget allows, at most --epochs' steps."""
    common = dict(train=toy["train"], init=toy["init"], learning_rate=2e-3, batch_size=16, max_length=12,
                  verbose=0, seed=1)
    out, lines = str(tmp_path / "steps"), []
    summary = finetune_bert_classifier(out, steps=6, epochs=3, log=lines.append, **common)
    assert summary["planned_steps"] == 6
    assert json.load(open(os.path.join(out, "history.json")))["learning_rate"][-1] == 0.0
    assert json.load(open(os.path.join(out, "config.json")))["options"]["schedule_steps"] == 6
    assert finetune_bert_classifier(out, steps=8, verbose=0, log=lines.append)["step"] == 6
    assert any("reaches 0 at step 6" in line for line in lines)
    out = str(tmp_path / "budget")
    summary = finetune_bert_classifier(out, time_budget=600, epochs=10, log=lambda *_: None, **common)  # 160 steps
    assert summary["step"] == summary["planned_steps"] == 160 and summary["stop_reason"] == "steps"
    assert json.load(open(os.path.join(out, "config.json")))["options"]["schedule_steps"] == 160
    assert json.load(open(os.path.join(out, "history.json")))["learning_rate"][-1] == 0.0


def test_pooling_follows_a_sentence_transformers_init(toy, tmp_path):
    """Without --pooling, a classifier started from a sentence-transformers model pools as that model was trained
    (the pooling its run records, as `convert bert` writes it for all-MiniLM-L6-v2: mean); --pooling wins; a plain
    BERT run gives the paper's [CLS] pooler (test_cli_pairs_and_errors)."""
    init = str(tmp_path / "sentence_transformer")
    shutil.copytree(toy["init"], init)
    config = json.load(open(os.path.join(init, "config.json")))
    config["options"]["sentence_embedding"] = {"pooling": ["mean_tokens"], "normalize": True, "max_seq_length": 256}
    json.dump(config, open(os.path.join(init, "config.json"), "w"))
    common = dict(train=toy["train"], init=init, steps=1, schedule_steps=2, batch_size=8, max_length=12, verbose=0)
    for given, expected, said in [(None, "mean", "pooling mean, the init run's sentence-transformers pooling"),
                                  ("cls", "cls", "pooling cls")]:
        out, lines = str(tmp_path / f"pooling_{given}"), []
        finetune_bert_classifier(out, log=lines.append, pooling=given, **common)
        assert json.load(open(os.path.join(out, "config.json")))["options"]["pooling"] == expected
        assert load_bert_classifier(out).pooling == expected
        assert any(line.startswith("started from") and f"; {said}; peak learning rate" in line for line in lines), \
            lines
        resumed = finetune_bert_classifier(out, log=lambda *_: None, steps=2, verbose=0)
        assert resumed["step"] == 2 and resumed["classifier"].pooling == expected


def test_default_peak_rate_follows_the_backbone_width(toy, tmp_path):
    """Without --learning-rate: 1e-4 for a backbone narrower than BERT-base (the toy's 32; all-MiniLM-L6-v2's 384),
    the BERT paper's 3e-5 for one of BERT-base's width 768; the schedule peaks there, and a resume keeps the rate."""
    wide_source = str(tmp_path / "wide")
    keras.utils.set_random_seed(0)
    save_tf_bert(BertBackbone(**{**TINY, "num_layers": 1, "hidden_size": 768}), wide_source)
    write_vocab(VOCAB, os.path.join(wide_source, "vocab.txt"))
    wide = convert_bert_to_run(wide_source, str(tmp_path / "wide_run")).path
    common = dict(train=toy["train"], steps=2, schedule_steps=4, warmup_fraction=0.25, batch_size=8, max_length=12,
                  verbose=0)
    for init, given, expected, said in [
            (toy["init"], None, 1e-4, "peak learning rate 0.0001 (a backbone narrower than BERT-base: width 32)"),
            (wide, None, 3e-5, "peak learning rate 3e-05 (the BERT paper's)"),
            (toy["init"], 5e-4, 5e-4, "peak learning rate 0.0005")]:
        out, lines = str(tmp_path / f"rate_{expected}"), []
        finetune_bert_classifier(out, log=lines.append, init=init, learning_rate=given, **common)
        assert json.load(open(os.path.join(out, "config.json")))["options"]["learning_rate"] == expected
        assert any(line.startswith("started from") and line.endswith(said) for line in lines), lines
        # warmup over the first of 4 steps, then linear decay: the rate after the second step is the peak's 2/3
        rates = json.load(open(os.path.join(out, "history.json")))["learning_rate"]
        assert rates[-1] == pytest.approx(expected * 2 / 3, rel=1e-5)
        if init == wide:    # a resume without --learning-rate keeps the recorded default (one resume suffices)
            resumed = finetune_bert_classifier(out, log=lambda *_: None, steps=3, verbose=0)
            assert resumed["step"] == 3
            rates = json.load(open(os.path.join(out, "history.json")))["learning_rate"]
            assert rates[-1] == pytest.approx(expected / 3)


def test_a_schedule_of_options_whose_rate_is_not_settled_is_refused_by_name():
    from kerasplm.models.bert.manifest import BertClassifierOptions
    from kerasplm.jobs.finetuning import fine_tuning_schedule

    with pytest.raises(ValueError, match="needs a peak learning rate: options.learning_rate is None"):
        fine_tuning_schedule(BertClassifierOptions(), 10)
    assert float(fine_tuning_schedule(BertClassifierOptions(learning_rate=3e-5, warmup_fraction=0.5), 10)(5)) \
        == pytest.approx(3e-5)


def test_cli_pairs_and_errors(pair_run, learned_run, toy, tmp_path, capsys):
    model = load_bert_classifier(pair_run)
    assert model.pair_input and model.labels == ["0", "1"] and model.pooling == "mean"
    stored = json.load(open(os.path.join(pair_run, "config.json")))["model"]
    assert stored["class_name"] == "BertClassifier" and stored["config"]["pooling"] == "mean"
    assert stored["config"]["labels"] == ["0", "1"] and stored["config"]["pair_input"] is True
    assert load_bert_classifier(learned_run[0]).pooling == "cls"                  # the default
    assert json.load(open(os.path.join(pair_run, "metrics.json")))["dev"]["examples"] == 64
    assert main(["finetune", "bert-classifier", "--train", toy["train"], "--init", toy["init"], "--text-col", "text",
                 "--steps", "1", "--out", str(tmp_path / "bad")]) == 2
    assert "no column 'text' in the header (sentence, label)" in capsys.readouterr().err


def test_random_init_keeps_the_architecture_and_vocabulary_but_not_the_weights(toy, tmp_path):
    """--random-init: the baseline without pretraining (same run layout, fresh weights, seeded)."""
    from kerasplm.models.bert.runs import bert_run_parts

    pretrained = bert_run_parts(toy["init"])[0]
    weights = {}
    for name in ("a", "b"):
        out = str(tmp_path / name)
        lines = []
        finetune_bert_classifier(out, log=lines.append, steps=1, train=toy["train"], init=toy["init"],
                                 random_init=True, learning_rate=1e-12, batch_size=8, max_length=12, verbose=0,
                                 seed=3)
        assert any("fresh weights" in line for line in lines)
        model = load_bert_classifier(out)
        assert model.backbone.config == pretrained.config
        assert json.load(open(os.path.join(out, "config.json")))["options"]["random_init"] is True
        weights[name] = model.backbone.embeddings.embedding.embeddings.numpy()
    table = pretrained.embeddings.embedding.embeddings.numpy()
    assert np.abs(weights["a"] - table).max() > 1e-3          # not the pretrained weights
    np.testing.assert_array_equal(weights["a"], weights["b"])  # the same seed draws the same ones


def test_read_tsv(tmp_path):
    path = write_tsv(tmp_path / "x.tsv", [("a b", "pos", "x"), ("c", "neg", "y")], ["text", "label", "other"])
    assert read_classification_tsv(path, "text", "label") == (["a b", "c"], None, ["pos", "neg"])
    assert read_classification_tsv(path, "0", "2", pair_col="1", header=False, max_examples=2) == \
        (["text", "a b"], ["label", "pos"], ["other", "x"])
    short = tmp_path / "short.tsv"
    short.write_text("sentence\tlabel\nfine\t1\nno label here\n")
    with pytest.raises(ValueError, match=r"short.tsv:3: 1 column\(s\), column 1 needed"):
        read_classification_tsv(str(short))
    with pytest.raises(ValueError, match="is a name but the file has no header"):
        read_classification_tsv(path, "text", "1", header=False)


def test_layer_decay_scales_each_update():
    keras.utils.set_random_seed(0)
    model = BertClassifier(BertBackbone(**TINY, name="bert"), 2)
    multiplier = layer_decay_multiplier(2, 0.5)
    optimizer = LayerwiseAdamW(multiplier, learning_rate=1e-2, weight_decay=0.0, epsilon=1e-12)
    variables = model.trainable_variables
    optimizer.build(variables)
    before = [v.numpy().copy() for v in variables]
    optimizer.apply_gradients([(tf.ones_like(v), v) for v in variables])
    expected = {"bert/embeddings/embedding/embeddings": 0.125, "bert/block1/ffn/dense/kernel": 0.25,
                "bert/block2/layernorm2/gamma": 0.5, "bert/pooler/kernel": 1.0, "classifier/kernel": 1.0}
    seen = {}
    for v, old in zip(variables, before):
        step = np.abs(v.numpy() - old)            # Adam's first step: lr · g / |g| = lr, times the multiplier
        np.testing.assert_allclose(step, 1e-2 * multiplier(v), rtol=1e-4, err_msg=v.path)
        seen[v.path] = multiplier(v)
    for path, factor in expected.items():
        matches = [p for p in seen if p.startswith(path.rsplit("/", 1)[0]) and p.endswith(path.rsplit("/", 1)[1])]
        assert matches and all(seen[p] == factor for p in matches), (path, matches)


def test_a_mirrored_strategy_fine_tunes_like_one_device(toy, tmp_path):
    """The pretrained backbone is built under the strategy's scope (Job.run enters it around build_data): before,
    ``--distribute mirrored`` failed on the backbone's variables. One replica and the same data and weights; the
    dropout masks are drawn in a replica context, so the losses agree closely but not bit for bit."""
    common = dict(train=toy["train"], init=toy["init"], steps=3, batch_size=8, max_length=16, verbose=0,
                  jit_compile=False, log=lambda *_: None)
    default = finetune_bert_classifier(str(tmp_path / "default"), **common)
    mirrored = finetune_bert_classifier(str(tmp_path / "mirrored"), distribute="mirrored", **common)
    assert mirrored["step"] == default["step"] == 3
    assert mirrored["final_loss"] == pytest.approx(default["final_loss"], rel=1e-2)


def test_batches_are_cut_to_their_longest_example_and_the_model_does_not_notice(toy):
    """length_bucket: each batch is cut to its longest example rounded up to a multiple of the bucket (unknown static
    width), labels untouched, only padding dropped; the classifier's logits on the cut batch equal those on the
    batch padded to the preprocessor's 32 tokens."""
    from kerasplm.jobs.finetuning import make_classification_dataset
    from kerasplm.runs import load_run
    from kerasplm.text.bert_tokenizer import BertPreprocessor

    backbone = load_run(toy["init"])
    preprocessor = BertPreprocessor(backbone.preprocessor.tokenizer, 32)
    model = BertClassifier(backbone, 2, dropout=0.0)
    texts, labels = ["good", "the movie was very good and the plot was fine !", "bad", "sad film"], [1, 1, 0, 0]
    full = make_classification_dataset(preprocessor, texts, None, labels, 2)
    cut = make_classification_dataset(preprocessor, texts, None, labels, 2, length_bucket=4)
    assert cut.element_spec[0]["token_ids"].shape.as_list() == [None, None]
    widths = []
    for (full_inputs, full_labels), (inputs, cut_labels) in zip(full, cut):
        widths.append(inputs["token_ids"].shape[1])
        longest = int(full_inputs["padding_mask"].numpy().sum(-1).max())
        assert widths[-1] == -(-longest // 4) * 4 and full_inputs["token_ids"].shape[1] == 32
        np.testing.assert_array_equal(cut_labels, full_labels)
        for key, value in inputs.items():
            np.testing.assert_array_equal(value, full_inputs[key][:, :widths[-1]])
            assert not full_inputs["padding_mask"][:, widths[-1]:].numpy().any()
        np.testing.assert_allclose(model(inputs, training=False), model(full_inputs, training=False), atol=1e-5)
    assert widths == [16, 4]


def test_sortish_batches_sort_by_tokens_and_pay_for_fewer_padded_positions(toy):
    """token_lengths counts each example's word pieces ([CLS]/[SEP] included, at most the preprocessor's width);
    make_classification_dataset(sortish=W, lengths=...) sorts each window of W batches by them: the window holds the
    examples of the plain shuffle, each batch holds neighbours in token count, and the batches, cut to their longest
    example, hold fewer positions than the plain ones."""
    from kerasplm.jobs.finetuning import make_classification_dataset, token_lengths
    from kerasplm.runs import load_run
    from kerasplm.text.bert_tokenizer import BertPreprocessor

    preprocessor = BertPreprocessor(load_run(toy["init"]).preprocessor.tokenizer, 16)
    rng = random.Random(5)
    texts = [" ".join(rng.choices(FILLER + POSITIVE, k=rng.randrange(1, 20))) for _ in range(64)]
    lengths = token_lengths(preprocessor, texts, chunk=10)
    expected = [min(len(t.split()) + 2, 16) for t in texts]   # every toy word is one piece
    assert lengths.tolist() == expected
    pairs = texts[::-1]
    pair_inputs = preprocessor(tf.constant(texts), tf.constant(pairs))
    assert token_lengths(preprocessor, texts, pairs).tolist() == pair_inputs["padding_mask"].numpy().sum(-1).tolist()

    def batches(sortish):
        ds = make_classification_dataset(preprocessor, texts, None, list(range(64)), 4, shuffle=True, seed=3,
                                         repeat=True, length_bucket=1, sortish=sortish, lengths=lengths)
        return [(inputs["token_ids"].shape[1], y.numpy().tolist()) for inputs, y in ds.take(16)]

    plain, sortish = batches(0), batches(8)
    for half in (slice(0, 8), slice(8, 16)):
        assert sorted(sum((y for _, y in sortish[half]), [])) == sorted(sum((y for _, y in plain[half]), []))
        # a window's batches are its examples in token order, four at a time
        ranked = sorted(sum((y for _, y in plain[half]), []), key=lambda i: lengths[i])
        assert sorted(max(lengths[i] for i in y) for _, y in sortish[half]) == \
            [max(lengths[i] for i in ranked[k:k + 4]) for k in range(0, 32, 4)]
    for width, y in sortish:
        assert width == max(lengths[i] for i in y)
    assert sum(w for w, _ in sortish) < 0.8 * sum(w for w, _ in plain), (sortish, plain)
    with pytest.raises(ValueError, match="lengths: 3 numbers for 64 examples"):
        make_classification_dataset(preprocessor, texts, None, list(range(64)), 4, repeat=True, sortish=8,
                                    lengths=[1, 2, 3])


def test_stlr_and_discriminative_rates_reach_the_optimizer(toy, tmp_path):
    """--schedule stlr --stlr-cut-frac --stlr-ratio and --discriminative-lr on a fine-tuning job: the optimizer's
    learning rate is ULMFiT's slanted triangular schedule over the run's steps, and each BERT depth learns at the
    head's rate / 2.6 per group below it; the options are recorded in the run. Both with --layer-decay: refused."""
    from kerasplm.models.bert.classifier_job import BertClassifierJob
    from kerasplm.training import SlantedTriangular

    job = BertClassifierJob(str(tmp_path / "stlr"), log=lambda *_: None, train=toy["train"], init=toy["init"],
                            steps=1, schedule_steps=40, batch_size=8, max_length=12, verbose=0, jit_compile=False,
                            schedule="stlr", stlr_cut_frac=0.25, stlr_ratio=8.0, discriminative_lr=2.6)
    job.run()
    optimizer = job.trainer.optimizer
    schedule = optimizer._learning_rate
    assert isinstance(schedule, SlantedTriangular) and isinstance(optimizer, LayerwiseAdamW)
    # the default peak rate of a backbone narrower than BERT-base (the toy's width 32)
    assert schedule.get_config() == {"max_learning_rate": 1e-4, "total_steps": 40, "cut_frac": 0.25, "ratio": 8.0}
    multipliers = {v.path: m for v, m in zip(job.trainer.model.trainable_variables, optimizer._lr_multipliers)}
    depth = {"embeddings": 0, "block1": 1, "block2": 2, "pooler": 3}
    for path, factor in multipliers.items():
        part = path.split("/")[1] if path.count("/") > 1 else "head"
        assert factor == pytest.approx(2.6 ** -(3 - depth.get(part, 3))), path
    assert min(multipliers.values()) == pytest.approx(2.6 ** -3)
    with open(tmp_path / "stlr" / "config.json") as f:
        stored = json.load(f)["options"]
    assert (stored["schedule"], stored["stlr_cut_frac"], stored["discriminative_lr"]) == ("stlr", 0.25, 2.6)
    with pytest.raises(ValueError, match="either discriminative_lr or layer_decay"):
        finetune_bert_classifier(str(tmp_path / "both"), train=toy["train"], init=toy["init"], steps=1,
                                 discriminative_lr=2.6, layer_decay=0.9)
