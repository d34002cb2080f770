"""Query latency of the retriever SavedModel against Faiss, and memory per vector, at N corpus vectors.

For each N in ``--sizes`` (default 10,000 and 100,000): N random unit vectors of the embedder's width D (search
time does not depend on what the vectors mean) with texts ``"passage i"``; then, one query per call, interleaved,
p50 / p99 over ``--requests`` calls of

  * ``retriever``: the retriever SavedModel (``kerasplm.models.sentence_embedding.retriever_export``, float32 corpus matrix, exact top-k),
    loaded with ``tf.saved_model.load``: query string -> embedding -> ``q V^T`` -> top-k ids, scores, texts;
  * ``retriever_int8``: the same with the int8 matrix and per-vector scales;
  * ``embed``: the same SavedModel's ``embed`` signature alone (the query's embedding), so that search time =
    retriever - embed;
  * ``faiss_flat`` / ``faiss_ivf``: ``IndexFlatIP`` and ``IndexIVFFlat`` (nlist = 4 sqrt(N), ``--nprobe``) searching
    the query's vector (embedding not included: add ``embed``'s time to compare end to end).

Memory per vector (bytes): the retriever's matrix (4 D; int8: D + 4), Faiss flat (4 D), IVF-flat (4 D + 8 for the
id), IVFPQ (m + 8, m = D / 8 codes); texts come on top in every case. The embedder is ``--run`` (a BERT run, e.g. a
converted all-MiniLM-L6-v2), else a random ``bert_tiny`` over a 30-word vocabulary.

    python benchmarks/bench_retrieval.py --run runs/minilm --sizes 10000 100000 --requests 200 --out results.json
    python benchmarks/bench_retrieval.py --sizes 1000 --requests 5            # smoke
"""
import argparse
import math
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import faiss  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.common import load_average, machine_info, write_results  # noqa: E402
from kerasplm.export.base import save_version  # noqa: E402
from kerasplm.models.sentence_embedding.retriever_export import RetrieverModule  # noqa: E402
from kerasplm.models.sentence_embedding.embedder import SentenceEmbedder, bert_run_parts, recorded_settings  # noqa: E402

QUERY = "where was the treaty signed ?"
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "where", "was", "the", "treaty", "signed", "?", "who", "wrote",
         "a", "book", "in", "city", "of", "and", "is", "what", "year", "did", "it", "end", "war", "king", "river",
         "##s", "."]


def make_encoder(run, sequence_length):
    if run:
        backbone, tokenizer, options = bert_run_parts(run)
        pooling, _, length = recorded_settings(options, sequence_length=sequence_length)
        return SentenceEmbedder(backbone, tokenizer, pooling=pooling, sequence_length=length), f"run {run}"
    from kerasplm.models.bert.backbone import BertBackbone
    from kerasplm.text import BertTokenizer

    tf.keras.utils.set_random_seed(0)
    backbone = BertBackbone.from_preset("bert_tiny", vocab_size=len(WORDS))
    return SentenceEmbedder(backbone, BertTokenizer(WORDS), sequence_length=sequence_length), "random bert_tiny"


def percentiles(seconds):
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3),
            "mean_ms": round(float(ms.mean()), 3)}


def run_size(encoder, n, top_k, requests, nprobe, root):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, encoder.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids, texts = np.arange(n, dtype=np.int64), [f"passage {i}" for i in range(n)]
    loaded = {}
    for name, int8 in (("retriever", False), ("retriever_int8", True)):
        path = save_version(RetrieverModule(encoder, vectors, ids, texts, top_k, int8=int8),
                            os.path.join(root, f"{name}_{n}"), metadata={})
        loaded[name] = tf.saved_model.load(path)
    retrieve, retrieve_int8 = (loaded[k].signatures["serving_default"] for k in ("retriever", "retriever_int8"))
    embed = loaded["retriever"].signatures["embed"]
    query = tf.constant([QUERY])
    query_vector = embed(text=query)["embedding"].numpy()
    flat = faiss.IndexFlatIP(encoder.dim)
    flat.add(vectors)
    nlist = max(1, int(4 * math.sqrt(n)))
    ivf = faiss.index_factory(encoder.dim, f"IVF{nlist},Flat", faiss.METRIC_INNER_PRODUCT)
    ivf.train(vectors)
    ivf.add(vectors)
    faiss.extract_index_ivf(ivf).nprobe = nprobe
    exact = retrieve(text=query)["ids"].numpy()[0]
    agree = bool(np.array_equal(exact, flat.search(query_vector, top_k)[1][0]))
    sides = {"retriever": lambda: retrieve(text=query)["ids"].numpy(),
             "retriever_int8": lambda: retrieve_int8(text=query)["ids"].numpy(),
             "embed": lambda: embed(text=query)["embedding"].numpy(),
             "faiss_flat": lambda: flat.search(query_vector, top_k),
             "faiss_ivf": lambda: ivf.search(query_vector, top_k)}
    times = {name: [] for name in sides}
    for fn in sides.values():   # warm-up
        fn()
    for _ in range(requests):
        for name, fn in sides.items():
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    d = encoder.dim
    return {"n": n, "dim": d, "top_k": top_k, "nlist": nlist, "nprobe": nprobe, "requests": requests,
            "retriever_equals_faiss_flat": agree,
            "latency": {name: percentiles(t) for name, t in times.items()},
            "bytes_per_vector": {"retriever": 4 * d, "retriever_int8": d + 4, "faiss_flat": 4 * d,
                                 "faiss_ivf": 4 * d + 8, "faiss_ivfpq": d // 8 + 8}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="BERT run directory (default: a random bert_tiny)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--nprobe", type=int, default=8)
    parser.add_argument("--sequence-length", type=int, default=None)
    parser.add_argument("--out", help="write the JSON results here too")
    args = parser.parse_args()
    encoder, model = make_encoder(args.run, args.sequence_length)
    with tempfile.TemporaryDirectory() as root:
        rows = [run_size(encoder, n, args.top_k, args.requests, args.nprobe, root) for n in args.sizes]
    write_results({"benchmark": "retrieval", "model": model, "query": QUERY, "machine": machine_info(),
                   "load_average": load_average(), "sizes": rows}, args.out)


if __name__ == "__main__":
    main()
