"""Parallel corpora: a strict TSV reader, a held-out split by source sentence, and the bucketed
`tf.data` pipeline that feeds the translator.

The Tatoeba / manythings.org file is `English<TAB>Spanish`, so the default direction
(`src_col=1`, `tgt_col=0`) translates Spanish into English, like the seed.
"""
import gzip
import random
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from kerasplm.text.preprocessing import TranslatorPreprocessor

DEFAULT_BUCKET_LENGTHS = (8, 16, 24, 32, 40)


def read_parallel_tsv(path, src_col=1, tgt_col=0, max_pairs=None):
    """Reads sentence pairs from a tab-separated UTF-8 file; returns (src list, tgt list).

    A path ending in ``.gz`` is read through gzip (the bundled whole corpus is compressed).
    Column indexes are 0-based; blank lines are skipped; `max_pairs` stops early. Errors name the
    file and the 1-based line number: missing file (FileNotFoundError), empty file, a line with
    too few columns or an empty sentence, a line that is not valid UTF-8 (ValueError).
    """
    path = str(path)
    for name, col in (("--src-col", src_col), ("--tgt-col", tgt_col)):
        if not isinstance(col, int) or col < 0:
            raise ValueError(f"{name} must be a column index >= 0, got {col!r}")
    if max_pairs is not None and max_pairs < 1:
        raise ValueError(f"max_pairs must be >= 1 or None, got {max_pairs!r}")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"parallel corpus not found: {path}") from None
    if path.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise ValueError(f"{path}: not a valid gzip file ({e})") from None
    src, tgt = [], []
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        try:
            text = line.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: line {lineno} is not valid UTF-8 "
                             f"(byte {e.start}: {line[e.start:e.start + 1]!r})") from None
        if not text.strip():
            continue
        cols = text.split("\t")
        for name, col in (("--src-col", src_col), ("--tgt-col", tgt_col)):
            if col >= len(cols):
                raise ValueError(f"{path}: line {lineno} has {len(cols)} column(s); "
                                 f"{name} {col} needs at least {col + 1}")
        s, t = cols[src_col].strip(), cols[tgt_col].strip()
        if not s or not t:
            col = src_col if not s else tgt_col
            raise ValueError(f"{path}: line {lineno} has an empty sentence in column {col}")
        src.append(s)
        tgt.append(t)
        if max_pairs is not None and len(src) >= max_pairs:
            break
    if not src:
        raise ValueError(f"parallel corpus {path} is empty (no non-blank line)")
    return src, tgt


class ParallelSplit(NamedTuple):
    """Flat, aligned train and dev pairs. Unpacks as (train_src, train_tgt, dev_src, dev_tgt)."""
    train_src: list
    train_tgt: list
    dev_src: list
    dev_tgt: list


def group_references(src, tgt):
    """Groups aligned pairs by source: returns (unique sources, list of reference lists).

    Use it on the dev split for multi-reference BLEU (Tatoeba often has several translations of
    one sentence). Order is that of first occurrence.
    """
    refs = {}
    for s, t in zip(src, tgt):
        refs.setdefault(s, []).append(t)
    return list(refs), list(refs.values())


def train_dev_split(src, tgt, dev_fraction=0.05, dev_size=None, seed=0):
    """Deterministic held-out split by unique SOURCE sentence.

    Exact duplicate (src, tgt) pairs are dropped first. Then the unique source sentences are
    shuffled with `seed` and the first `dev_size` of them (or `dev_fraction` of them, at least one)
    go to dev with all their translations, so no source sentence is in both train and dev (an
    honest BLEU). Both parts keep the input order. Returns a `ParallelSplit` of flat lists; see
    `group_references` to turn dev into (source, [references]).
    """
    if len(src) != len(tgt):
        raise ValueError(f"src and tgt differ in length: {len(src)} != {len(tgt)}")
    pairs = list(dict.fromkeys(zip(src, tgt)))           # dedupe, keep first-occurrence order
    sources = list(dict.fromkeys(s for s, _ in pairs))
    if dev_size is None:
        if not 0.0 < dev_fraction < 1.0:
            raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction!r}")
        dev_size = max(1, int(round(dev_fraction * len(sources))))
    if not 0 < dev_size < len(sources):
        raise ValueError(f"dev_size must be in [1, {len(sources) - 1}] "
                         f"({len(sources)} unique source sentences), got {dev_size!r}")
    order = list(range(len(sources)))
    random.Random(seed).shuffle(order)
    dev_sources = {sources[i] for i in order[:dev_size]}
    split = ParallelSplit([], [], [], [])
    for s, t in pairs:
        if s in dev_sources:
            split.dev_src.append(s)
            split.dev_tgt.append(t)
        else:
            split.train_src.append(s)
            split.train_tgt.append(t)
    return split


