"""Restoring `tf.train.Checkpoint`s with one-line errors that name the damaged file."""
import glob

import tensorflow as tf

__all__ = ["CheckpointError", "restore_checkpoint"]


class CheckpointError(ValueError):
    """A checkpoint that cannot be restored (truncated or damaged files, or another model's)."""


def _first_line(error):
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def restore_checkpoint(checkpoint, prefix, partial=False):
    """`checkpoint.restore(prefix)`, every object of `checkpoint` matched unless `partial`.

    Raises CheckpointError naming the file at fault: a truncated data file makes TensorFlow raise
    `IndexError: Read less bytes than requested`, a damaged index a DataLossError, a checkpoint of
    another model a shape or matching error.
    """
    index = f"{prefix}.index"
    data = sorted(glob.glob(f"{glob.escape(prefix)}.data-*")) or [f"{prefix}.data-00000-of-00001"]
    try:
        status = checkpoint.restore(prefix)
        if partial:
            status.expect_partial()
        else:
            status.assert_existing_objects_matched()
    except IndexError as e:  # TensorFlow's reader on a short data file
        raise CheckpointError(f"{', '.join(data)}: damaged checkpoint data ({_first_line(e)}; the file is "
                              f"truncated?)") from e
    except tf.errors.NotFoundError as e:
        raise CheckpointError(f"{prefix}: checkpoint files missing ({_first_line(e)})") from e
    except tf.errors.OpError as e:
        raise CheckpointError(f"{index}: damaged checkpoint ({_first_line(e)})") from e
    except (ValueError, AssertionError) as e:
        raise CheckpointError(f"{prefix}: checkpoint does not match this model ({_first_line(e)})") from e
    return status
