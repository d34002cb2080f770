"""A Faiss vector index over a corpus, embedded by a BERT run: build, extend, search (seed 003_*, "Faiss").

An index is a directory::

    INDEX/manifest.json   {"format_version", "type", "dim", "count", "metric": "inner_product", "params": {nlist,
                           m, nbits, nprobe, seed}, "embedder": {"run", "weights_sha256", "pooling",
                           "sequence_length", "whitening": null | {"dim", "corpus", "sentences"}}, "corpora": [...]}
    INDEX/index.faiss     the Faiss index (faiss.write_index)
    INDEX/texts.jsonl     one JSON string per vector, in the index's order
    INDEX/ids.npy         int64 [count]: each vector's id (0, 1, ... in the order added; `add` continues)
    INDEX/vectors.npy     float32 [count, dim]: the exact vectors, for an IVFPQ index only (its codes are lossy;
                          flat and IVF-flat indexes give them back exactly)
    INDEX/whitening.npz   mu [1, H], W [H, k] when the embedder whitens

Vectors are the run's sentence vectors (:class:`kerasplm.models.sentence_embedding.embedder.SentenceEmbedder`), L2-normalized,
so the inner product Faiss ranks by is the cosine. The index types are the seed's three, with the inner product:
``flat`` (``IndexFlatIP``: exact), ``ivf`` (``IndexIVFFlat``: k-means cells, ``nlist`` of them, ``nprobe`` visited
per query) and ``ivfpq`` (``IndexIVFPQ``: the vectors product-quantized into ``m`` codes of ``nbits`` bits). IVF
indexes are trained on the corpus they are built from; vectors added later join the trained cells.

The manifest records the embedder run and the SHA-256 of its backbone's weights: extending or querying the index
with another embedder (a different run, or the same run trained further) is refused, since its vectors would not
be comparable. Every write builds the new directory beside the old one and renames it into place (an existing index
is renamed aside first: for a moment the path is absent, never half-written).
"""
import json
import os
import secrets
import shutil

import numpy as np

from kerasplm.data.sentences import read_sentence_lines
from kerasplm.models.bert.runs import bert_run_parts
from kerasplm.models.sentence_embedding.embedder import (ENCODE_BATCH_SIZE, SentenceEmbedder, recorded_settings,
                                                         weights_sha256)
from kerasplm.models.sentence_embedding.whitening import fit_whitening

__all__ = ["INDEX_TYPES", "VectorIndex", "VectorIndexError", "build_index", "add_to_index", "load_index",
           "load_embedder", "search_index", "format_hits"]

INDEX_TYPES = ("flat", "ivf", "ivfpq")
FORMAT_VERSION = 1
MANIFEST, INDEX_FILE, TEXTS, IDS, VECTORS, WHITENING = ("manifest.json", "index.faiss", "texts.jsonl", "ids.npy",
                                                        "vectors.npy", "whitening.npz")
DEFAULT_NLIST, DEFAULT_M, DEFAULT_NBITS, DEFAULT_NPROBE = 16, 8, 8, 4


class VectorIndexError(ValueError):
    """A missing, damaged or mismatched index (one line naming the file)."""


def _faiss():
    import faiss   # imported where used: `kerasplm --help` and the other commands do not load it

    return faiss


def _index_factory(kind, dim, nlist, m, nbits):
    """The Faiss factory string of an index type (inner product on normalized vectors)."""
    if kind == "flat":
        return "Flat"
    if kind == "ivf":
        return f"IVF{nlist},Flat"
    if dim % m:
        raise ValueError(f"ivfpq: m={m} must divide the vectors' dimension {dim} (each code covers dim/m of them)")
    return f"IVF{nlist},PQ{m}x{nbits}"


def _training_minimum(kind, nlist, nbits):
    """Vectors a type needs to train: one per IVF cell, and for PQ one per centroid of each sub-quantizer."""
    if kind == "flat":
        return 0
    return max(nlist, 2 ** nbits) if kind == "ivfpq" else nlist


