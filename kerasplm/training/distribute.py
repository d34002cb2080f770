"""tf.distribute helpers: pick a strategy by name; who is the chief; split the CPU into logical devices for tests."""
import json
import os

import tensorflow as tf

__all__ = ["get_strategy", "configure_logical_cpus", "is_chief_process"]

_STRATEGIES = ("default", "mirrored", "multiworker")
_ALIASES = {"multi-worker": "multiworker"}
_CACHE = {}


def get_strategy(name="default"):
    """Return a tf.distribute strategy for `name` in {"default", "mirrored", "multiworker"}.

    "mirrored" uses every local GPU (or every logical CPU when there is no GPU);
    "multiworker" reads the cluster from the TF_CONFIG environment variable.

    Strategies are created once per process and reused: a second MirroredStrategy over the same
    devices reuses collective keys of the first one, and TensorFlow then aborts its all-reduces
    with "Shape mismatch in the collective instance".
    """
    name = _ALIASES.get(name, name)
    if name not in _STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; expected one of {_STRATEGIES}")
    if name == "default":
        return tf.distribute.get_strategy()
    if name not in _CACHE:
        if name == "mirrored":
            gpus = tf.config.list_logical_devices("GPU")
            devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
            _CACHE[name] = tf.distribute.MirroredStrategy(devices=devices)
        else:
            _CACHE[name] = tf.distribute.MultiWorkerMirroredStrategy()
    return _CACHE[name]


def is_chief_process(strategy_name="default"):
    """Whether this process writes a multi-worker job's files, read from TF_CONFIG before any TensorFlow op (the
    same rule as :class:`kerasplm.training.Trainer`'s: the "chief" task, or worker 0 of a cluster without one).
    Always True for other strategies."""
    if _ALIASES.get(strategy_name, strategy_name) != "multiworker":
        return True
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    except json.JSONDecodeError as e:
        raise ValueError(f"TF_CONFIG is not valid JSON ({e})") from None
    task = config.get("task") or {}
    if task.get("type") == "chief":
        return True
    return task.get("type") == "worker" and int(task.get("index", 0)) == 0 and "chief" not in config.get("cluster", {})


def configure_logical_cpus(n):
    """Split the first physical CPU into `n` logical devices (for MirroredStrategy on one CPU).

    Must run before TensorFlow initializes its devices (before any op runs); raises RuntimeError
    otherwise, unless the CPU is already split into `n` devices.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
        )
    except RuntimeError:
        if len(tf.config.list_logical_devices("CPU")) != n:
            raise
    return tf.config.list_logical_devices("CPU")
