"""Draws the bundled Tatoeba sample (kerasplm/data/sample/) from the full spa-eng.tsv export.

Selection rule (seeded, deterministic):
  1. read `English<TAB>Spanish` pairs, keep those whose Spanish AND English have at most
     `--max-words` whitespace-separated words (short sentences, so a few minutes of CPU training
     learn something), and drop exact duplicate pairs;
  2. shuffle the unique Spanish sentences with `--seed`;
  3. dev = the first `--dev-sources` Spanish sentences with ALL their English translations
     (multi-reference BLEU); train = pairs of the following sentences until `--train-pairs` pairs.
     No Spanish sentence is in both files.
  4. the whole corpus for training (`spa-eng-all-train.tsv.gz`, the main job's default training data):
     every distinct pair of the input file, of any length, whose Spanish sentence is not a dev sentence
     (so the same held-out split stays honest). gzip-compressed with a zero timestamp, so the file is
     a deterministic function of the input.
Every file keeps the original column layout and line order.

    python -m kerasplm.data.make_sample --input /work/shared/data/tatoeba_spa_eng/spa-eng.tsv
"""
import argparse
import gzip
import os
import random

from kerasplm.data.pairs import read_parallel_tsv

LICENSE_TEXT = """\
The files spa-eng-train.tsv and spa-eng-dev.tsv are a sample of the Spanish-English sentence pairs
of the Tatoeba Project (https://tatoeba.org), as exported by manythings.org/anki
(https://www.manythings.org/anki/, file spa-eng.zip, export of 2018-05-13).

License: Creative Commons Attribution 2.0 France (CC-BY 2.0 FR),
https://creativecommons.org/licenses/by/2.0/fr/
Attribution: Tatoeba Project contributors (tatoeba.org) and manythings.org/anki.

The sample was drawn by kerasplm (kerasplm/data/make_sample.py, seed {seed}) from that file:
pairs whose Spanish and English both have at most {max_words} words, exact duplicates removed,
{dev_sources} held-out Spanish sentences with all their translations in spa-eng-dev.tsv and
{train_pairs} pairs of other Spanish sentences in spa-eng-train.tsv. spa-eng-all-train.tsv.gz holds
all {all_pairs} distinct pairs of the file (any length) whose Spanish sentence is not in
spa-eng-dev.tsv (gzip-compressed). Sentences are unchanged.
Columns: English<TAB>Spanish, as in the original file.
"""


def draw_sample(spa, eng, train_pairs=20000, dev_sources=500, max_words=8, seed=0):
    """Returns (train_indexes, dev_indexes) into the input pairs, each sorted."""
    first_index = {}
    for i, pair in enumerate(zip(spa, eng)):
        if len(pair[0].split()) <= max_words and len(pair[1].split()) <= max_words:
            first_index.setdefault(pair, i)                # drops exact duplicates
    by_source = {}
    for (s, _), i in first_index.items():
        by_source.setdefault(s, []).append(i)
    sources = list(by_source)
    random.Random(seed).shuffle(sources)
    if len(sources) <= dev_sources:
        raise ValueError(f"only {len(sources)} source sentences, need more than {dev_sources}")
    dev = sorted(i for s in sources[:dev_sources] for i in by_source[s])
    train = []
    for s in sources[dev_sources:]:
        train.extend(by_source[s])
        if len(train) >= train_pairs:
            break
    return sorted(train[:train_pairs]), dev


def all_training_pairs(spa, eng, dev_indexes):
    """Indexes (sorted) of every distinct pair whose Spanish sentence is not a dev source (any length)."""
    dev_sources = {spa[i] for i in dev_indexes}
    first_index = {}
    for i, pair in enumerate(zip(spa, eng)):
        if pair[0] not in dev_sources:
            first_index.setdefault(pair, i)
    return sorted(first_index.values())


def _write_pairs(path, spa, eng, indexes):
    data = "".join(f"{eng[i]}\t{spa[i]}\n" for i in indexes).encode("utf-8")
    if path.endswith(".gz"):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        f.write(data)


def main(argv=None):
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sample")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", required=True, help="spa-eng.tsv (English<TAB>Spanish)")
    p.add_argument("--out-dir", default=here)
    p.add_argument("--train-pairs", type=int, default=20000)
    p.add_argument("--dev-sources", type=int, default=500)
    p.add_argument("--max-words", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    spa, eng = read_parallel_tsv(a.input, src_col=1, tgt_col=0)
    train, dev = draw_sample(spa, eng, a.train_pairs, a.dev_sources, a.max_words, a.seed)
    everything = all_training_pairs(spa, eng, dev)
    os.makedirs(a.out_dir, exist_ok=True)
    for name, indexes in (("spa-eng-train.tsv", train), ("spa-eng-dev.tsv", dev),
                          ("spa-eng-all-train.tsv.gz", everything)):
        _write_pairs(os.path.join(a.out_dir, name), spa, eng, indexes)
        print(f"{name}: {len(indexes)} pairs")
    with open(os.path.join(a.out_dir, "LICENSE-tatoeba.txt"), "w", encoding="utf-8") as f:
        f.write(LICENSE_TEXT.format(seed=a.seed, max_words=a.max_words, dev_sources=a.dev_sources,
                                    train_pairs=len(train), all_pairs=len(everything)))


if __name__ == "__main__":
    main()