class VectorIndex:
    """An index directory in memory: ``manifest`` (dict), ``index`` (the Faiss index), ``texts`` (list of str),
    ``ids`` (int64 [count]) and, for IVFPQ, ``exact`` (float32 [count, dim]); ``whitening`` (mu, W) or None."""

    def __init__(self, path, manifest, index, texts, ids, exact=None, whitening=None):
        self.path, self.manifest, self.index, self.texts, self.ids = path, manifest, index, texts, ids
        self.exact, self.whitening = exact, whitening

    @property
    def count(self):
        return len(self.texts)

    def vectors(self):
        """The exact vectors, float32 [count, dim]: reconstructed from a flat or IVF-flat index, read from
        ``vectors.npy`` for IVFPQ."""
        if self.exact is not None:
            return self.exact
        faiss = _faiss()
        ivf = faiss.try_extract_index_ivf(self.index)
        if ivf is not None:
            ivf.make_direct_map()
        return self.index.reconstruct_n(0, self.index.ntotal).astype(np.float32)

    def search(self, vectors, top_k, nprobe=None):
        """``(ids int64 [B, k'], scores float32 [B, k'])`` of the top ``k' = min(top_k, count)`` vectors for each
        query vector (rows of ``vectors``), best first."""
        faiss = _faiss()
        ivf = faiss.try_extract_index_ivf(self.index)
        if ivf is not None:
            ivf.nprobe = int(nprobe or self.manifest["params"]["nprobe"])
        k = min(int(top_k), self.count)
        scores, positions = self.index.search(np.ascontiguousarray(vectors, np.float32), k)
        # An IVF search that visits fewer than k vectors pads with position -1.
        ids = np.where(positions >= 0, self.ids[np.maximum(positions, 0)], -1)
        return ids.astype(np.int64), scores.astype(np.float32), positions

    def write(self, path):
        """Writes the index to directory ``path``: built in a sibling, then renamed into place."""
        path = os.path.abspath(path)
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f".{os.path.basename(path)}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        os.makedirs(tmp)
        try:
            _faiss().write_index(self.index, os.path.join(tmp, INDEX_FILE))
            with open(os.path.join(tmp, TEXTS), "w", encoding="utf-8") as f:
                f.writelines(json.dumps(text, ensure_ascii=False) + "\n" for text in self.texts)
            np.save(os.path.join(tmp, IDS), self.ids.astype(np.int64))
            if self.exact is not None:
                np.save(os.path.join(tmp, VECTORS), self.exact.astype(np.float32))
            if self.whitening is not None:
                np.savez(os.path.join(tmp, WHITENING), mean=self.whitening[0], kernel=self.whitening[1])
            self.manifest["count"] = self.count
            with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
                json.dump(self.manifest, f, indent=2, ensure_ascii=False)
            if os.path.exists(path):
                old = f"{tmp}.old"
                os.rename(path, old)
                os.rename(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.path = path
        return path


def load_index(path):
    """The :class:`VectorIndex` in directory ``path``; one-line errors naming a missing or damaged file."""
    path = os.path.abspath(os.fspath(path))
    manifest_path = os.path.join(path, MANIFEST)
    if not os.path.isfile(manifest_path):
        raise VectorIndexError(f"{path}: not an index (no {MANIFEST}; build one with `kerasplm index build`)")
    try:
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
        if manifest.get("format_version") != FORMAT_VERSION or manifest.get("type") not in INDEX_TYPES:
            raise ValueError(f"format_version {manifest.get('format_version')!r}, type {manifest.get('type')!r}")
    except (ValueError, AttributeError) as e:
        raise VectorIndexError(f"{manifest_path}: not a kerasplm index manifest ({e})") from None
    faiss = _faiss()
    try:
        index = faiss.read_index(os.path.join(path, INDEX_FILE))
    except RuntimeError:
        raise VectorIndexError(f"{os.path.join(path, INDEX_FILE)}: missing or not a Faiss index") from None
    try:
        with open(os.path.join(path, TEXTS), encoding="utf-8") as f:
            texts = [json.loads(line) for line in f]
        ids = np.load(os.path.join(path, IDS))
        exact = np.load(os.path.join(path, VECTORS)) if manifest["type"] == "ivfpq" else None
        whitening = None
        if manifest["embedder"].get("whitening") is not None:
            with np.load(os.path.join(path, WHITENING)) as stored:
                whitening = (stored["mean"], stored["kernel"])
    except (OSError, ValueError, KeyError) as e:
        raise VectorIndexError(f"{path}: a damaged index ({e})") from None
    counts = {"manifest": manifest.get("count"), INDEX_FILE: index.ntotal, TEXTS: len(texts), IDS: len(ids)}
    if exact is not None:
        counts[VECTORS] = len(exact)
    if len(set(counts.values())) != 1:
        raise VectorIndexError(f"{path}: a damaged index, its files disagree on the number of vectors {counts}")
    return VectorIndex(path, manifest, index, texts, ids, exact, whitening)


def load_embedder(index, embedder=None):
    """The :class:`SentenceEmbedder` that built ``index`` (a :class:`VectorIndex`): its recorded pooling, length and
    whitening over the run ``embedder`` (default: the recorded run). Refuses, in one line, a run whose weights
    differ from those that built the index."""
    record = index.manifest["embedder"]
    run = embedder or record["run"]
    backbone, tokenizer, _ = bert_run_parts(run)
    digest = weights_sha256(backbone)
    if digest != record["weights_sha256"]:
        raise VectorIndexError(f"embedder {os.path.abspath(run)} does not match the index {index.path}: its weights' "
                               f"sha256 is {digest[:12]}…, the index was built by {record['run']} with "
                               f"{record['weights_sha256'][:12]}… (rebuild the index with `kerasplm index build` to "
                               f"use this embedder)")
    return SentenceEmbedder(backbone, tokenizer, pooling=record["pooling"], sequence_length=record["sequence_length"],
                            whitening=index.whitening)


def build_index(embedder, corpus, out, type="flat", nlist=DEFAULT_NLIST, m=DEFAULT_M, nbits=DEFAULT_NBITS,
                nprobe=DEFAULT_NPROBE, pooling=None, sequence_length=None, whitening=None, whitening_dim=None,
                batch_size=ENCODE_BATCH_SIZE, seed=0, overwrite=False):
    """Embeds ``corpus`` (one sentence or passage per line) with the BERT run ``embedder`` and writes a Faiss index
    of ``type`` to directory ``out``; returns the :class:`VectorIndex`.

    ``pooling`` / ``sequence_length`` default to what the run records (as ``kerasplm export embedder``).
    ``whitening``: a corpus (may be ``corpus`` itself) on which BERT-whitening's mu and W are fitted, keeping
    ``whitening_dim`` dimensions. ``seed``: Faiss' k-means seed (IVF cells, PQ codebooks).
    """
    if type not in INDEX_TYPES:
        raise ValueError(f"type must be one of {', '.join(INDEX_TYPES)}, got {type!r}")
    if whitening_dim is not None and whitening is None:
        raise ValueError("whitening_dim needs a whitening corpus (--whitening CORPUS)")
    out = os.path.abspath(os.fspath(out))
    if os.path.exists(out) and not overwrite and (not os.path.isdir(out) or os.listdir(out)):
        raise FileExistsError(f"{out} exists; choose a new --out or pass --overwrite")
    texts = read_sentence_lines(corpus)     # a missing, non-UTF-8 or empty corpus fails first, in one line
    whitening_texts = read_sentence_lines(whitening) if whitening is not None else None
    needed = _training_minimum(type, nlist, nbits)
    if len(texts) < needed:
        raise ValueError(f"{corpus}: {len(texts)} sentences are too few to train an {type} index with nlist={nlist}"
                         + (f", nbits={nbits} ({2 ** nbits} PQ centroids)" if type == "ivfpq" else "")
                         + f": it needs at least {needed}")
    backbone, tokenizer, options = bert_run_parts(embedder)
    pooling, _, sequence_length = recorded_settings(options, pooling, None, sequence_length)
    encoder = SentenceEmbedder(backbone, tokenizer, pooling=pooling, sequence_length=sequence_length)
    _index_factory(type, whitening_dim or encoder.dim, nlist, m, nbits)     # m must divide the dimension
    whitening_arrays = whitening_record = None
    if whitening is not None:
        try:
            whitening_arrays = fit_whitening(encoder.pooled(whitening_texts, batch_size), whitening_dim)
        except ValueError as e:
            raise ValueError(f"whitening on {whitening}: {e}") from None
        whitening_arrays = tuple(np.asarray(a, np.float32) for a in whitening_arrays)
        encoder = SentenceEmbedder(backbone, tokenizer, pooling=pooling, sequence_length=sequence_length,
                                   whitening=whitening_arrays)
        whitening_record = {"dim": encoder.dim, "corpus": os.path.abspath(whitening),
                            "sentences": len(whitening_texts)}
    vectors = encoder.encode(texts, batch_size)
    faiss = _faiss()
    index = faiss.index_factory(encoder.dim, _index_factory(type, encoder.dim, nlist, m, nbits),
                                faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        ivf.cp.seed = seed
        if type == "ivfpq":
            faiss.downcast_index(ivf).pq.cp.seed = seed
        index.train(vectors)
    index.add(vectors)
    manifest = {"format_version": FORMAT_VERSION, "type": type, "dim": encoder.dim, "count": len(texts),
                "metric": "inner_product",
                "params": {"nlist": nlist if type != "flat" else None, "m": m if type == "ivfpq" else None,
                           "nbits": nbits if type == "ivfpq" else None,
                           "nprobe": min(nprobe, nlist) if type != "flat" else None, "seed": seed},
                "embedder": {"run": os.path.abspath(embedder), "weights_sha256": weights_sha256(backbone),
                             "pooling": pooling, "sequence_length": encoder.sequence_length,
                             "whitening": whitening_record},
                "corpora": [{"file": os.path.abspath(corpus), "sentences": len(texts), "first_id": 0}]}
    built = VectorIndex(out, manifest, index, texts, np.arange(len(texts), dtype=np.int64),
                        exact=vectors if type == "ivfpq" else None, whitening=whitening_arrays)
    built.write(out)
    return built


def add_to_index(index_dir, corpus, embedder=None, batch_size=ENCODE_BATCH_SIZE):
    """Embeds ``corpus`` with the index's embedder (``embedder``: the run, default the recorded one; a run of other
    weights is refused) and appends its sentences to the index in ``index_dir``, ids continuing; returns the
    :class:`VectorIndex`."""
    texts = read_sentence_lines(corpus)
    index = load_index(index_dir)
    encoder = load_embedder(index, embedder)
    vectors = encoder.encode(texts, batch_size)
    first = int(index.ids.max()) + 1 if index.count else 0
    index.index.add(vectors)
    index.texts = index.texts + texts
    index.ids = np.concatenate([index.ids, np.arange(first, first + len(texts), dtype=np.int64)])
    if index.exact is not None:
        index.exact = np.concatenate([index.exact, vectors])
    index.manifest["corpora"].append({"file": os.path.abspath(corpus), "sentences": len(texts), "first_id": first})
    index.write(index.path)
    return index


def search_index(index, queries, top_k=5, nprobe=None, embedder=None, encoder=None):
    """The top-k hits of each query in ``index`` (a directory or a :class:`VectorIndex`): a list (one per query) of
    ``[{"id", "score", "text"}, ...]``, best first (fewer than ``top_k`` when the index holds fewer vectors, or an
    IVF search visits fewer). ``encoder``: a :class:`SentenceEmbedder` already made by :func:`load_embedder`."""
    index = index if isinstance(index, VectorIndex) else load_index(index)
    encoder = encoder or load_embedder(index, embedder)
    ids, scores, positions = index.search(encoder.encode(list(queries)), top_k, nprobe)
    return [[{"id": int(i), "score": float(s), "text": index.texts[p]}
             for i, s, p in zip(row_ids, row_scores, row_positions) if p >= 0]
            for row_ids, row_scores, row_positions in zip(ids, scores, positions)]


# ---- the command line's functions (kerasplm index build | index add | search) ------------------------------
def build_index_command(embedder, corpus, out, type="flat", nlist=DEFAULT_NLIST, m=DEFAULT_M, nbits=DEFAULT_NBITS,
                        nprobe=DEFAULT_NPROBE, pooling=None, sequence_length=None, whitening=None,
                        whitening_dim=None, batch_size=ENCODE_BATCH_SIZE, seed=0, overwrite=False):
    """``kerasplm index build``: prints what was written."""
    built = build_index(embedder, corpus, out, type=type, nlist=nlist, m=m, nbits=nbits, nprobe=nprobe,
                        pooling=pooling, sequence_length=sequence_length, whitening=whitening,
                        whitening_dim=whitening_dim, batch_size=batch_size, seed=seed, overwrite=overwrite)
    print(f"wrote {built.path}: {built.count} vectors of {built.manifest['dim']} dimensions ({type})")
    return 0


def add_index_command(index, corpus, embedder=None, batch_size=ENCODE_BATCH_SIZE):
    """``kerasplm index add``: prints the new count."""
    extended = add_to_index(index, corpus, embedder=embedder, batch_size=batch_size)
    print(f"wrote {extended.path}: {extended.count} vectors")
    return 0


def format_hits(queries, results):
    """``kerasplm search``'s text output: per query a ``query: ...`` line, then one line per hit: rank, id, score
    (4 decimals) and text."""
    lines = []
    for query, hits in zip(queries, results):
        lines.append(f"query: {query}")
        lines += [f"{rank:>4}  {hit['id']:>8}  {hit['score']:.4f}  {hit['text']}" for rank, hit in enumerate(hits, 1)]
    return "\n".join(lines)


def search_command(queries, index, top_k=5, nprobe=None, json_output=False, embedder=None):
    """``kerasplm search``: the hits as text (:func:`format_hits`) or, with ``json_output``, JSON: a list of
    ``{"id", "score", "text"}`` (a list of such lists for several queries)."""
    results = search_index(index, queries, top_k=top_k, nprobe=nprobe, embedder=embedder)
    if json_output:
        print(json.dumps(results[0] if len(results) == 1 else results, ensure_ascii=False))
    else:
        print(format_hits(queries, results))
    return 0
