"""ELMo export: the SavedModel equals the in-memory biLM, passes the shared contract (isolated load without
kerasplm, bad-input battery plus one very long token), and `kerasplm export elmo` writes it from a run."""
import re

import keras
import numpy as np
import pytest

from kerasplm.cli import main
from kerasplm.models.elmo.convert import convert_elmo_to_run
from kerasplm.export import read_metadata
from kerasplm.models.elmo.export import export_elmo
from kerasplm.models.elmo.model import ElmoBiLM, ElmoEmbedder
from kerasplm.models.elmo.runs import Elmo
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, run_isolated
from tests.models.elmo.toys import bilm_tf_arrays, write_files

SENTENCES = ["the play was good", "a dog", "naïve"]


@pytest.fixture(scope="module")
def elmo():
    keras.utils.set_random_seed(5)
    return Elmo(ElmoBiLM.from_preset("elmo_tiny", dropout=0.0), ["<S>", "</S>", "<UNK>"])


@pytest.fixture(scope="module")
def exported(elmo, tmp_path_factory):
    embedder = ElmoEmbedder(elmo.bilm)
    embedder.build()
    embedder.mixes[0].scalars.assign([0.5, -1.0, 2.0])
    embedder.mixes[0].gamma.assign(0.7)
    return export_elmo(elmo, str(tmp_path_factory.mktemp("export") / "elmo"), embedder=embedder)


def test_saved_model_equals_the_biLM_without_kerasplm(elmo, exported):
    (out,) = run_isolated(exported, [("serving_default", {"sentences": SENTENCES})])
    ref = elmo.embed(SENTENCES)
    assert out["tokens"][1] == ["a", "dog", "", ""] and out["mask"][2] == [True, False, False, False]
    layers = np.stack([np.asarray(out[f"layer_{j}"]) for j in range(3)], axis=1)
    np.testing.assert_allclose(layers, ref["elmo_layers"], atol=1e-5)
    s = np.exp([0.5, -1.0, 2.0]) / np.exp([0.5, -1.0, 2.0]).sum()
    np.testing.assert_allclose(out["elmo"], 0.7 * np.einsum("j,bjtd->btd", s, ref["elmo_layers"]), atol=1e-5)
    meta = read_metadata(exported)
    assert meta["family"] == "elmo" and meta["dim"] == 32 and meta["num_layers"] == 3
    assert meta["preset"] == "elmo_tiny" and meta["vocab_size"] == 3
    np.testing.assert_allclose(meta["mix_weights"], s, rtol=1e-5)


def test_bad_inputs(exported):
    def output_check(texts, outputs):
        for row, text in enumerate(texts):
            words = text.split() if isinstance(text, str) else text.split()
            n = len(words)
            assert outputs["mask"][row].sum() == n
            assert outputs["elmo"].shape[-1] == 32 and np.isfinite(outputs["elmo"]).all()
            assert (outputs["elmo"][row, n:] == 0).all()

    alone = check_bad_inputs(exported, "serving_default", "sentences", output_check=output_check,
                             extra_bad={"long_token": "x" * 20000, "at_the_cap": " ".join(["w"] * 256)},
                             refused={"long": "sentence 0 has 5000 tokens; this export accepts at most 256 per "
                                              "sentence (kerasplm export elmo --max-tokens)"})
    assert alone["at_the_cap"]["mask"].sum() == 256
    assert alone["empty"]["elmo"].shape == (1, 0, 32)
    assert alone["long_token"]["tokens"][0, 0] == b"x" * 20000


def test_cli_exports_a_converted_run(tmp_path, capsys):
    run = convert_elmo_to_run(*write_files(tmp_path, bilm_tf_arrays()), tmp_path / "run")
    assert main(["export", "elmo", "--run", run.path, "--to", str(tmp_path / "export")]) == 0
    meta = read_metadata(tmp_path / "export" / "1")
    assert meta["preset"] == "custom" and (meta["max_tokens"], meta["max_batch_tokens"]) == (256, 16384)
    assert main(["export", "elmo", "--run", run.path, "--to", str(tmp_path / "export"), "--version", "1"]) == 2
    assert main(["export", "elmo", "--run", run.path, "--to", str(tmp_path / "export"), "--max-tokens", "9",
                 "--max-batch-tokens", "8"]) == 2
    assert "--max-tokens (9) is more than --max-batch-tokens (8)" in capsys.readouterr().err


def test_caps_on_a_calls_work(tmp_path, elmo):
    """max_tokens caps a sentence, max_batch_tokens the rows x longest sentence of one call: each refusal is one
    line naming its flag; at the caps the call is answered."""
    import tensorflow as tf

    fn = tf.saved_model.load(export_elmo(elmo, str(tmp_path / "capped"), max_tokens=3, max_batch_tokens=6)
                             ).signatures["serving_default"]
    assert fn(sentences=tf.constant(["a b c", "d e f"]))["mask"].numpy().sum() == 6
    for sentences, message in (
            (["a b c d"], "sentence 0 has 4 tokens; this export accepts at most 3 per sentence "
                          "(kerasplm export elmo --max-tokens)"),
            (["a", "b c", "d", "e f g"], "4 sentences padded to the longest (3 tokens) make 12 tokens; this export accepts at most 6 per "
             "call (kerasplm export elmo --max-batch-tokens)")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
            fn(sentences=tf.constant(sentences))
    with pytest.raises(ValueError, match="max_tokens <= max_batch_tokens"):
        export_elmo(elmo, str(tmp_path / "bad"), max_tokens=7, max_batch_tokens=6)


def test_kerasplm_serve_answers_predict(exported, elmo):
    """`kerasplm serve`'s predict path (row format, one row per chunk) returns the biLM's vectors."""
    import os

    from kerasplm.serving.api import predict
    from kerasplm.serving.models import load_version

    loaded = load_version(os.path.dirname(exported), int(os.path.basename(exported)))
    reply = predict(loaded, {"instances": [{"sentences": s} for s in SENTENCES]}, batch_chunk_size=1)
    rows = reply["predictions"]
    assert rows[1]["tokens"] == ["a", "dog", "", ""] and rows[2]["mask"] == [True, False, False, False]
    ref = elmo.embed(SENTENCES)["elmo_layers"]
    np.testing.assert_allclose(np.array([r["layer_2"] for r in rows]), ref[:, 2], atol=1e-5)


def test_batch_safe_with_warmup_records(exported):
    """TF Serving's batching rule holds for every signature, and the warmup records cover and replay on each."""
    check_batch_safe(exported)
    check_warmup(exported)
