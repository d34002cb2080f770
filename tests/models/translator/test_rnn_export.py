"""The RNN translator's export (`kerasplm export translator --run` of a gru_bahdanau_tiny run, random weights, built
once for the module): signatures equal the in-process translator, `translate_with_attention` gives the Bahdanau
weights [batch, 1, T, S], the SavedModel loads without kerasplm, the translator's bad-input battery, batch safety and
warmup records (tests/export/contract.py), one `kerasplm serve` (in process). The no-attention preset's module has
no `translate_with_attention`."""
import json
import os
import urllib.request

import numpy as np
import pytest
import tensorflow as tf

from kerasplm import cli
from kerasplm.export import read_metadata
from kerasplm.models.translator.job import load_translator
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, load_export, run_isolated
from tests.export.tiny_exports import write_tiny_rnn_translator_run
from tests.models.translator.toys import EXTRA_BAD, SENTENCES, empty_like_rows_are_empty, post

SIGNATURES = ["metadata", "serving_default", "translate", "translate_with_attention"]


def _strings(tensor):
    return [s.decode("utf-8") for s in tensor.numpy()]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return write_tiny_rnn_translator_run(tmp_path_factory.mktemp("rnn") / "run", sentences=SENTENCES)


@pytest.fixture(scope="module")
def translator(run):
    return load_translator(run)


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    base = str(tmp_path_factory.mktemp("export") / "translator")
    assert cli.main(["export", "translator", "--run", run, "--to", base, "--max-beam-size", "2"]) == 0
    return os.path.join(base, "1")


@pytest.fixture(scope="module")
def loaded(exported):
    return load_export(exported)


@pytest.fixture(scope="module")
def reference(translator):
    return {k: translator.translate(SENTENCES, beam_size=k) for k in (1, 2)}


def test_signatures_equal_the_translator(exported, loaded, reference, translator):
    meta = read_metadata(exported)
    assert meta["preset"] == "gru_bahdanau_tiny" and meta["training_step"] == 7
    assert meta["model"]["attention"] == "additive" and meta["decoding"]["max_source_length"] == 16
    assert sorted(loaded.signatures) == SIGNATURES
    texts = tf.constant(SENTENCES)
    assert _strings(loaded.signatures["serving_default"](inputs=texts)["translation"]) == reference[1]
    beam = loaded.signatures["translate"](inputs=texts, beam_size=tf.fill([len(SENTENCES)], 2),
                                          max_length=tf.zeros([len(SENTENCES)], tf.int32))
    assert _strings(beam["translation"]) == reference[2]
    # The attention signature: one head, the Bahdanau weights, equal to the in-process translator's.
    out = loaded.signatures["translate_with_attention"](inputs=tf.constant(SENTENCES[:3] + [""]))
    attention = out["attention"].numpy()
    assert attention.shape[:2] == (4, 1) and int(out["target_length"][3]) == 0 and attention[3].sum() == 0
    for i, record in enumerate(translator.translate(SENTENCES[:3], attention=True)):
        n, m = int(out["target_length"][i]), int(out["source_length"][i])
        np.testing.assert_allclose(record["attention"], attention[i, :, :n, :m], atol=1e-5)
        np.testing.assert_allclose(attention[i, 0, :n, :m].sum(-1), 1.0, atol=1e-5)
        assert attention[i, :, n:].sum() == 0 and attention[i, :, :, m:].sum() == 0


def test_loads_without_kerasplm(exported, reference):
    greedy, beam = run_isolated(exported, [
        ("serving_default", {"inputs": SENTENCES}),
        ("translate", {"inputs": SENTENCES, "beam_size": [2] * len(SENTENCES), "max_length": [0] * len(SENTENCES)})])
    assert greedy["translation"] == reference[1] and beam["translation"] == reference[2]


def test_bad_inputs_like_the_translator(exported, reference):
    alone = check_bad_inputs(exported, "serving_default", "inputs", empty_like_rows_are_empty,
                             normal=SENTENCES[0], extra_bad=EXTRA_BAD)
    assert alone["normal"]["translation"][0].decode() == reference[1][0]
    assert isinstance(alone["long"]["translation"][0], bytes)      # the 5,000-word input is cut, not a crash
    check_bad_inputs(exported, "translate_with_attention", "inputs", empty_like_rows_are_empty,
                     normal=SENTENCES[2], extra_bad={"control": "\x00"})


def test_batch_safe_with_warmup_records(exported):
    check_batch_safe(exported)
    check_warmup(exported)


def test_serving(exported, reference):
    from kerasplm.serving import ModelServer

    server = ModelServer(os.path.dirname(exported), "rnn", rest_api_port=0, grpc_port=None, quiet=True).start()
    try:
        url = f"{server.url}/v1/models/rnn"
        status, body = post(url + ":predict", {"instances": SENTENCES})
        assert status == 200 and body == {"predictions": reference[1]}
        status, body = post(url + ":predict", {"signature_name": "translate", "instances": [
            {"inputs": s, "beam_size": 2, "max_length": 0} for s in SENTENCES]})
        assert status == 200 and [p["translation"] for p in body["predictions"]] == reference[2]
        status, body = post(url + ":predict", {"inputs": ["", " \t ", SENTENCES[0]]})
        assert status == 200 and body["outputs"] == ["", "", reference[1][0]]
        with urllib.request.urlopen(url + "/metadata", timeout=30) as response:
            signature_def = json.loads(response.read())["metadata"]["signature_def"]["signature_def"]
        assert set(SIGNATURES) <= set(signature_def)
    finally:
        server.stop()


def test_no_attention_run_has_no_attention_signature(tmp_path):
    from kerasplm.models.translator.export import TranslatorModule

    run = write_tiny_rnn_translator_run(tmp_path / "run", preset="rnn_seq2seq_tiny")
    module = TranslatorModule(load_translator(run))
    assert sorted(module.signatures()) == ["serving_default", "translate"] and module.translate_with_attention is None
