"""The retriever SavedModel (`kerasplm export retriever`) of the index tests' flat index (50 generated lines
embedded by a tiny random BERT run): loaded without kerasplm or Faiss, its exact top-k equals Faiss' IndexFlatIP
on the same vectors; int8 against its numpy formula; the bad-input battery; `kerasplm serve` over REST and gRPC."""
import os

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

faiss = pytest.importorskip("faiss")

from kerasplm import serving  # noqa: E402
from kerasplm.cli import main  # noqa: E402
from kerasplm.export import read_metadata  # noqa: E402
from kerasplm.models.sentence_embedding.retriever_export import RetrieverModule, quantize_int8  # noqa: E402
from kerasplm.models.sentence_embedding.vector_index import load_index  # noqa: E402
from tests.export.contract import (call_signature, check_bad_inputs, check_batch_safe, check_warmup,  # noqa: E402
                                   run_isolated)
from tests.models.bert.qa_toy import make_init_run  # noqa: E402
from tests.models.sentence_embedding.toys import QUERIES  # noqa: E402
from tests.serving.client import predict  # noqa: E402

TOP_K = 4


@pytest.fixture(scope="module")
def setup(flat_index):
    """The index tests' flat index of 50 lines over a tiny random BERT run, exported through the CLI."""
    root = flat_index["root"]
    assert main(["export", "retriever", "--index", flat_index["flat"], "--to", str(root / "export"), "--top-k",
                 str(TOP_K)]) == 0
    return {**flat_index, "index": load_index(flat_index["flat"]), "path": str(root / "export" / "1")}


def test_exact_top_k_equals_faiss_flat_ip_without_kerasplm(setup):
    index = setup["index"]
    queries = QUERIES + [index.texts[7], "", "john"]
    retrieved, embedded, corpus = run_isolated(setup["path"], [("serving_default", {"text": queries}),
                                                               ("embed", {"text": queries}),
                                                               ("embed", {"text": index.texts})])
    query_vectors = np.array(embedded["embedding"], np.float32)
    flat = faiss.IndexFlatIP(index.manifest["dim"])
    flat.add(index.vectors())
    scores, ids = flat.search(query_vectors, TOP_K)
    assert np.array(retrieved["ids"]).shape == (len(queries), TOP_K)
    np.testing.assert_array_equal(np.array(retrieved["ids"]), ids)
    np.testing.assert_allclose(np.array(retrieved["scores"], np.float32), scores, atol=1e-5)
    assert retrieved["texts"] == [[index.texts[i] for i in row] for row in ids]
    assert retrieved["ids"][3][0] == 7 and retrieved["scores"][3][0] == pytest.approx(1.0, abs=1e-5)
    # the export embeds a text as the index did (one SentenceEmbedder graph)
    np.testing.assert_allclose(np.array(corpus["embedding"], np.float32), index.vectors(), atol=1e-5)
    meta = read_metadata(setup["path"])
    assert (meta["family"], meta["top_k"], meta["int8"], meta["count"], meta["dim"], meta["index_type"]) == \
        ("retriever", TOP_K, False, 50, 32, "flat")
    assert meta["embedder"] == index.manifest["embedder"] and meta["corpus_bytes"] == 50 * 32 * 4


def test_int8_scores_are_the_dequantized_inner_products(setup):
    """The int8 module's graph in process (the float32 export covers saving and serving)."""
    index = setup["index"]
    vectors = index.vectors()
    codes, scales = quantize_int8(vectors)
    assert codes.dtype == np.int8 and np.abs(codes).max() == 127
    np.testing.assert_allclose(codes * scales[:, None], vectors, atol=scales.max() / 2 + 1e-7)
    module = RetrieverModule(setup["encoder"], vectors, index.ids, index.texts, TOP_K, int8=True)
    assert module.corpus_matrix.dtype == tf.int8 and module.corpus_scales.shape == (50,)
    queries = tf.constant(QUERIES)
    query_vectors = setup["encoder"].encode(QUERIES).astype(np.float64)
    got = module.retrieve(queries)
    expected = query_vectors @ (codes.astype(np.float64) * scales[:, None]).T
    top = np.argsort(-expected, axis=1, kind="stable")[:, :TOP_K]
    np.testing.assert_array_equal(got["ids"].numpy(), top)
    np.testing.assert_allclose(got["scores"].numpy(), np.take_along_axis(expected, top, axis=1), atol=1e-5)
    assert got["texts"].numpy().astype(str).tolist() == [[index.texts[i] for i in row] for row in top]


def test_bad_inputs_and_serving_contract(setup):
    def check(texts, outputs):
        assert outputs["ids"].dtype == np.int64 and outputs["ids"].shape == (len(texts), TOP_K)
        assert outputs["scores"].dtype == np.float32 and np.all(np.isfinite(outputs["scores"]))
        assert np.all(np.diff(outputs["scores"], axis=1) <= 0)            # best first
        assert outputs["texts"].shape == (len(texts), TOP_K)

    check_bad_inputs(setup["path"], "serving_default", "text", output_check=check)
    assert check_batch_safe(setup["path"]) == ["embed", "serving_default"]
    check_warmup(setup["path"])


def test_served_over_rest_and_grpc(setup):
    base = os.path.dirname(setup["path"])
    server = serving.ModelServer(base, "retriever", rest_api_port=0, grpc_port=0, quiet=True)
    server.start()
    try:
        status, body = predict(f"{server.url}/v1/models/retriever", {"instances": QUERIES[:2]})
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "retriever"
        request.inputs["text"].CopyFrom(tf.make_tensor_proto(QUERIES[:2], dtype=tf.string))
        with grpc.insecure_channel(server.grpc_target) as channel:
            response = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=60)
    finally:
        server.stop()
    assert status == 200, body
    expected = call_signature(setup["path"], "serving_default", "text", QUERIES[:2])    # the loaded SavedModel
    assert [row["ids"] for row in body["predictions"]] == expected["ids"].tolist()
    assert [row["texts"] for row in body["predictions"]] == expected["texts"].astype(str).tolist()
    np.testing.assert_array_equal(tf.make_ndarray(response.outputs["ids"]), expected["ids"])
    np.testing.assert_allclose(tf.make_ndarray(response.outputs["scores"]), expected["scores"], atol=1e-6)


def test_export_errors(setup, tmp_path, capsys):
    base = ["export", "retriever", "--index", setup["index"].path, "--to", str(tmp_path / "out")]
    assert main(base + ["--top-k", "51"]) == 2
    assert "top_k must be in [1, 50] (the index's vectors), got 51" in capsys.readouterr().err
    other = make_init_run(tmp_path / "other", seed=1)
    assert main(base + ["--embedder", other]) == 2
    err = capsys.readouterr().err.strip()
    assert f"embedder {other} does not match the index" in err and "\n" not in err
    assert not (tmp_path / "out").exists()
    assert load_index(setup["index"].path).count == 50
