"""`kerasplm index build|add` and `kerasplm search` on a tiny random BERT run and a generated corpus of 50 lines:
the vectors against a numpy formula, hits against a numpy ranking, ids continued by `add`, IVF and IVFPQ, a
mismatched embedder refused, bad corpora named by file and line."""
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

faiss = pytest.importorskip("faiss")

from kerasplm.cli import main  # noqa: E402
from kerasplm.models.sentence_embedding.embedder import weights_sha256  # noqa: E402
from kerasplm.models.sentence_embedding.vector_index import format_hits, load_index, search_index  # noqa: E402
from kerasplm.models.sentence_embedding.whitening import fit_whitening  # noqa: E402
from kerasplm.text import BertPreprocessor  # noqa: E402
from tests.models.bert.qa_toy import make_init_run  # noqa: E402
from tests.models.sentence_embedding.toys import QUERIES, SEQUENCE_LENGTH  # noqa: E402


def numpy_pooled(flat_index, texts):
    """Mean pooling of the run's final states (the eager backbone) over the real tokens, in numpy (float64)."""
    backbone, tokenizer, _ = flat_index["parts"]
    inputs = BertPreprocessor(tokenizer, SEQUENCE_LENGTH)(tf.constant(texts))
    states = backbone(inputs, training=False)["sequence_output"].numpy().astype(np.float64)
    mask = inputs["padding_mask"].numpy().astype(np.float64)[:, :, None]
    return (states * mask).sum(axis=1) / mask.sum(axis=1)


