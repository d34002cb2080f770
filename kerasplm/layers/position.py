"""Position information for attention models."""
import numpy as np
import tensorflow as tf


def get_angles(pos, i, d_model):
    """pos / 10000^(2·floor(i/2) / d_model), broadcasting ``pos`` against ``i``."""
    angle_rates = 1 / np.power(10000, (2 * (i // 2)) / np.float32(d_model))
    return pos * angle_rates


def positional_encoding(position, d_model):
    """Sinusoidal positional encoding of "Attention is all you need" (section 3.5).

    PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    Args:
      position: number of positions to encode.
      d_model: encoding width.
    Returns:
      float32 tensor ``(1, position, d_model)``.
    """
    if position <= 0 or d_model <= 0:
        raise ValueError(f"positional_encoding needs position > 0 and d_model > 0, got {position}, {d_model}")
    angle_rads = get_angles(np.arange(position)[:, np.newaxis], np.arange(d_model)[np.newaxis, :], d_model)
    angle_rads[:, 0::2] = np.sin(angle_rads[:, 0::2])
    angle_rads[:, 1::2] = np.cos(angle_rads[:, 1::2])
    return tf.cast(angle_rads[np.newaxis, ...], dtype=tf.float32)
