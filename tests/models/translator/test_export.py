"""Translator export: signatures vs the in-memory Translator, the shared export contract (bad-input battery,
isolation: tests/export/contract.py), serving end to end. One full export (beam sizes 1..8) per session; the
saved_model_cli test uses a cheap one (``max_beam_size=1``). The atomic-version rules (refusal, overwrite,
stale leftovers, a kill mid-export) are the export base's: tests/export/test_base.py. The CLI export is
tested on the job's run: tests/models/translator/test_job.py."""
import json
import os
import re
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
import tensorflow as tf

from kerasplm.data import read_parallel_tsv, sample_path
from kerasplm.models.translator import export_translator
from kerasplm.export import read_metadata
from kerasplm.models.translator.export import TranslatorModule
from kerasplm.generation import Seq2SeqDecoder
from kerasplm.models.transformer.model import Transformer
from kerasplm.models.translator.job import Translator
from kerasplm.runs import attach_run_info
from kerasplm.text import TranslatorPreprocessor, WordPieceTokenizer, build_wordpiece_vocab, write_vocab
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, load_export, run_isolated
from tests.models.translator.toys import EXTRA_BAD, SENTENCES, empty_like_rows_are_empty, post

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PY = sys.executable
LONG = " ".join(["palabra"] * 5000)
SIGNATURES = ["serving_default", "translate", "translate_with_attention", "metadata"]


def _strings(tensor):
    return [s.decode("utf-8") for s in tensor.numpy()]


