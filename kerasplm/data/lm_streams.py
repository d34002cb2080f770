"""A language model's corpus as parallel streams read in windows of variable length (the AWD-LSTM's batching).

The token stream is cut into ``batch_size`` equal streams, row b of a ``(batch_size, S)`` matrix (the tail that does
not fill a row is dropped); a training window is the next ℓ + 1 columns of every row (inputs and next-token labels),
so row b of consecutive windows continues the same text and a model can carry its recurrent state from one window
to the next. The window lengths ℓ are the AWD-LSTM's (Merity et al. 2018, §4.1), drawn per epoch from
``(seed, epoch)``::

    base = bptt with probability 0.95, else bptt / 2
    ℓ    = min(max(5, ⌊N(base, 5)⌋), bptt + 20)        (and at most what the epoch has left)

A window also says which rows start an epoch (``reset``: 1.0 in an epoch's first window, where the state starts from
zero). The learning rate of a window is scaled by ℓ / bptt (:class:`kerasplm.training.ScaledSchedule`): the job does
it, from the window's width.
"""
import numpy as np
import tensorflow as tf

__all__ = ["bptt_lengths", "stream_matrix", "make_stream_dataset", "make_eval_windows"]


def bptt_lengths(total, bptt, seed, epoch):
    """The window lengths of one epoch over streams of ``total`` tokens (``total - 1`` positions to predict)."""
    rng = np.random.default_rng([int(seed) & 0x7FFFFFFF, int(epoch)])
    lengths, position = [], 0
    while position < total - 1:
        base = bptt if rng.random() < 0.95 else bptt / 2
        length = min(max(5, int(rng.normal(base, 5))), bptt + 20, total - 1 - position)
        lengths.append(length)
        position += length
    return lengths


def stream_matrix(token_ids, batch_size):
    """``(batch_size, S)`` int32: the stream cut into ``batch_size`` consecutive parts; ValueError when too short."""
    ids = np.asarray(token_ids, np.int32)
    width = len(ids) // batch_size
    if width < 2:
        raise ValueError(f"{len(ids)} tokens cannot fill {batch_size} streams of at least 2 tokens; use a larger "
                         f"corpus or a smaller batch_size")
    return ids[:batch_size * width].reshape(batch_size, width)


def make_stream_dataset(token_ids, batch_size, bptt, seed=0):
    """Training windows, forever: ``{"tokens": int32 (batch_size, ℓ + 1), "reset": float32 (batch_size,)}``, epoch
    after epoch, each epoch's lengths from :func:`bptt_lengths`; the same sequence in every process (exact resume
    skips the windows already trained on)."""
    matrix = stream_matrix(token_ids, batch_size)

    def windows():
        epoch = 0
        while True:
            position = 0
            for length in bptt_lengths(matrix.shape[1], bptt, seed, epoch):
                reset = np.full([batch_size], 1.0 if position == 0 else 0.0, np.float32)
                yield {"tokens": matrix[:, position:position + length + 1], "reset": reset}
                position += length
            epoch += 1

    signature = {"tokens": tf.TensorSpec([batch_size, None], tf.int32),
                 "reset": tf.TensorSpec([batch_size], tf.float32)}
    return tf.data.Dataset.from_generator(windows, output_signature=signature).prefetch(2)


def make_eval_windows(token_ids, batch_size, bptt):
    """Held-out windows of exactly ``bptt`` (the last one shorter), in order, as numpy ``(batch_size, ℓ + 1)``: every
    position of the streams predicted once, the state carried through them."""
    matrix = stream_matrix(token_ids, batch_size)
    return [matrix[:, i:i + bptt + 1] for i in range(0, matrix.shape[1] - 1, bptt)]
