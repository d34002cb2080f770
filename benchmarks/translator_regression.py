"""Held-out quality and SavedModel decoding speed of a translator, for comparing two commits.

Two steps, each its own command so that either side's code can train in between:

``split``: from a Tatoeba-style TSV, hold out ``--test-size`` pairs whose source sentence and whose target
sentence each occur exactly once in the whole corpus (so neither side of a test pair is ever seen in
training), and write the rest as the training corpus::

    python benchmarks/translator_regression.py split --data ../shared/data/tatoeba_spa_eng/spa-eng.tsv \
        --src-col 1 --tgt-col 0 --test-size 2000 --seed 0 --out /tmp/reg

``score``: translate the held-out sources through an exported translator SavedModel, loaded with
TensorFlow and tensorflow-text only (as TF Serving would), greedy, in batches of 64 in file order; print
the corpus BLEU (sacrebleu, 13a, case-insensitive) and the decoding time (after one warm-up batch)::

    python benchmarks/translator_regression.py score --saved-model export/translator/1 --test /tmp/reg/test.tsv

Both write a JSON line to stdout (and to ``--json`` when given).
"""
import argparse
import collections
import json
import os
import random
import sys
import time


def split(args):
    with open(args.data, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    src_count = collections.Counter(r[args.src_col] for r in rows)
    tgt_count = collections.Counter(r[args.tgt_col] for r in rows)
    unique = [i for i, r in enumerate(rows) if src_count[r[args.src_col]] == 1 and tgt_count[r[args.tgt_col]] == 1]
    test = set(random.Random(args.seed).sample(unique, args.test_size))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "train.tsv"), "w", encoding="utf-8") as tr, \
            open(os.path.join(args.out, "test.tsv"), "w", encoding="utf-8") as te:
        for i, r in enumerate(rows):
            (te if i in test else tr).write("\t".join(r) + "\n")
    return {"train_pairs": len(rows) - len(test), "test_pairs": len(test), "candidates": len(unique)}


def score(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if "kerasplm" in sys.modules:
        raise SystemExit("score must run without kerasplm")
    import sacrebleu
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the SavedModel's tokenizers use)

    with open(args.test, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    sources = [r[args.src_col] for r in rows]
    references = [r[args.tgt_col] for r in rows]
    model = tf.saved_model.load(args.saved_model)
    translate = model.signatures["serving_default"]

    def run(batch):
        out = translate(tf.constant(batch))
        return [t.decode("utf-8") for t in out["translation"].numpy()]

    run(sources[:args.batch_size])          # traces and warms up
    hypotheses = []
    t0 = time.perf_counter()
    for start in range(0, len(sources), args.batch_size):
        hypotheses += run(sources[start:start + args.batch_size])
    seconds = time.perf_counter() - t0
    bleu = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True)
    if args.hypotheses:
        with open(args.hypotheses, "w", encoding="utf-8") as f:
            f.write("\n".join(hypotheses) + "\n")
    return {"bleu": round(bleu.score, 2), "signature": str(bleu), "decode_seconds": round(seconds, 2),
            "sentences": len(sources), "mean_hypothesis_words": round(sum(len(h.split()) for h in hypotheses)
                                                                   / len(hypotheses), 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    sp = commands.add_parser("split")
    sp.add_argument("--data", required=True)
    sp.add_argument("--out", required=True)
    sc = commands.add_parser("score")
    sc.add_argument("--saved-model", required=True)
    sc.add_argument("--test", required=True)
    sc.add_argument("--batch-size", type=int, default=64)
    sc.add_argument("--hypotheses", help="write the translations here, one per line")
    for p in (sp, sc):
        p.add_argument("--src-col", type=int, default=1)
        p.add_argument("--tgt-col", type=int, default=0)
        p.add_argument("--json", help="also write the result here")
    sp.add_argument("--test-size", type=int, default=2000)
    sp.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = split(args) if args.command == "split" else score(args)
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
