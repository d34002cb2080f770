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

A checkpoint without Adam moments for the table (a converted run) reports the vectors only.

``--probe-train TSV --probe-dev TSV`` adds a linear probe of what the frozen language model tells about the labels:
ridge regression on ±1 labels (features standardized; the ridge strength picked on the last fifth of the training
examples, then refitted on all of them), scored on the dev file, for two feature sets: the classifier's
concat-pooled features ``[h_T; max; mean]`` of the last LSTM (inference, no dropout) and the mean of the text's word
vectors. Reads checkpoints and fits closed-form probes, trains nothing, so the figures do not depend on machine
load. The probe also reports each pooled part's size (mean |x|) and spread over the dev texts (:func:`spread`): near
0, the language model's state is the same whatever the text says.
"""
import argparse
import json
import os

import numpy as np
import tensorflow as tf

from kerasplm.jobs.finetuning import read_classification_tsv
from kerasplm.models.ulmfit.job import ADAM
from kerasplm.models.ulmfit.awd_lstm import concat_pooling
from kerasplm.runs import load_run
from kerasplm.text.word_vocab import SPECIAL_TOKENS, WordSequencePreprocessor

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


RIDGE_STRENGTHS = (0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)


def probe_features(model, texts, batch_size=64):
    """``(concat-pooled features (n, 3·H), mean word vectors (n, E))`` of ``texts`` under the frozen language model
    ``model``, each text read as the classifier reads it (``<bos>`` first; reversed for a backward model)."""
    backward = bool(model.run_info.config["options"].get("backward", False))
    preprocessor = WordSequencePreprocessor(model.preprocessor, reverse=backward, pad=False)   # its WordTokenizer
    table = model.backbone.embeddings.numpy()
    pooled, mean_vectors = [], []
    for i in range(0, len(texts), batch_size):
        inputs = preprocessor(tf.constant(texts[i:i + batch_size], tf.string))
        out = model.backbone(inputs, training=False)
        pooled.append(concat_pooling(out["sequence_output"], out["final_state"][-1][0], out["padding_mask"]).numpy())
        mask = inputs["padding_mask"].numpy()[:, :, np.newaxis]
        mean_vectors.append((table[inputs["token_ids"].numpy()] * mask).sum(axis=1) / mask.sum(axis=1))
    return np.concatenate(pooled), np.concatenate(mean_vectors)


def spread(features):
    """How much ``features`` (n texts, d) vary from text to text, relative to their size: the mean over the d
    features of their standard deviation across the texts, over the mean of |feature|."""
    return float(features.std(axis=0).mean() / max(np.abs(features).mean(), 1e-12))


def ridge_accuracy(train_x, train_y, dev_x, dev_y):
    """Dev accuracy of ridge regression on ±1 targets (binary labels 0/1), its strength picked on the last fifth of
    the training rows and then refitted on all of them."""
    mean, scale = train_x.mean(axis=0), train_x.std(axis=0) + 1e-6

    def design(x):
        return np.hstack([(x - mean) / scale, np.ones((len(x), 1))])

    def fit(x, y, strength):
        a = design(x)
        return np.linalg.solve(a.T @ a + strength * np.eye(a.shape[1]), a.T @ (2.0 * y - 1.0))

    def accuracy(w, x, y):
        return float(np.mean((design(x) @ w > 0) == (y == 1)))

    cut = len(train_x) * 4 // 5
    best = max(RIDGE_STRENGTHS, key=lambda s: accuracy(fit(train_x[:cut], train_y[:cut], s), train_x[cut:],
                                                      train_y[cut:]))
    return accuracy(fit(train_x, train_y, best), dev_x, dev_y), best


def linear_probe(run_dir, train_tsv, dev_tsv, max_examples=None):
    """The ridge probes' dev accuracy (see the module docstring) of the language-model run ``run_dir``."""
    model = load_run(run_dir)
    (train_texts, _, train_labels), (dev_texts, _, dev_labels) = (
        read_classification_tsv(path, max_examples=n) for path, n in ((train_tsv, max_examples), (dev_tsv, None)))
    names = sorted(set(train_labels))
    if len(names) != 2:
        raise SystemExit(f"embedding_geometry: the probe needs two labels, {train_tsv} has {len(names)}")
    train_y, dev_y = (np.array([names.index(y) for y in labels]) for labels in (train_labels, dev_labels))
    result = {"train_examples": len(train_texts), "dev_examples": len(dev_texts)}
    for name, train_x, dev_x in zip(("pooled", "mean_word_vector"), probe_features(model, train_texts),
                                    probe_features(model, dev_texts)):
        accuracy, strength = ridge_accuracy(train_x, train_y, dev_x, dev_y)
        result[name] = {"dev_accuracy": accuracy, "ridge_strength": strength}
        if name == "pooled":   # [h_T; max; mean], each the last LSTM's width
            parts = dict(zip(("last", "max", "mean"), np.split(dev_x, 3, axis=1)))
            result[name]["size"] = {part: float(np.abs(x).mean()) for part, x in parts.items()}
            result[name]["spread"] = {part: spread(x) for part, x in parts.items()}
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="ulmfit-lm run directories")
    parser.add_argument("--rare", type=int, default=2000, help="the last N words of the vocabulary")
    parser.add_argument("--frequent", type=int, default=500, help="the first N words after the special tokens")
    parser.add_argument("--probe-train", metavar="TSV", help="add the linear probe, trained on this labelled file")
    parser.add_argument("--probe-dev", metavar="TSV", help="the probe's dev file")
    parser.add_argument("--probe-examples", type=int, default=3000, help="read at most this many --probe-train rows")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if bool(args.probe_train) != bool(args.probe_dev):
        parser.error("--probe-train and --probe-dev go together")
    results = [geometry(run, args.rare, args.frequent) for run in args.runs]
    if args.probe_train:
        for result in results:
            result["probe"] = linear_probe(result["run"], args.probe_train, args.probe_dev, args.probe_examples)
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
        if "probe" in result:
            p = result["probe"]
            print(f"  probe ({p['train_examples']:,} training, {p['dev_examples']:,} dev examples): dev accuracy "
                  f"pooled {p['pooled']['dev_accuracy']:.3f}, mean word vector "
                  f"{p['mean_word_vector']['dev_accuracy']:.3f}; the pooled parts' mean |x| and spread over the "
                  "dev texts " + ", ".join(f"{part} {p['pooled']['size'][part]:.3f} / {value:.3f}"
                                           for part, value in p["pooled"]["spread"].items()))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