@pytest.fixture(scope="session")
def tiny_translator(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_translator")
    src, tgt = read_parallel_tsv(sample_path("spa-eng-train.tsv"), src_col=1, tgt_col=0, max_pairs=60)
    paths = {}
    for name, texts in (("src", src + SENTENCES), ("tgt", tgt)):
        paths[name] = str(root / f"{name}_vocab.txt")
        write_vocab(build_wordpiece_vocab(texts, vocab_size=200, learn_params=dict(lower_thresh=1)), paths[name])
    src_tok, tgt_tok = WordPieceTokenizer(paths["src"]), WordPieceTokenizer(paths["tgt"])
    tf.keras.utils.set_random_seed(3)
    # 64 positions: the bad-input battery's 5,000-word input is cut to 64 tokens, so its (random-weight,
    # never-ending) decode runs 64 steps rather than the ~1,000 of the preset's 1,000 positions.
    model = Transformer.from_preset("transformer_tiny", src_tok.vocab_size, tgt_tok.vocab_size, pe_input=64,
                                    pe_target=64)
    # As a loaded run would be: trained to step 7 (the export's metadata says so).
    attach_run_info(model, str(root), {"family": "transformer_translator", "preset": "transformer_tiny"}, 7)
    translator = Translator(model, TranslatorPreprocessor(src_tok, tgt_tok, max_source_length=model.max_source_length))
    translator.vocab_paths = paths
    return translator


@pytest.fixture(scope="session")
def reference(tiny_translator):
    """In-memory translations (greedy, beam 2 and 3)."""
    return {k: tiny_translator.translate(SENTENCES, beam_size=k) for k in (1, 2, 3)}


@pytest.fixture(scope="session")
def exported(tiny_translator, tmp_path_factory):
    base = tmp_path_factory.mktemp("export") / "translator"
    return export_translator(tiny_translator, str(base))


@pytest.fixture(scope="session")
def loaded(exported):
    return load_export(exported)


@pytest.fixture(scope="session")
def small_export(tiny_translator, tmp_path_factory):
    """A cheap export (greedy + beam 1 branches only) for the CLI tools."""
    base = tmp_path_factory.mktemp("small") / "translator"
    return export_translator(tiny_translator, str(base), max_beam_size=1)


def _greedy(loaded, texts):
    return _strings(loaded.signatures["serving_default"](inputs=tf.constant(texts, tf.string,
                                                                             shape=[len(texts)]))["translation"])


def _translate(loaded, texts, beam_size=0, max_length=0):
    # One value of each option per sentence: the signature is batch-safe.
    out = loaded.signatures["translate"](inputs=tf.constant(texts, tf.string, shape=[len(texts)]),
                                         beam_size=tf.fill([len(texts)], beam_size),
                                         max_length=tf.fill([len(texts)], max_length))
    return _strings(out["translation"]), out["score"].numpy()


# ---- layout and metadata ----
def test_version_layout_and_metadata(exported, loaded, tiny_translator):
    base = os.path.dirname(exported)
    assert os.path.basename(exported) == "1"
    assert os.listdir(base) == ["1"]  # no temporary leftovers
    assert os.path.isfile(os.path.join(exported, "saved_model.pb"))
    assert len(os.listdir(os.path.join(exported, "assets"))) >= 2  # both vocabularies
    meta = read_metadata(exported)
    assert meta["family"] == "transformer_translator" and meta["preset"] == "transformer_tiny"
    assert meta["source_vocab_size"] == tiny_translator.src_tokenizer.vocab_size
    assert meta["target_vocab_size"] == tiny_translator.tgt_tokenizer.vocab_size
    assert meta["training_step"] == 7 and meta["version"] == 1 and meta["signatures"] == sorted(SIGNATURES)
    assert meta["decoding"]["beam_sizes"] == [1, 8] and meta["decoding"]["jit_compile"] is False
    assert meta["decoding"]["max_source_length"] == tiny_translator.model.config.pe_input
    assert {"kerasplm_version", "export_time", "tensorflow_version", "tensorflow_text_version"} <= set(meta)
    assert json.loads(loaded.signatures["metadata"]()["metadata"].numpy().decode()) == meta
    assert sorted(loaded.signatures) == sorted(SIGNATURES)


# ---- equality with the in-memory Translator ----
def test_greedy_equals_translator(loaded, reference):
    assert _greedy(loaded, SENTENCES) == reference[1]
    assert _translate(loaded, SENTENCES, beam_size=0)[0] == reference[1]
    assert _translate(loaded, SENTENCES, beam_size=1)[0] == reference[1]


@pytest.mark.parametrize("beam_size", [2, 3])
def test_beam_equals_translator(loaded, reference, beam_size):
    translations, scores = _translate(loaded, SENTENCES, beam_size=beam_size)
    assert translations == reference[beam_size]
    assert scores.shape == (len(SENTENCES),) and (scores < 0).all()


def test_rows_with_different_options_equal_each_row_alone(loaded, reference):
    """Batch-safe: one batch whose sentences ask for different beam sizes (as TF Serving's batching merges
    requests) answers each sentence as its own request would."""
    beams = [(1, 2, 3)[i % 3] for i in range(len(SENTENCES))]
    out = loaded.signatures["translate"](inputs=tf.constant(SENTENCES), beam_size=tf.constant(beams),
                                         max_length=tf.zeros([len(SENTENCES)], tf.int32))
    assert _strings(out["translation"]) == [reference[k][i] for i, k in enumerate(beams)]
    with pytest.raises(tf.errors.InvalidArgumentError, match="one value per sentence"):
        loaded.signatures["translate"](inputs=tf.constant(SENTENCES), beam_size=tf.constant([2]),
                                       max_length=tf.constant([0]))


def test_max_length_caps_output(loaded, tiny_translator):
    capped, _ = _translate(loaded, SENTENCES, max_length=3)
    assert capped == tiny_translator.translate(SENTENCES, max_length=3)
    out = loaded.signatures["translate_with_attention"](inputs=tf.constant(SENTENCES))
    full_lengths = out["target_length"].numpy()
    assert (full_lengths >= 1).all()


def test_options_are_validated(loaded):
    for beam_size, max_length in ((9, 0), (-1, 0), (0, -2), (0, 10 ** 6)):
        with pytest.raises(tf.errors.InvalidArgumentError, match="beam_size|max_length"):
            _translate(loaded, SENTENCES[:1], beam_size=beam_size, max_length=max_length)


# ---- bad inputs (the shared battery) ----
def test_bad_inputs_greedy(exported, reference):
    alone = check_bad_inputs(exported, "serving_default", "inputs", empty_like_rows_are_empty,
                             normal=SENTENCES[0], extra_bad=EXTRA_BAD)
    assert alone["normal"]["translation"][0].decode() == reference[1][0]
    assert isinstance(alone["long"]["translation"][0], bytes)      # the 5,000-word input is cut, not a crash


def test_bad_inputs_beam_search(exported, reference):
    # The 5,000-word rows are not compared: their ~1,000-step random-weight beam search has near-ties that
    # last-bit differences of batch-size-dependent matmul kernels can flip (greedy above compares them exactly).
    alone = check_bad_inputs(exported, "translate", "inputs", empty_like_rows_are_empty, normal=SENTENCES[1],
                             extra_inputs={"beam_size": lambda texts: [2] * len(texts),
                                           "max_length": lambda texts: [0] * len(texts)}, extra_bad=EXTRA_BAD,
                             compare_rows=set(EXTRA_BAD) | {"empty", "whitespace", "invalid_utf8"})
    assert alone["normal"]["translation"][0].decode() == reference[2][1]


def test_bad_inputs_attention(exported):
    check_bad_inputs(exported, "translate_with_attention", "inputs", empty_like_rows_are_empty,
                     normal=SENTENCES[2], extra_bad={"control": "\x00"})


def test_attention_signature(loaded, reference):
    texts = SENTENCES[:3] + [""]
    out = loaded.signatures["translate_with_attention"](inputs=tf.constant(texts))
    assert _strings(out["translation"]) == reference[1][:3] + [""]
    attention, tokens = out["attention"].numpy(), out["tokens"].numpy()
    source_tokens = out["source_tokens"].numpy()
    b, heads, t, s = attention.shape
    assert (b, heads) == (4, 4) and tokens.shape == (b, t) and source_tokens.shape == (b, s)
    for i in range(3):
        n, m = int(out["target_length"][i]), int(out["source_length"][i])
        assert all(tokens[i, :n]) and not any(tokens[i, n:])
        assert source_tokens[i, 0] == b"[START]" and source_tokens[i, m - 1] == b"[END]" and not any(source_tokens[i, m:])
        assert abs(attention[i, :, :n, :m].sum(-1) - 1).max() < 1e-4  # each row a distribution over the source
        assert attention[i, :, n:].sum() == 0 and attention[i, :, :, m:].sum() == 0
    assert int(out["target_length"][3]) == 0 and attention[3].sum() == 0


def test_the_translator_and_its_export_share_one_decoder(tiny_translator, loaded, reference):
    """Translator.translate and the signatures run the same Seq2SeqDecoder code (the same compiled search per
    options); the source limit is the model's; attention weights on request equal the signature's."""
    model = tiny_translator.model
    assert model.max_source_length == model.config.pe_input == 64
    module = TranslatorModule(tiny_translator, jit_compile=True)
    assert isinstance(module.decoder, Seq2SeqDecoder) and isinstance(tiny_translator.decoder, Seq2SeqDecoder)
    assert module.max_source_length == model.max_source_length == tiny_translator.decoder.max_source_length
    assert module.decoder.translate_fn(2) is tiny_translator.decoder.translate_fn(2)
    assert module.decoder.translate_fn() is tiny_translator.decoder.translate_fn()
    texts = SENTENCES[:3]
    records = tiny_translator.translate(texts, attention=True)
    out = loaded.signatures["translate_with_attention"](inputs=tf.constant(texts))
    assert [r["translation"] for r in records] == reference[1][:3] == _strings(out["translation"])
    for i, record in enumerate(records):
        n, m = int(out["target_length"][i]), int(out["source_length"][i])
        assert record["tokens"] == [t.decode() for t in out["tokens"].numpy()[i, :n]]
        assert record["source_tokens"] == [t.decode() for t in out["source_tokens"].numpy()[i, :m]]
        np.testing.assert_allclose(record["attention"], out["attention"].numpy()[i, :, :n, :m], atol=1e-5)


# ---- isolation: tensorflow + tensorflow_text only ----
def test_loads_without_kerasplm_and_uses_only_registered_ops(exported, reference):
    greedy, beam, metadata = run_isolated(exported, [
        ("serving_default", {"inputs": SENTENCES}),
        ("translate", {"inputs": SENTENCES, "beam_size": [2] * len(SENTENCES), "max_length": [0] * len(SENTENCES)}),
        ("metadata", {})])
    assert greedy["translation"] == reference[1]
    assert beam["translation"] == reference[2]
    assert json.loads(metadata["metadata"]) == read_metadata(exported)


def test_saved_model_cli_show_lists_signatures(exported):
    cli = os.path.join(os.path.dirname(PY), "saved_model_cli")
    proc = subprocess.run([cli, "show", "--all", "--dir", exported], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in SIGNATURES:
        assert f"signature_def['{name}']" in proc.stdout
    for name in ("inputs", "beam_size", "max_length", "translation", "score", "attention", "source_tokens"):
        assert f"['{name}']" in proc.stdout


def _readme_command(marker):
    with open(os.path.join(REPO, "export", "README.md"), encoding="utf-8") as f:
        text = f.read()
    block = re.search(rf"<!-- {marker} -->\s*```(?:bash|sh)?\n(.*?)```", text, re.S)
    assert block, f"export/README.md lacks the <!-- {marker} --> block"
    return block.group(1).replace("\\\n", " ").strip()


def test_documented_saved_model_cli_run_works(small_export, tiny_translator):
    command = _readme_command("saved-model-cli-run").replace("export/translator/1", small_export)
    env = dict(os.environ, PATH=os.path.dirname(PY) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = tiny_translator.translate(["Hace mucho frío aquí."])[0]
    assert "translation" in proc.stdout and repr(expected.encode())[1:] in proc.stdout


# ---- serving end to end ----
def test_serving_end_to_end(exported, reference):
    from kerasplm.serving import ModelServer

    server = ModelServer(os.path.dirname(exported), "translator", rest_api_port=0, grpc_port=None, quiet=True).start()
    try:
        url = f"{server.url}/v1/models/translator"
        status, body = post(url + ":predict", {"instances": SENTENCES})
        assert status == 200 and body == {"predictions": reference[1]}
        status, body = post(url + ":predict", {"inputs": SENTENCES})
        assert status == 200 and body == {"outputs": reference[1]}
        status, body = post(url + ":predict", {"signature_name": "translate",
                                                "inputs": {"inputs": SENTENCES, "beam_size": [2] * len(SENTENCES),
                                                           "max_length": [0] * len(SENTENCES)}})
        assert status == 200 and body["outputs"]["translation"] == reference[2]
        status, body = post(url + ":predict", {"signature_name": "translate", "instances": [
            {"inputs": s, "beam_size": 3, "max_length": 0} for s in SENTENCES]})
        assert status == 200 and [p["translation"] for p in body["predictions"]] == reference[3]
        status, body = post(url + ":predict", {"inputs": ["", LONG[:2000], SENTENCES[0]]})
        assert status == 200 and body["outputs"][0] == "" and body["outputs"][2] == reference[1][0]
        status, body = post(url + ":predict", {"signature_name": "translate",
                                                "inputs": {"inputs": SENTENCES, "beam_size": [99] * len(SENTENCES),
                                                           "max_length": [0] * len(SENTENCES)}})
        # INVALID_ARGUMENT is the client's error: 400, as TF Serving answers.
        assert status == 400 and "beam_size must be <= 8" in body["error"]
        with urllib.request.urlopen(url, timeout=30) as response:
            assert json.loads(response.read())["model_version_status"][0]["state"] == "AVAILABLE"
        with urllib.request.urlopen(url + "/metadata", timeout=30) as response:
            signature_def = json.loads(response.read())["metadata"]["signature_def"]["signature_def"]
        assert set(SIGNATURES) <= set(signature_def)
        # Requests run in chunks of rows; ragged outputs (tokens, attention) padded across chunks equal one call.
        from kerasplm.serving import predict

        loaded = server.model("translator").find()
        body = {"signature_name": "translate_with_attention", "inputs": ["", LONG[:300], *SENTENCES]}
        chunked = predict(loaded, body, batch_chunk_size=2)["outputs"]
        whole = predict(loaded, body, batch_chunk_size=64)["outputs"]
        assert np.shape(chunked["attention"]) == np.shape(whole["attention"])
        np.testing.assert_allclose(chunked.pop("attention"), whole.pop("attention"), atol=1e-5)
        assert chunked == whole
    finally:
        server.stop()


def test_batch_safe_with_warmup_records(exported):
    """TF Serving's batching rule holds for every signature, and the warmup records cover and replay on each."""
    check_batch_safe(exported)
    check_warmup(exported)
