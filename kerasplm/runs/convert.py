"""``kerasplm convert run``: a run directory of an earlier format (1 or 2) -> a copy in the current format (3).

Formats 1 and 2 stored a family-specific ``model`` section that each family's loader parsed by hand; format 3 stores
the task model's and the preprocessor's Keras configs (:mod:`kerasplm.runs`). The conversion copies the whole
directory (checkpoints, assets, history, metrics, logs) to ``out``, builds the model and preprocessor the old
config describes (each family's ``LEGACY_BUILDERS``, found by :func:`kerasplm.registry.legacy_builders`: a
``legacy.py`` in the family's folder, the only code that still reads the old ``model`` sections) and writes the new ``config.json`` there; the source is left as
it was. The converted run loads with :func:`kerasplm.runs.load_run` and resumes like any other.

>>> convert_run("runs/old", "runs/new")
"""
import os
import shutil

from kerasplm import registry
from kerasplm.runs.run_dir import FORMAT_VERSION, RunDir, RunDirError, load_run

__all__ = ["convert_run", "convert_run_command"]

def convert_run(source, out):
    """Convert the run directory ``source`` (format 1 or 2) into ``out`` (a new directory) in run format 3;
    returns ``out``'s :class:`RunDir`. Raises :class:`RunDirError` (one line) when ``source`` is not an old run or
    ``out`` is not free."""
    old = RunDir(source)
    config = old.read_config(legacy=True)
    if config["format_version"] == FORMAT_VERSION:
        raise RunDirError(f"{old.config_path}: already run format {FORMAT_VERSION}; nothing to convert")
    builders = registry.legacy_builders()
    build = builders.get(config["family"])
    if build is None:
        raise RunDirError(f"{old.config_path}: no converter for family {config['family']!r} "
                          f"(known: {', '.join(sorted(builders))})")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise RunDirError(f"{out} exists and is not an empty directory: choose a new --out")
    if os.path.abspath(out) == os.path.abspath(source):
        raise RunDirError(f"--out must differ from --from ({out}): the old run is kept as it is")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if os.path.isdir(out):
        os.rmdir(out)
    shutil.copytree(source, out, ignore=shutil.ignore_patterns(RunDir.CONFIG, RunDir.LOCK, ".tmp-*"))
    new = RunDir(out)
    try:
        model, preprocessor = build(new, config)   # assets resolved in the copy, so they are stored relative to it
        new.write_config(config["family"], config.get("task"), config["preset"], model, config["options"],
                         assets=config.get("assets"), preprocessor=preprocessor)
        load_run(out)   # the new config rebuilds the model and the checkpoint restores into it
    except Exception:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return new


def convert_run_command(source, out):
    """``kerasplm convert run``: print the converted run's directory."""
    convert_run(source, out)
    print(out)
