"""The word-embedding table of ULMFiT language-model runs: do the rare words' vectors collapse, and why?

For each run directory given (``kerasplm train ulmfit-lm`` / ``finetune ulmfit-lm``; its ``vocab.txt`` lists the
words most frequent first after the special tokens), it reads the tied embedding table E and the optimizer's Adam
moments m and v of that table from the latest checkpoint, and prints for the ``--rare`` last rows (the rarest
words) and the ``--frequent`` first word rows:

* the mean pairwise cosine of their vectors (0 for random vectors; near 1: the words can no longer be told apart),
* the mean row norm, the norm of the mean row (a component all of them share) and the mean norm of what is left,
* the gradient scale sqrt(v) and Adam's normalized step |m / (sqrt(v) + eps)|, and the mean pairwise cosine of those
  steps (do the rows move the same way?).

    python -m benchmarks.embedding_geometry /tmp/ulm/abl/general_lm /tmp/ulm/abl/target_lm --json geometry.json

A checkpoint without Adam moments for the table (a converted run) reports the vectors only. Reads checkpoints, trains
nothing, so the figures do not depend on machine load.
"""
import argparse
import json
import os

import numpy as np
import tensorflow as tf

from kerasplm.jobs.ulmfit import ADAM
from kerasplm.text.word_vocab import SPECIAL_TOKENS

EMBEDDINGS = "model/backbone/embeddings/.ATTRIBUTES/VARIABLE_VALUE"
NUM_SPECIAL = len(SPECIAL_TOKENS)
ADAM_EPSILON = ADAM["epsilon"]   # the ULMFiT jobs' Adam epsilon


def mean_pairwise_cosine(rows):
    """The mean cosine over all ordered pairs of distinct rows (the diagonal left out)."""
    unit = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    n = len(unit)
    total = float(np.sum(unit.sum(axis=0) ** 2))   # = sum of every entry of unit @ unit.T
    return (total - n) / (n * n - n)


def read_table(run_dir):
    """(E, m, v) of the run's latest checkpoint; m and v are None when the checkpoint holds no Adam moments."""
    checkpoint = tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    if checkpoint is None:
        raise SystemExit(f"embedding_geometry: {run_dir} has no checkpoint")
    reader = tf.train.load_checkpoint(checkpoint)
    table = reader.get_tensor(EMBEDDINGS)
    same_shape = sorted((name for name, shape in reader.get_variable_to_shape_map().items()
                         if name.startswith("optimizer/_variables/") and shape == list(table.shape)),
                        key=lambda name: int(name.split("/")[2]))
    if len(same_shape) != 2:          # Keras' Adam keeps (m, v) per variable, in that order
        return table, None, None
    m, v = (reader.get_tensor(name) for name in same_shape)
    return table, m, v


def group_figures(table, m, v, rows):
    vectors = table[rows]
    mean_row = vectors.mean(axis=0)
    figures = {"mean_cosine": mean_pairwise_cosine(vectors),
               "mean_norm": float(np.linalg.norm(vectors, axis=1).mean()),
               "norm_of_mean_row": float(np.linalg.norm(mean_row)),
               "mean_norm_without_mean_row": float(np.linalg.norm(vectors - mean_row, axis=1).mean())}
    if m is not None:
        steps = m[rows] / (np.sqrt(v[rows]) + ADAM_EPSILON)
        figures.update(gradient_scale=float(np.sqrt(v[rows]).mean()), adam_step=float(np.abs(steps).mean()),
                       adam_step_mean_cosine=mean_pairwise_cosine(steps))
    return figures


def geometry(run_dir, rare=2000, frequent=500):
    table, m, v = read_table(run_dir)
    size = table.shape[0]
    if rare + frequent > size - NUM_SPECIAL:
        raise SystemExit(f"embedding_geometry: {run_dir}: {size - NUM_SPECIAL} words, fewer than --rare {rare} + "
                         f"--frequent {frequent}")
    return {"run": run_dir, "vocabulary": int(size),
            "rare": group_figures(table, m, v, np.arange(size - rare, size)),
            "frequent": group_figures(table, m, v, np.arange(NUM_SPECIAL, NUM_SPECIAL + frequent))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="ulmfit-lm run directories")
    parser.add_argument("--rare", type=int, default=2000, help="the last N words of the vocabulary")
    parser.add_argument("--frequent", type=int, default=500, help="the first N words after the special tokens")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    results = [geometry(run, args.rare, args.frequent) for run in args.runs]
    for result in results:
        print(f"{result['run']} ({result['vocabulary']:,} rows)")
        for group in ("rare", "frequent"):
            f = result[group]
            line = (f"  {group:8s} cosine {f['mean_cosine']:.2f}  |row| {f['mean_norm']:.2f}  "
                    f"|mean row| {f['norm_of_mean_row']:.2f}  |row - mean row| {f['mean_norm_without_mean_row']:.2f}")
            if "adam_step" in f:
                line += (f"  sqrt(v) {f['gradient_scale']:.1e}  |m/sqrt(v)| {f['adam_step']:.2f}  "
                         f"step cosine {f['adam_step_mean_cosine']:.2f}")
            print(line)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
