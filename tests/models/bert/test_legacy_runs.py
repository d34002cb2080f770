"""`kerasplm convert run` on BERT runs of run format 2: each run family's run (made by its job, a few steps) with its
config.json rewritten as the format-2 code wrote it is refused by load_run in one line, converted, and the converted
run gives the original's outputs (its checkpoint restores into the model the old config describes)."""
import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from kerasplm.cli import main
from kerasplm.models.bert.classifier_job import finetune_bert_classifier
from kerasplm.models.bert.pretraining_job import train_bert
from kerasplm.models.bert.question_answering_job import BertQA, finetune_bert_qa
from kerasplm.models.sentence_embedding.simcse_job import finetune_bert_simcse
from kerasplm.models.bert.tagger_job import finetune_bert_tagger
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.tagger import INPUT_KEYS
from kerasplm.runs import RunDirError, load_run
from tests.models.bert.qa_toy import make_init_run, write_squad
from tests.models.bert.classifier_toy import toy_examples
from tests.models.bert.tagger_toy import SENTENCES, write_conll

TEXTS = ["the movie was good !", "awful bad plot", ""]
WORDS = [["Johanson", "lives", "in", "New", "York", "."], ["in", "new", "york"]]
QUESTIONS = ["Where does John live?", "Who works in Rome?"]
CONTEXTS = ["John lives in Paris.", "Anna sleeps in the city of New York, and John works in Rome."]
QUICK = dict(steps=2, schedule_steps=4, verbose=0, jit_compile=False, log=lambda *_: None)
JOBS = {"bert_pretraining": train_bert, "bert_classifier": finetune_bert_classifier,
        "bert_tagger": finetune_bert_tagger, "bert_simcse": finetune_bert_simcse, "bert_qa": finetune_bert_qa}


def make_run(family, root, toy, corpus, init_run):
    """A run of ``family`` written by its job (converted: ``bert``; pretrained: ``bert_pretraining``)."""
    out = str(root / family)
    if family == "bert":
        return make_init_run(root / "bert")
    if family == "bert_pretraining":
        train_bert(out, corpus=corpus[0], vocab=corpus[1], preset="bert_tiny", max_seq_length=24,
                   max_predictions_per_seq=4, batch_size=4, dev_documents=2, **QUICK)
    elif family == "bert_classifier":   # sentence pairs, mean pooling: pair_input and pooling come back
        finetune_bert_classifier(out, train=toy["pair_train"], init=toy["init"], text_col="a", pair_col="b",
                                 batch_size=8, max_length=16, pooling="mean", **QUICK)
    elif family == "bert_tagger":
        train = write_conll(root / "train.conll", SENTENCES * 4)
        finetune_bert_tagger(out, train=train, init=init_run[0], crf=True, batch_size=4, sequence_length=16, **QUICK)
    elif family == "bert_simcse":
        (root / "sentences.txt").write_text("\n".join(text for text, _ in toy_examples(32, 5)) + "\n")
        finetune_bert_simcse(out, train=str(root / "sentences.txt"), init=toy["init"], batch_size=8, max_length=12,
                             pooling="cls", **QUICK)
    elif family == "bert_qa":
        train = write_squad(root / "squad.json")
        finetune_bert_qa(out, train=train, init=make_init_run(root / "qa_init"), batch_size=3, sequence_length=24,
                         doc_stride=4, max_query_length=8, **QUICK)
    return out


def format_2_config(config, model):
    """config.json as the format-2 code wrote it for this run (its family-specific ``model`` section)."""
    family, options = config["family"], dict(config["options"])
    backbone = model.backbone if hasattr(model, "backbone") else model
    section = {"backbone": dataclasses.asdict(backbone.config)}
    lower_case = model.preprocessor.tokenizer.lower_case
    if family == "bert":
        section = section["backbone"]
    elif family == "bert_classifier":
        section.update(num_labels=model.num_labels, labels=list(model.labels), dropout=model.dropout_rate,
                       pooling=model.pooling)
        options["lower_case"] = lower_case
    elif family == "bert_tagger":
        section.update(labels=list(model.labels), lower_case=lower_case)
    elif family == "bert_simcse":
        section.update(pooling=model.pooling, mlp=model.use_mlp, temperature=model.temperature)
        options["lower_case"] = lower_case
    elif family == "bert_qa":
        section.update(lower_case=lower_case)
    return {"format_version": 2, "family": family, "task": config["task"], "preset": config["preset"],
            "model": section, "options": options, "assets": config["assets"],
            "kerasplm_version": config["kerasplm_version"]}


def outputs(model):
    """The numbers a loaded run gives (through its preprocessor) on fixed inputs."""
    family = model.run_info.config["family"]
    p = model.preprocessor
    if family == "bert_tagger":
        inputs = p(tf.ragged.constant(WORDS))
        return model({k: inputs[k] for k in INPUT_KEYS}).numpy()
    if family == "bert_qa":
        answers = BertQA(model).answer(QUESTIONS, CONTEXTS)
        return np.stack([answers["start"], answers["end"], answers["score"]])
    if family == "bert_classifier":
        return model.predict_texts(TEXTS, pairs=TEXTS[::-1])
    inputs = p(tf.constant(TEXTS))
    if isinstance(model, BertBackbone):
        return model(inputs)["sequence_output"].numpy()
    if model.run_info.config["task"] == "pretraining":
        inputs = {**inputs, "masked_positions": tf.constant([[1, 2]] * len(TEXTS))}
        return model(inputs)["mlm_logits"].numpy()
    return model(inputs).numpy()   # SimCSE: the sentence embeddings


def without_names(config):
    """A Keras config without its (session-unique) layer names."""
    if isinstance(config, dict):
        return {k: without_names(v) for k, v in config.items() if k != "name"}
    return [without_names(v) for v in config] if isinstance(config, list) else config


@pytest.mark.parametrize("family", ["bert", "bert_pretraining", "bert_classifier", "bert_tagger", "bert_simcse",
                                    "bert_qa"])
def test_a_format_2_run_is_refused_then_converted_to_the_same_outputs(family, tmp_path, toy, corpus,
                                                                     init_run, capsys):
    original = make_run(family, tmp_path, toy, corpus, init_run)
    model = load_run(original)
    expected = outputs(model)
    old = str(tmp_path / "old")
    shutil.copytree(original, old)
    with open(os.path.join(old, "config.json"), "w", encoding="utf-8") as f:
        json.dump(format_2_config(model.run_info.config, model), f, indent=2)
    with pytest.raises(RunDirError) as refused:
        load_run(old)
    message = str(refused.value)
    assert "\n" not in message and "a run of format 2" in message and f"kerasplm convert run --from {old}" in message
    new = str(tmp_path / "new")
    assert main(["convert", "run", "--from", old, "--out", new]) == 0
    assert capsys.readouterr().out.strip() == new
    converted = load_run(new)
    assert type(converted) is type(model) and converted.run_info.step == model.run_info.step
    assert without_names(converted.get_config()) == without_names(model.get_config())   # labels, pooling, crf ...
    np.testing.assert_allclose(outputs(converted), expected, rtol=1e-5, atol=1e-6)
    config = json.loads(open(os.path.join(new, "config.json"), encoding="utf-8").read())
    assert config["format_version"] == 3 and config["preprocessor"] == model.run_info.config["preprocessor"]
    if family in JOBS:   # the converted run resumes: its checkpoint matches the model the job rebuilds, object for object
        assert JOBS[family](new, steps=3, verbose=0, log=lambda *_: None)["step"] == 3
