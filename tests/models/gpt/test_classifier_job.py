"""`finetune gpt-classifier` on a toy sentiment task from tiny GPT runs as `train gpt` (SentencePiece) and `convert
gpt2` (GPT-2's BPE) write them: the run directory (grown vocabulary, tokenizer copied), dev metrics equal to the
loaded model's, entailment pairs from the CLI with --random-init, and the classifier export (isolated
load, bad-input battery, same answers as in process)."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from kerasplm.cli import main
from kerasplm.models.gpt.convert import BPE_ASSETS
from kerasplm.export import read_metadata
from kerasplm.export.classifier import export_classifier
from kerasplm.training.metrics import classification_metrics
from kerasplm.models.bert.classifier_job import read_classification_tsv
from kerasplm.models.gpt.classifier_job import finetune_gpt_classifier, load_gpt_classifier
from kerasplm.runs import load_run
from tests.job_harness import check_job
from tests.export.contract import call_signature, check_bad_inputs, run_isolated
from tests.models.bert.classifier_toy import NAMES
from tests.models.gpt.toys import JOB, TEXTS


@pytest.fixture(scope="module")
def learned(data):
    out = str(data["root"] / "learned")
    return out, finetune_gpt_classifier(out, steps=20, train=data["train"], dev=data["dev"], init=data["init"], **JOB)


@pytest.fixture(scope="module")
def pair_run(data):
    """Entailment-style pairs from the command line, from a GPT-2-style run (BPE) with fresh weights (--random-init)."""
    out = str(data["root"] / "pairs")
    assert main(["finetune", "gpt-classifier", "--train", data["pairs"], "--init", data["init_bpe"],
                 "--task", "entailment", "--text-col", "a", "--pair-col", "b", "--steps", "3", "--batch-size", "8", "--max-length", "32",
                 "--random-init", "--quiet", "--out", out]) == 0
    return out


def test_run_directory_and_dev_metrics(data, learned):
    out, summary = learned
    config = json.load(open(os.path.join(out, "config.json")))
    init = json.load(open(os.path.join(data["init"], "config.json")))
    vocab = init["model"]["config"]["backbone"]["config"]["vocab_size"]
    assert (config["family"], config["task"], config["assets"]) == ("gpt_classifier", "classification",
                                                                    {"spm_model": "spm.model"})
    model_config, preprocessor = config["model"]["config"], config["preprocessor"]
    assert model_config["backbone"]["config"]["vocab_size"] == vocab + 3
    assert (model_config["labels"], model_config["num_labels"], model_config["pair_input"]) == (NAMES, 2, False)
    assert (preprocessor["class_name"], preprocessor["config"]["sequence_length"]) == ("GPTClassifierPreprocessor", 32)
    assert preprocessor["config"]["special_ids"] == {"start": vocab, "delim": vocab + 1, "extract": vocab + 2}
    assert preprocessor["config"]["tokenizer"]["config"]["model"] == "spm.model"   # the run's copy, named relative
    assert config["options"]["learning_rate"] == 2e-3 and config["options"]["lm_weight"] == 0.5
    history = json.load(open(os.path.join(out, "history.json")))
    assert {"task_loss", "lm_loss", "accuracy"} <= set(history)
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["step"] == 20 and metrics["dev"] == summary["dev"] and metrics["labels"] == NAMES
    # The reported figures are exactly those of the reloaded model on the dev file.
    model = load_run(out)
    texts, _, labels = read_classification_tsv(data["dev"])
    predicted = model.predict_texts(texts).argmax(-1)
    assert metrics["dev"] == classification_metrics([NAMES.index(y) for y in labels], predicted, 2)
    assert metrics["dev"]["accuracy"] >= 0.75, metrics["dev"]


def test_pairs_from_the_cli_with_fresh_weights(data, pair_run):
    config = json.load(open(os.path.join(pair_run, "config.json")))
    assert config["model"]["config"]["task_type"] == "entailment" and config["options"]["random_init"] is True
    assert config["model"]["config"]["pair_input"] is True
    assert config["preprocessor"]["config"]["tokenizer"]["config"]["vocab_json"] == "vocab.json"
    assert config["assets"] == BPE_ASSETS
    model, pretrained = load_gpt_classifier(pair_run), load_run(data["init_bpe"])
    table = model.backbone.embeddings.embedding.embeddings.numpy()
    assert table.shape[0] == pretrained.vocab_size + 3
    assert not np.allclose(table[:-3], pretrained.backbone.embeddings.embedding.embeddings.numpy(), atol=1e-3)
    assert model.pair_input and model.predict_texts(TEXTS, TEXTS[::-1]).shape == (4, 2)


def test_an_interrupted_and_resumed_run_equals_an_uninterrupted_one(data, tmp_path):
    """A resume rebuilds the classifier, its labels and preprocessor from config.json and continues exactly."""
    pairs = dict(train=data["pairs"], init=data["init_bpe"], task="entailment", text_col="a", pair_col="b",
                 random_init=True, batch_size=8, max_length=32, verbose=0, log=lambda *_: None)
    # The shared job road (tests/job_harness.py): 4 steps straight; 2 of a 4-step schedule, resumed to 4.
    check = check_job(lambda out, steps: finetune_gpt_classifier(out, steps=steps, schedule_steps=4, **pairs),
                      tmp_path, steps=4, split_at=2, family="gpt_classifier")
    straight, resumed = check.summary["classifier"], check.resumed_summary["classifier"]
    assert json.load(open(os.path.join(check.resumed_run, "history.json")))["step"][-1] == 4
    for a, b in zip(straight.weights, resumed.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=a.path)
    loaded = load_gpt_classifier(check.resumed_run)
    assert (loaded.labels, loaded.pair_input, loaded.run_info.step) == (["0", "1"], True, 4)


def test_similarity_trains_on_sortish_batches_of_both_orders(data, tmp_path):
    """GPT-1's similarity input is ``[B, 2, L]`` (both orders of a pair): token_lengths counts both sequences, the
    positions the model runs, and a new similarity run trains on sortish batches sorted by that count."""
    from kerasplm.jobs.finetuning import token_lengths
    from kerasplm.models.gpt.preprocessor import GPTClassifierPreprocessor, special_token_ids

    tokenizer = load_run(data["init"]).preprocessor
    ids = special_token_ids(300)
    similarity = GPTClassifierPreprocessor(tokenizer, ids, 16, "similarity")
    entailment = GPTClassifierPreprocessor(tokenizer, ids, 16, "entailment")
    a = ["good great", "awful bad plot sad", "", "nice"]
    b = ["sad", "the movie was good great nice", "bad", ""]
    both = token_lengths(entailment, a, b) + token_lengths(entailment, b, a)
    assert token_lengths(similarity, a, b, chunk=3).tolist() == both.tolist()
    assert both.tolist() == similarity(tf.constant(a), tf.constant(b))["padding_mask"].numpy().sum((1, 2)).tolist()
    out = str(tmp_path / "similarity")
    finetune_gpt_classifier(out, steps=2, train=data["pairs"], init=data["init"], task="similarity", text_col="a",
                            pair_col="b", **{**JOB, "batch_size": 4})
    assert json.load(open(os.path.join(out, "config.json")))["options"]["sortish"] == 50
    assert json.load(open(os.path.join(out, "history.json")))["step"][-1] == 2


def test_errors(data, tmp_path):
    with pytest.raises(ValueError, match="give the GPT run to start from"):
        finetune_gpt_classifier(str(tmp_path / "a"), steps=1, train=data["train"], **JOB)
    with pytest.raises(ValueError, match="task entailment needs sentence pairs"):
        finetune_gpt_classifier(str(tmp_path / "b"), steps=1, train=data["train"], init=data["init"], task="entailment")
    with pytest.raises(ValueError, match="max_length=65 exceeds the model.s 64 positions"):
        finetune_gpt_classifier(str(tmp_path / "c"), steps=1, train=data["train"], init=data["init"], max_length=65)
    with pytest.raises(ValueError, match="is a 'gpt' run, not a classifier"):
        export_classifier(data["init"], str(tmp_path / "export"))


def test_the_cli_offers_no_pooling_for_gpt_1s_extract_token_head(data, tmp_path, capsys):
    from kerasplm.models.gpt.manifest import GPTClassifierOptions

    assert "pooling" not in GPTClassifierOptions.specs() and "layer_decay" in GPTClassifierOptions.specs()
    with pytest.raises(SystemExit) as stopped:
        main(["finetune", "gpt-classifier", "--train", data["train"], "--init", data["init"], "--pooling", "mean",
              "--out", str(tmp_path / "run")])
    assert stopped.value.code == 2 and "unrecognized arguments: --pooling mean" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "run")


def test_export_answers_as_in_process(learned, pair_run, tmp_path, capsys):
    single = load_gpt_classifier(learned[0])
    assert main(["export", "classifier", "--run", learned[0], "--to", str(tmp_path / "single")]) == 0
    path = capsys.readouterr().out.strip().splitlines()[-1]
    meta = read_metadata(path)
    assert (meta["family"], meta["labels"], meta["pair_input"]) == ("gpt_classifier", NAMES, False)
    expected = single.predict_texts(TEXTS)
    examples = [tf.train.Example(features=tf.train.Features(feature={"text": tf.train.Feature(
        bytes_list=tf.train.BytesList(value=[t.encode()]))})).SerializeToString() for t in TEXTS]
    outputs, classified = run_isolated(path, [("serving_default", {"text": TEXTS}), ("classify", {"inputs": examples})])
    np.testing.assert_allclose(np.array(outputs["probabilities"]), expected, atol=1e-5)
    assert outputs["label"] == [NAMES[i] for i in expected.argmax(-1)]
    np.testing.assert_allclose(classified["scores"], outputs["probabilities"], atol=1e-6)   # TF Serving's Classify
    assert classified["classes"] == [NAMES] * len(TEXTS)
    # The BPE pair model, in process (the isolated load above covers the contract).
    pair_path = export_classifier(pair_run, str(tmp_path / "pair"))
    pair_outputs = call_signature(pair_path, "serving_default", "text", TEXTS, {"text_pair": TEXTS[::-1]})
    expected_pairs = load_gpt_classifier(pair_run).predict_texts(TEXTS, TEXTS[::-1])
    np.testing.assert_allclose(pair_outputs["probabilities"], expected_pairs, atol=1e-5)

    def check(texts, outputs):
        assert outputs["probabilities"].shape == (len(texts), 2)
        np.testing.assert_allclose(outputs["probabilities"].sum(-1), 1.0, atol=1e-5)

    check_bad_inputs(path, "serving_default", "text", output_check=check)
