"""A language model's plain-text corpus: read, held out, tokenized and cut into packed next-token windows.

What the GPT and char-RNN language-model jobs read their data with (ULMFiT's reads its text here too):

* :func:`read_corpus`: the training and held-out text of options with ``corpus``, ``valid_corpus``,
  ``valid_fraction`` and ``max_chars``: ``--valid-corpus``, or the last ``valid_fraction`` of the corpus cut at a
  line boundary;
* :func:`encode_text`: a text's token ids, line by line, after an optional start token;
* :func:`make_lm_dataset`: windows of ``seq_len + 1`` tokens (inputs and next-token labels), each epoch at a seeded
  random offset and in a seeded order that is a pure function of (seed, epoch), so a resumed run sees exactly the
  batches an uninterrupted one would.
"""
import math

import numpy as np
import tensorflow as tf

__all__ = ["read_corpus", "encode_text", "make_lm_dataset"]


def _read_text(path, max_chars):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read() if max_chars is None else f.read(max_chars)
    if not text.strip():
        raise ValueError(f"{path}: no text")
    return text


def read_corpus(options):
    """(training text, held-out text) of the options (see the module docstring)."""
    o = options
    if o.corpus is None:
        raise ValueError("give a training corpus: corpus=PATH / --corpus PATH (a UTF-8 text file, e.g. "
                         "../shared/data/tiny_shakespeare/input.txt)")
    text = _read_text(o.corpus, o.max_chars)
    if o.valid_corpus:
        return text, _read_text(o.valid_corpus, o.max_chars)
    cut = int(len(text) * (1.0 - o.valid_fraction))
    newline = text.rfind("\n", 0, cut)
    cut = newline + 1 if newline > 0 else cut  # at a line boundary when there is one
    train, held_out = text[:cut], text[cut:]
    if not train.strip() or not held_out.strip():
        raise ValueError(f"{o.corpus}: too little text to hold out {o.valid_fraction:.0%} of it "
                         f"({len(text)} characters)")
    return train, held_out


def encode_text(tokenizer, text, start_id=None, lines_per_call=4096):
    """The token ids (int32 numpy) of ``text``, preceded by ``start_id`` if given. Tokenized line by line
    (each line keeps its "\\n"; SentencePiece pieces never cross a newline, so this equals tokenizing the
    whole text at once) in calls of ``lines_per_call`` lines."""
    lines = text.splitlines(keepends=True)
    parts = [np.array([] if start_id is None else [start_id], np.int32)]
    for i in range(0, len(lines), lines_per_call):
        ids = tokenizer.tokenize(tf.constant(lines[i:i + lines_per_call], tf.string))
        parts.append(ids.flat_values.numpy().astype(np.int32))
    return np.concatenate(parts)


def make_lm_dataset(token_ids, seq_len, batch_size, seed=0, shuffle=True, repeat=True, max_windows=None):
    """Packed next-token windows: int32 ``(batch, seq_len + 1)`` (inputs ``[:, :-1]``, labels ``[:, 1:]``).

    Training (``shuffle=True``): epoch e cuts the stream at offset r_e + i·seq_len (r_e in [0, seq_len)
    drawn from (seed, e)) and visits the windows in the order ``index_shuffle(i, (seed, e))``: a pure
    function of (seed, position), so every iteration (or process) yields the same batches. Full batches
    only. Evaluation (``shuffle=False``): consecutive windows from offset 0, the last one 0-padded (label 0
    is ignored by the loss), at most ``max_windows``.
    """
    ids = tf.constant(np.asarray(token_ids, np.int32))
    total, width = int(ids.shape[0]), seq_len + 1
    if not shuffle:
        n = max(1, math.ceil((total - 1) / seq_len))
        if max_windows:
            n = min(n, max_windows)
        padded = tf.pad(ids, [[0, n * seq_len + 1 - min(total, n * seq_len + 1)]])[:n * seq_len + 1]
        starts = tf.range(n) * seq_len
        windows = tf.gather(padded, starts[:, tf.newaxis] + tf.range(width)[tf.newaxis])
        return tf.data.Dataset.from_tensor_slices(windows).batch(batch_size)
    n = (total - seq_len) // seq_len  # windows per epoch, whatever the offset
    if n < batch_size:
        raise ValueError(f"the training text has {total} tokens: {max(n, 0)} windows of {seq_len} + 1 tokens, "
                         f"fewer than one batch of {batch_size}; use a larger corpus or smaller seq_len/batch_size")
    positions = tf.data.Dataset.counter() if repeat else tf.data.Dataset.range(n)
    seed = tf.constant(seed, tf.int64)

    def window(position):
        epoch, index = position // n, position % n
        # Two independent streams of (seed, epoch): the window order and (epoch -1 - e) the offset.
        index = tf.random.experimental.index_shuffle(index, seed=tf.stack([seed, epoch]), max_index=n - 1)
        offset = tf.random.stateless_uniform([], seed=tf.stack([seed, -1 - epoch]), minval=0, maxval=seq_len,
                                             dtype=tf.int64, alg="philox")
        return tf.slice(ids, [tf.cast(offset + index * seq_len, tf.int32)], [width])

    dataset = positions.map(window, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
