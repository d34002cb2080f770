"""finetune_bert_tagger on hand-made CoNLL files from a tiny hand-made BERT run: trains, scores dev, resumes."""
import json

import numpy as np
import pytest

from kerasplm.cli import main
from kerasplm.models.bert.tagger import BertTokenClassifier
from kerasplm.models.bert.tagger_job import BertTagger, finetune_bert_tagger, load_bert_tagger
from kerasplm.runs import load_run
from tests.job_harness import check_job
from tests.models.bert.tagger_toy import SENTENCES, write_conll


def test_finetune_scores_dev_resumes_and_loads(tmp_path, init_run, capsys):
    train = write_conll(tmp_path / "train.conll", SENTENCES * 4)
    dev = write_conll(tmp_path / "dev.conll", SENTENCES)
    out = str(tmp_path / "run")
    summary = finetune_bert_tagger(out, train=train, dev=dev, init=init_run[0], steps=25, schedule_steps=30,
                                   batch_size=4, learning_rate=3e-3, sequence_length=16, verbose=0, jit_compile=False)
    tagger = summary["tagger"]
    assert summary["step"] == 25 and tagger.labels == ["O", "B-LOC", "I-LOC", "B-PER"]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    # 25 steps of a large learning rate on 3 repeated sentences: dev (= train) entities are learned
    assert metrics["dev_entity_f1"] == summary["dev_entity_f1"] >= 80.0
    assert set(metrics["dev_per_type_f1"]) == {"LOC", "PER"}
    spans = tagger.tag(["Johanson lives in New York."])
    assert b"New York" in spans["entity_text"][0].numpy().tolist()
    # resume through the CLI: same RUN options, to step 30 where the recorded schedule ends; the init run is not
    # needed any more
    assert main(["finetune", "bert-tagger", "--out", out, "--train", train, "--dev", dev, "--steps", "30",
                 "--quiet", "--no-jit"]) == 0
    assert "dev entity F1" in capsys.readouterr().out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["step"] == 30 and metrics["steps_this_run"] == 5
    loaded = load_bert_tagger(out)
    assert isinstance(loaded, BertTagger) and loaded.labels == tagger.labels
    model = load_run(out)    # the labels are the model's config; its preprocessor is attached
    assert isinstance(model, BertTokenClassifier) and model.labels == tagger.labels
    assert model.preprocessor.sequence_length == 16
    np.testing.assert_array_equal(loaded.tag(["Johanson lives in New York."])["start"].to_list(),
                                  tagger.tag(["Johanson lives in New York."])["start"].to_list())
    with pytest.raises(ValueError, match="--init"):
        finetune_bert_tagger(str(tmp_path / "other"), train=train, steps=1)


def test_crf_tagger_trains_a_few_steps_and_loads(tmp_path, init_run):
    """The shared job road (tests/job_harness.py) through the CLI: 3 steps straight, and 1 step resumed to 3
    (the CRF's transitions come back from the checkpoint)."""
    train = write_conll(tmp_path / "train.conll", SENTENCES * 4)

    def cli(out, steps):
        assert main(["finetune", "bert-tagger", "--out", out, "--train", train, "--init", init_run[0], "--crf",
                     "--steps", str(steps), "--schedule-steps", "3", "--batch-size", "4", "--sequence-length", "16",
                     "--quiet", "--no-jit"]) == 0

    out = check_job(cli, tmp_path, steps=3, split_at=1, family="bert_tagger").run
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert history["step"][-1] == 3 and all(loss > 0 for loss in history["loss"])       # an NLL: positive
    assert json.loads((tmp_path / "run" / "config.json").read_text())["options"]["crf"] is True
    loaded = load_bert_tagger(out)      # the CRF's weights come back from the checkpoint (export: test_tagger_export)
    assert loaded.model.crf is not None and np.abs(loaded.model.crf.transitions.numpy()).sum() > 0