def _encode_all(encode, texts, chunk_size):
    """Runs a preprocessor's ``encode`` (strings -> ragged ids) over a list of str in chunks;
    returns one int64 RaggedTensor [n, (tokens)]."""
    values, lengths = [], []
    for i in range(0, len(texts), chunk_size):
        ids = encode(tf.constant(texts[i:i + chunk_size], tf.string))
        values.append(ids.flat_values.numpy())
        lengths.append(ids.row_lengths().numpy())
    return tf.RaggedTensor.from_row_lengths(np.concatenate(values), np.concatenate(lengths))


def make_translation_dataset(src_texts, tgt_texts, src_tokenizer, tgt_tokenizer, batch_size=64,
                             max_length=40, bucket_lengths=DEFAULT_BUCKET_LENGTHS, shuffle=True,
                             seed=0, drop_long=True, repeat=False, drop_remainder=False,
                             chunk_size=4096):
    """Bucketed, padded translation batches: `((src_ids, tgt_in), tgt_out)`, all int64.

    Both sides are tokenized once up front by a :class:`kerasplm.text.TranslatorPreprocessor`
    ([START] pieces [END]) and kept in memory. A pair with more than `max_length` tokens on either
    side is dropped (`drop_long=True`) or cut to `max_length` tokens ending in [END]
    (`drop_long=False`: the preprocessor's truncation). Each pair goes to the smallest bucket length
    L in `bucket_lengths` that holds both sides; src and tgt are zero-padded to L, so
    src_ids is [B, L] and tgt_in = tgt[:, :-1], tgt_out = tgt[:, 1:] are [B, L - 1].

    Distinct shapes: at most len(bucket_lengths) sequence lengths; the batch dimension is
    `batch_size` except for at most one final partial batch per bucket when `repeat=False` and
    `drop_remainder=False`. The `element_spec` leaves both dimensions unknown, so the Trainer traces
    its step once for all buckets; XLA (with `jit_compile`) still compiles once per distinct shape.

    Order is a stateless function of `seed` (a fresh seeded permutation per epoch): iterating the
    dataset again, or rebuilding it in another process, gives the same batches, so a resumed run
    can `skip()` the batches it has already seen. `repeat=True` repeats forever with a new
    permutation for each epoch.
    """
    if len(src_texts) != len(tgt_texts):
        raise ValueError(f"src_texts and tgt_texts differ in length: "
                         f"{len(src_texts)} != {len(tgt_texts)}")
    if not src_texts:
        raise ValueError("make_translation_dataset needs at least one sentence pair")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    if max_length < 3:
        raise ValueError(f"max_length must be >= 3 ([START], a token, [END]), got {max_length!r}")
    bucket_lengths = sorted(int(b) for b in bucket_lengths)
    if not bucket_lengths or bucket_lengths[0] < 2 or bucket_lengths[-1] < max_length:
        raise ValueError(f"bucket_lengths must be >= 2 and reach max_length={max_length}, "
                         f"got {bucket_lengths!r}")
    bucket_lengths = [b for b in bucket_lengths if b < max_length] + [max_length]

    preprocessor = TranslatorPreprocessor(src_tokenizer, tgt_tokenizer,
                                          max_source_length=None if drop_long else max_length,
                                          max_target_length=None if drop_long else max_length)
    src = _encode_all(preprocessor.source_ids, list(src_texts), chunk_size)
    tgt = _encode_all(preprocessor.target_ids, list(tgt_texts), chunk_size)
    if drop_long:
        keep = (src.row_lengths() <= max_length) & (tgt.row_lengths() <= max_length)
        src, tgt = tf.ragged.boolean_mask(src, keep), tf.ragged.boolean_mask(tgt, keep)
    n = int(src.nrows())
    if n == 0:
        raise ValueError(f"every pair is longer than max_length={max_length} tokens")

    positions = tf.data.Dataset.counter() if repeat else tf.data.Dataset.range(n)

    def gather(position):
        index = position % n
        if shuffle:
            epoch = position // n
            index = tf.random.experimental.index_shuffle(
                index, seed=tf.stack([tf.constant(seed, tf.int64), epoch]), max_index=n - 1)
        return src[index], tgt[index]

    dataset = positions.map(gather, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    # Bucket i holds lengths < bucket_lengths[i] + 1 and is padded to bucket_lengths[i].
    dataset = dataset.bucket_by_sequence_length(
        element_length_func=lambda s, t: tf.maximum(tf.shape(s)[0], tf.shape(t)[0]),
        bucket_boundaries=[b + 1 for b in bucket_lengths],
        bucket_batch_sizes=[batch_size] * (len(bucket_lengths) + 1),
        pad_to_bucket_boundary=True, drop_remainder=drop_remainder)
    dataset = dataset.map(lambda s, t: ((s, t[:, :-1]), t[:, 1:]),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)
