"""What every benchmark records about the machine it ran on."""
import datetime
import os
import platform
import sys


def machine_info(libraries=True):
    """CPU model, usable cores, GPUs, library versions and the date, as a dict for the JSON results.

    ``libraries=False`` leaves out what needs TensorFlow imported (GPUs, TensorFlow and Keras versions)."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info = {"cpu": cpu, "cpu_count": os.cpu_count(), "cpus_usable": usable, "python": platform.python_version(),
            "date": datetime.datetime.now().isoformat(timespec="seconds")}
    if libraries:
        import keras
        import tensorflow as tf

        info.update(gpus=[d.name for d in tf.config.list_physical_devices("GPU")], tensorflow=tf.__version__,
                    keras=keras.__version__)
    return info


def load_average():
    """The 1/5/15-minute load averages (os.getloadavg), rounded; None where the platform has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def keras_hub_or_reason():
    """(keras_hub module, None) when importable, else (None, a one-line "not installed" reason)."""
    return library_or_reason("keras_hub", "keras-hub")


def library_or_reason(module, package):
    """(module, None) when ``module`` imports, else (None, a one-line "not installed" reason naming the pip
    ``package`` and the benchmark extra)."""
    import importlib

    try:
        return importlib.import_module(module), None
    except ImportError as e:
        return None, f"{package} is not installed ({e}); pip install -e \".[test,bench]\""


def installed_or_reason(*modules):
    """None when every module can be imported, else a one-line "not installed" reason naming the first missing one.
    Nothing is imported: a side that runs in a process of its own (``side_in_own_process``) leaves no trace here."""
    import importlib.util

    for module in modules:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed; pip install -e \".[test,bench]\""
    return None


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_environment():
    """This process's environment with the checkout first on ``PYTHONPATH``, for a child ``python -m benchmarks...``
    run from ``REPO_ROOT``: it imports this checkout's benchmarks and kerasplm."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)}


def side_in_own_process(module, argv, side, timeout=3600):
    """The results of one side of a bench script, run alone: ``python -m module *argv --sides side --json FILE`` in
    a process of its own; ``{"skipped": reason}`` when that process fails.

    This is how the torch (HF) anchors are measured. Beside TensorFlow's sides in one process, HF's GPT step ran at
    224-229 tokens/s where it runs at 319 alone (2026-12-03, RESULTS.md "an AVX-512 AMD machine"): the two libraries'
    thread pools share the cores, which flatters kerasplm's ratio. Alone, HF runs as an HF user's process does."""
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="benchmarks_side_") as tmp:
        path = os.path.join(tmp, "side.json")
        try:
            proc = subprocess.run([sys.executable, "-m", module, *argv, "--sides", side, "--json", path],
                                  cwd=REPO_ROOT, env=child_environment(), capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"skipped": f"{side} did not finish within {timeout} s in its own process"}
        if proc.returncode != 0 or not os.path.exists(path):
            lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
            return {"skipped": f"{side} failed in its own process: {lines[-1] if lines else 'no output'}"}
        with open(path) as f:
            result = json.load(f)[side]
    return {**result, "own_process": True}


def interleaved(sides, rounds, steps_per_round, warmup=1, quiet=False):
    """Time several contenders taking turns, so that they share the machine's noise (a loaded machine).

    ``sides``: {name: zero-argument callable running one step and blocking until it is done}. Each side
    first runs ``warmup`` untimed steps (tracing / compilation: the first one's time is reported), then
    ``rounds`` rounds run every side for ``steps_per_round`` steps, the order rotating each round.
    Returns {name: {"seconds_per_step": median over rounds, "rounds": [...], "first_step_s": ...}}.
    Progress goes to stderr unless ``quiet``.
    """
    import statistics
    import time

    result = {}
    for name, step in sides.items():
        t0 = time.perf_counter()
        for _ in range(max(warmup, 1)):
            step()
            if name not in result:
                result[name] = {"first_step_s": round(time.perf_counter() - t0, 2), "rounds": []}
        if not quiet:
            print(f"{name}: warm ({result[name]['first_step_s']} s for the first step)", file=sys.stderr, flush=True)
    names = list(sides)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            for _ in range(steps_per_round):
                sides[name]()
            result[name]["rounds"].append((time.perf_counter() - t0) / steps_per_round)
            if not quiet:
                print(f"round {r + 1}/{rounds} {name}: {result[name]['rounds'][-1]:.3f} s/step",
                      file=sys.stderr, flush=True)
    for value in result.values():
        value["seconds_per_step"] = statistics.median(value["rounds"])
        value["rounds"] = [round(t, 4) for t in value["rounds"]]
    return result


def trainer_step(trainer, batch, term):
    """A benchmark side from a kerasplm ``Trainer``: builds it on ``batch`` (restoring nothing), then returns
    ``(step, info)`` where ``step()`` runs one compiled train step on the same batch and waits for loss term
    ``term``."""
    import tensorflow as tf

    trainer._ensure_ready(tf.data.Dataset.from_tensors(batch).repeat())

    def step():
        trainer._train_fn(batch)["terms"][term][0].numpy()

    return step, {"parameters": trainer.model.count_params(), "jit_compile": trainer.jit_compile}


def pair_rows(results, pairs, figure, config, flops_per_unit=None, dtype="float32"):
    """Rows for ``benchmarks.run`` from a side-by-side results dict ``{side: {figure: value, ...}}`` (a side
    that could not run holds ``{"skipped": reason}`` or is absent).

    ``pairs``: ``[(row name, kerasplm sides, anchor side)]``; with several kerasplm sides the fastest one's
    figure is taken (its name goes in ``kerasplm_side``). A row whose anchor did not run is skipped with the
    anchor's reason. ``flops_per_unit``: model training FLOPs per unit of ``figure`` (training rows' MFU)."""
    rows = []
    for name, ours, anchor in pairs:
        ours = [ours] if isinstance(ours, str) else list(ours)
        row = {"name": name, "anchor_side": anchor, "config": config}
        measured = [s for s in ours if figure in results.get(s, {})]
        if figure not in results.get(anchor, {}) or not measured:
            missing = anchor if figure not in results.get(anchor, {}) else ours[0]
            row["skipped"] = results.get(missing, {}).get("skipped", f"{missing} was not run")
            rows.append(row)
            continue
        best = max(measured, key=lambda s: results[s][figure])
        row.update(kerasplm=results[best][figure], anchor=results[anchor][figure], kerasplm_side=best, dtype=dtype)
        if flops_per_unit:
            row["training_flops_per_unit"] = flops_per_unit
        rows.append(row)
    return rows


def write_results(results, path=None):
    """Prints ``results`` as JSON and, with ``path``, writes them there too."""
    import json

    print(json.dumps(results, indent=2))
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=2)
