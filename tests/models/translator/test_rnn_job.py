"""`kerasplm train translator` with RNN presets: the translator job, data and in-graph WordPiece vocabularies, the
model class taken from the preset (gru_bahdanau_tiny, rnn_seq2seq_tiny); resume, `kerasplm translate --run`
(`kerasplm export translator --run` and the export's contract: tests/models/translator/test_rnn_export.py.)"""
import json
import math
import os

import pytest

from kerasplm import cli
from kerasplm.models.translator.job import load_translator, train_translator
from kerasplm.models.rnn_seq2seq import RNNSeq2Seq
from tests.models.translator.toys import PAIRS

FLAGS = ["--batch-size", "8", "--vocab-size", "200", "--dev-size", "2", "--peak-learning-rate", "0.02",
         "--export-to", "none", "--bleu-max-sentences", "0"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "pairs.tsv"
    path.write_text("".join(f"{en}\t{es}\n" for en, es in PAIRS * 3), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def rnn_run(tmp_path_factory, corpus):
    """A gru_bahdanau_tiny run trained by the CLI to step 40 of a 60-step schedule, then resumed to step 60."""
    out = str(tmp_path_factory.mktemp("rnn") / "run")
    argv = ["train", "translator", "--data", corpus, "--preset", "gru_bahdanau_tiny", "--out", out, *FLAGS]
    assert cli.main([*argv, "--steps", "40", "--schedule-steps", "60"]) == 0
    first = json.load(open(os.path.join(out, "metrics.json")))
    assert cli.main([*argv, "--steps", "60"]) == 0
    return out, first, json.load(open(os.path.join(out, "metrics.json")))


def test_the_preset_picks_the_rnn_model_and_training_learns(rnn_run):
    out, first, resumed = rnn_run
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["family"] == "rnn_translator" and config["preset"] == "gru_bahdanau_tiny"
    assert config["model"]["class_name"] == "RNNSeq2Seq" and config["model"]["config"]["attention"] == "additive"
    assert config["options"]["schedule"] == "budget"
    assert first["step"] == 40 and resumed["step"] == 60 and resumed["steps_this_run"] == 20
    # The untrained model's loss is about ln(V) (near-uniform predictions); 60 steps on 15 pairs get far below it.
    history = json.load(open(os.path.join(out, "history.json")))
    assert history["loss"][-1] < history["loss"][0]
    assert history["loss"][-1] < 0.6 * math.log(config["model"]["config"]["target_vocab_size"])
    translator = load_translator(out)
    assert isinstance(translator.model, RNNSeq2Seq) and translator.step == 60


def test_cli_translate(rnn_run, capsys):
    out = rnn_run[0]
    sentences = ["Estoy aquí.", "¡Hola!"]
    capsys.readouterr()
    assert cli.main(["translate", "--run", out, *sentences]) == 0
    assert capsys.readouterr().out.splitlines() == load_translator(out).translate(sentences)


def test_no_attention_preset_trains(corpus, tmp_path):
    summary = train_translator(str(tmp_path / "run"), data=corpus, preset="rnn_seq2seq_tiny", steps=3, batch_size=8,
                               vocab_size=200, dev_size=2, bleu_max_sentences=0, verbose=0, log=lambda *_: None)
    model = summary["translator"].model
    assert isinstance(model, RNNSeq2Seq) and not model.has_attention and summary["step"] == 3
    assert json.load(open(tmp_path / "run" / "config.json"))["model"]["config"]["attention"] == "none"


def test_the_seed_schedule_is_refused_for_an_rnn_in_one_line(corpus, tmp_path, capsys):
    assert cli.main(["train", "translator", "--data", corpus, "--preset", "rnn_seq2seq_tiny", "--schedule", "seed",
                     "--steps", "1", "--out", str(tmp_path / "r"), *FLAGS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert not os.path.exists(str(tmp_path / "r" / "config.json"))
    assert err == ["kerasplm: error: schedule 'seed' is the Transformer's CustomSchedule (warmup scaled by d_model); "
                   "an RNN preset trains with schedule 'budget'"]


def test_xla_is_refused_for_an_rnn_in_one_line(corpus, tmp_path):
    with pytest.raises(ValueError, match=r"^jit_compile=True: preset gru_bahdanau_tiny \(an RNN\) trains without XLA"):
        train_translator(str(tmp_path / "r"), data=corpus, preset="gru_bahdanau_tiny", steps=1, jit_compile=True,
                         log=lambda *_: None)
    assert not os.path.exists(str(tmp_path / "r" / "config.json"))


def test_mixed_bfloat16_rnn_trains_and_translates(corpus, tmp_path):
    """``--mixed-precision mixed_bfloat16`` with an RNN preset: the recurrences and matmuls in bfloat16, the
    variables and the loss in float32, the global policy restored afterwards."""
    import keras

    summary = train_translator(str(tmp_path / "run"), data=corpus, preset="gru_bahdanau_tiny", steps=3, batch_size=8,
                               vocab_size=200, dev_size=2, bleu_max_sentences=0, mixed_precision="mixed_bfloat16",
                               verbose=0, log=lambda *_: None)
    model = summary["translator"].model
    assert model.compute_dtype == "bfloat16" and {v.dtype for v in model.weights} == {"float32"}
    assert keras.mixed_precision.global_policy().name == "float32"
    history = json.load(open(tmp_path / "run" / "history.json"))
    assert summary["step"] == 3 and history["loss"] and all(math.isfinite(loss) for loss in history["loss"])
    (translation,) = summary["translator"].translate(["Estoy aquí."])
    assert isinstance(translation, str)
