"""What every benchmark records about the machine it ran on."""
import datetime
import os
import platform


def machine_info():
    """CPU model, usable cores, GPUs, library versions and the date, as a dict for the JSON results."""
    import keras
    import tensorflow as tf

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu, "cpu_count": os.cpu_count(), "cpus_usable": usable,
            "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
            "tensorflow": tf.__version__, "keras": keras.__version__, "python": platform.python_version(),
            "date": datetime.datetime.now().isoformat(timespec="seconds")}
