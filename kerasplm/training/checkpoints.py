"""Restoring `tf.train.Checkpoint`s with one-line errors that name the damaged file."""
import glob
import re

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
    except (IndexError, tf.errors.OpError, ValueError, AssertionError) as e:
        _drop_pending_restore(e)
        if isinstance(e, IndexError):  # TensorFlow's reader on a short data file
            raise CheckpointError(f"{', '.join(data)}: damaged checkpoint data ({_first_line(e)}; the file is "
                                  f"truncated?)") from e
        if isinstance(e, tf.errors.NotFoundError):
            raise CheckpointError(f"{prefix}: checkpoint files missing ({_first_line(e)})") from e
        if isinstance(e, tf.errors.OpError):
            damaged, problem = _damaged_file(prefix, index, data)
            raise CheckpointError(f"{damaged or index}: damaged checkpoint ({problem or _first_line(e)})") from e
        raise CheckpointError(f"{prefix}: checkpoint does not match this model ({_first_line(e)})") from e
    return status


def _damaged_file(prefix, index, data):
    """``(file, problem)``: the file of a checkpoint that failed to restore whose bytes TensorFlow cannot read.

    A restore's DataLossError names the index even when a data shard's checksum fails, so the files are read
    again one by one: the index when it cannot be opened, else the data shard of the first tensor that fails
    (TensorFlow's message says "shard N"). ``(None, None)`` when every tensor reads.
    """
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        return index, _first_line(e)
    for name in reader.get_variable_to_shape_map():
        try:
            reader.get_tensor(name)
        except (tf.errors.OpError, ValueError, IndexError) as e:
            shard = re.search(r"\bshard (\d+)\b", str(e))
            damaged = data[int(shard.group(1))] if shard and int(shard.group(1)) < len(data) else ", ".join(data)
            return damaged, _first_line(e)
    return None, None


def _drop_pending_restore(error):
    """Silence the restore that ``error`` interrupted.

    ``checkpoint.restore`` leaves its restore coordinator referenced by the model's variables, waiting for
    objects it never matched; when the interpreter exits, its finalizer logs one "WARNING:tensorflow:" line per
    unrestored value (about 190 for a small model) after the one-line error. TensorFlow offers no handle on it
    once ``restore`` raised, so it is found in the failed call's frames and marked partial, which is what
    ``status.expect_partial()`` does.
    """
    traceback = error.__traceback__
    while traceback is not None:
        for value in list(traceback.tb_frame.f_locals.values()):
            if type(value).__name__ == "_CheckpointRestoreCoordinator" and hasattr(value, "expect_partial"):
                value.expect_partial = True
        traceback = traceback.tb_next
