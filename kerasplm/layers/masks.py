"""Attention masks.

Convention (the seed's, used everywhere in kerasplm): a mask is a float tensor that holds **1.0 where
attention is NOT allowed** (a padded key, a future position) and 0.0 elsewhere. Attention adds
``mask * -1e9`` to the scaled logits before the softmax, so masked keys get (numerically) zero weight.
Masks broadcast against attention logits of shape ``(batch, heads, seq_len_q, seq_len_k)``.
"""
import tensorflow as tf


def create_padding_mask(seq, pad_id=0):
    """Marks padding tokens.

    Args:
      seq: int tensor ``(batch, seq_len)`` of token ids.
      pad_id: the id used for padding (0 in every kerasplm vocabulary).
    Returns:
      float32 ``(batch, 1, 1, seq_len)``: 1.0 at padded positions.
    """
    seq = tf.cast(tf.math.equal(seq, pad_id), tf.float32)
    return seq[:, tf.newaxis, tf.newaxis, :]


def create_look_ahead_mask(size):
    """Marks future positions: entry (i, j) is 1.0 when j > i.

    Returns:
      float32 ``(size, size)``; position i may attend to positions 0..i only.
    """
    return 1.0 - tf.linalg.band_part(tf.ones((size, size)), -1, 0)


def create_masks(inp, tar, pad_id=0):
    """The three masks of the seed's ``create_masks``.

    Args:
      inp: source ids ``(batch, inp_len)``.
      tar: decoder input ids ``(batch, tar_len)``.
    Returns:
      ``(enc_padding_mask, combined_mask, dec_padding_mask)``:
      encoder self-attention mask ``(batch, 1, 1, inp_len)``; decoder self-attention mask combining
      look-ahead and target padding ``(batch, 1, tar_len, tar_len)``; cross-attention mask over the
      source padding ``(batch, 1, 1, inp_len)``.
    """
    enc_padding_mask = create_padding_mask(inp, pad_id)
    dec_padding_mask = create_padding_mask(inp, pad_id)
    look_ahead_mask = create_look_ahead_mask(tf.shape(tar)[1])
    dec_target_padding_mask = create_padding_mask(tar, pad_id)
    combined_mask = tf.maximum(dec_target_padding_mask, look_ahead_mask)
    return enc_padding_mask, combined_mask, dec_padding_mask