def numpy_vectors(flat_index, texts):
    """:func:`numpy_pooled`, L2-normalized: the cosine vectors."""
    pooled = numpy_pooled(flat_index, texts)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def search_json(capsys, index, queries, *flags):
    capsys.readouterr()
    assert main(["search", "--index", index, "--json", *flags, *queries]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_build_records_the_embedder_and_stores_the_formula_vectors(flat_index):
    index = load_index(flat_index["flat"])
    backbone = flat_index["parts"][0]
    manifest = index.manifest
    assert (manifest["type"], manifest["dim"], manifest["count"], manifest["metric"]) == \
        ("flat", 32, 50, "inner_product")
    assert manifest["embedder"] == {"run": os.path.abspath(flat_index["run"]),
                                    "weights_sha256": weights_sha256(backbone), "pooling": "mean",
                                    "sequence_length": SEQUENCE_LENGTH, "whitening": None}
    assert index.texts == flat_index["lines"][:50] and index.ids.tolist() == list(range(50))
    np.testing.assert_allclose(index.vectors(), numpy_vectors(flat_index, index.texts), atol=1e-5)
    assert sorted(os.listdir(flat_index["flat"])) == ["ids.npy", "index.faiss", "manifest.json", "texts.jsonl"]


def test_search_ranks_by_cosine(flat_index, capsys):
    vectors, queries = numpy_vectors(flat_index, flat_index["lines"][:50]), numpy_vectors(flat_index, QUERIES)
    results = search_json(capsys, flat_index["flat"], QUERIES, "--top-k", "4")
    assert len(results) == 3
    for hits, query in zip(results, queries):
        cosine = vectors @ query
        expected = np.argsort(-cosine, kind="stable")[:4]
        assert [h["id"] for h in hits] == expected.tolist()
        np.testing.assert_allclose([h["score"] for h in hits], cosine[expected], atol=1e-5)
        assert [h["text"] for h in hits] == [flat_index["lines"][i] for i in expected]
    assert all(set(hit) == {"id", "score", "text"} for hits in results for hit in hits)
    # one query: one list of hits (the in-process search: same hits)
    (alone,) = search_index(flat_index["flat"], QUERIES[:1], top_k=4, encoder=flat_index["encoder"])
    assert [h["id"] for h in alone] == [h["id"] for h in results[0]]
    # text output: the query, then rank, id, score and text per hit
    lines = format_hits(QUERIES[:1], [alone[:2]]).splitlines()
    assert lines[0] == f"query: {QUERIES[0]}" and len(lines) == 3
    for rank, (line, hit) in enumerate(zip(lines[1:], alone), start=1):
        assert line.split(None, 3) == [str(rank), str(hit["id"]), f"{hit['score']:.4f}", hit["text"]]


def test_add_continues_the_ids_and_refuses_another_embedder(flat_index, capsys):
    index_dir = str(flat_index["root"] / "grown")
    shutil.copytree(flat_index["flat"], index_dir)
    assert main(["index", "add", "--index", index_dir, "--corpus", flat_index["more"]]) == 0
    index = load_index(index_dir)
    assert index.count == 60 and index.ids.tolist() == list(range(60)) and index.texts == flat_index["lines"]
    assert [c["first_id"] for c in index.manifest["corpora"]] == [0, 50]
    np.testing.assert_allclose(index.vectors(), numpy_vectors(flat_index, flat_index["lines"]), atol=1e-5)
    ((hit,),) = search_index(index, [flat_index["lines"][55]], top_k=1, encoder=flat_index["encoder"])
    assert hit["id"] == 55 and hit["score"] == pytest.approx(1.0, abs=1e-5)
    # the same architecture with other weights: refused, the index left as it was
    other = make_init_run(flat_index["root"] / "other", seed=1)
    capsys.readouterr()
    assert main(["index", "add", "--index", index_dir, "--corpus", flat_index["more"], "--embedder", other]) == 2
    err = capsys.readouterr().err.strip()
    assert f"embedder {other} does not match the index {index_dir}" in err and "\n" not in err, err
    assert load_index(index_dir).count == 60


def test_ivfpq(flat_index):
    out, flat = str(flat_index["root"] / "pq"), load_index(flat_index["flat"])
    assert main(["index", "build", "--embedder", flat_index["run"], "--corpus", flat_index["corpus"],
                 "--sequence-length", str(SEQUENCE_LENGTH), "--out", out, "--type", "ivfpq", "--nlist", "4",
                 "--m", "4", "--nbits", "4"]) == 0
    pq = load_index(out)
    assert pq.manifest["params"] == {"nlist": 4, "m": 4, "nbits": 4, "nprobe": 4, "seed": 0}
    # the codes are lossy: the exact vectors are stored beside them
    np.testing.assert_array_equal(pq.vectors(), flat.vectors())
    assert "vectors.npy" in os.listdir(out)
    # approximate scores (of the decoded codes), close to the exact cosines
    encoder, vectors = flat_index["encoder"], flat.vectors()
    for query, hits in zip(encoder.encode(QUERIES), search_index(pq, QUERIES, top_k=5, encoder=encoder)):
        assert len(hits) == 5
        np.testing.assert_allclose([h["score"] for h in hits], vectors[[h["id"] for h in hits]] @ query, atol=0.05)


def test_whitened_ivf_index(flat_index):
    out = str(flat_index["root"] / "white")
    assert main(["index", "build", "--embedder", flat_index["run"], "--corpus", flat_index["corpus"], "--out", out,
                 "--sequence-length", str(SEQUENCE_LENGTH), "--type", "ivf", "--nlist", "4", "--nprobe", "4",
                 "--whitening", flat_index["corpus"], "--whitening-dim", "8"]) == 0
    index = load_index(out)
    assert (index.manifest["type"], index.manifest["dim"]) == ("ivf", 8)
    assert index.manifest["params"] == {"nlist": 4, "m": None, "nbits": None, "nprobe": 4, "seed": 0}
    assert index.manifest["embedder"]["whitening"] == {"dim": 8, "corpus": flat_index["corpus"], "sentences": 50}
    # mu and W are BERT-whitening's fitted on the mean-pooled corpus; vectors = normalize((pooled - mu) W)
    pooled = numpy_pooled(flat_index, index.texts + QUERIES)
    pooled, pooled_queries = pooled[:50], pooled[50:]
    mu, w = fit_whitening(pooled, 8)
    np.testing.assert_allclose(index.whitening[0], mu, atol=1e-4)
    np.testing.assert_allclose(np.abs(index.whitening[1]), np.abs(w), rtol=1e-3, atol=1e-3)   # SVD signs
    white = (pooled - index.whitening[0]) @ index.whitening[1]
    vectors = white / np.linalg.norm(white, axis=1, keepdims=True)
    np.testing.assert_allclose(index.vectors(), vectors, atol=1e-5)    # IVF-flat gives its vectors back exactly
    # every cell visited: IVF's hits are the exact ranking of the whitened cosines
    queries = (pooled_queries - index.whitening[0]) @ index.whitening[1]
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    ids, scores, _ = index.search(queries, 5)
    expected = np.argsort(-(vectors @ queries.T), axis=0, kind="stable")[:5].T
    np.testing.assert_array_equal(ids, expected)
    # one cell visited: only that cell's vectors are candidates
    ids_one, _, _ = index.search(queries, 50, nprobe=1)
    assert all(0 < (row >= 0).sum() < 50 for row in ids_one)


def test_bad_corpora_and_options(flat_index, tmp_path, capsys):
    bad, empty = tmp_path / "bad.txt", tmp_path / "empty.txt"
    bad.write_bytes(b"john lives in paris\nmary \xff works\n")
    empty.write_bytes(b"\n  \n")
    base = ["index", "build", "--embedder", flat_index["run"], "--out", str(tmp_path / "out")]
    cases = [(["--corpus", str(bad)], f"{bad}: line 2 is not valid UTF-8"),
             (["--corpus", str(empty)], f"{empty}: the corpus holds no sentence"),
             (["--corpus", flat_index["corpus"], "--type", "ivf", "--nlist", "64"],
              "50 sentences are too few to train an ivf index with nlist=64: it needs at least 64"),
             (["--corpus", flat_index["corpus"], "--type", "ivfpq", "--nlist", "4"],
              "too few to train an ivfpq index with nlist=4, nbits=8 (256 PQ centroids): it needs at least 256"),
             (["--corpus", flat_index["corpus"], "--type", "ivfpq", "--nlist", "4", "--m", "5", "--nbits", "4"],
              "ivfpq: m=5 must divide the vectors' dimension 32"),
             (["--corpus", flat_index["corpus"], "--whitening-dim", "4"], "whitening_dim needs --whitening CORPUS")]
    for extra, message in cases:
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
    assert not (tmp_path / "out").exists()
    assert main(["index", "build", "--embedder", flat_index["run"], "--corpus", flat_index["corpus"], "--out",
                 flat_index["flat"]]) == 2
    assert "exists; choose a new --out or pass --overwrite" in capsys.readouterr().err
    assert main(["index", "add", "--index", flat_index["flat"], "--corpus", str(bad)]) == 2
    assert f"{bad}: line 2 is not valid UTF-8" in capsys.readouterr().err
    assert main(["search", "--index", str(tmp_path), "john"]) == 2
    assert "not an index (no manifest.json" in capsys.readouterr().err
