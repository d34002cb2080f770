"""The registry of what the model families offer on the command line (ground floor, no TensorFlow).

Each family declares, in one manifest module that imports no TensorFlow (``kerasplm/families/<family>.py``):

- ``COMMANDS``: a list of :class:`Command` — every ``kerasplm train|finetune|export|convert ...`` subcommand
  and every top-level one (``translate``, ``generate`` ...): its help, its options dataclass (the flags), and
  the function that runs it, named as ``"module:function"`` so that nothing heavy is imported until it runs.

Runs need no registration: :func:`kerasplm.runs.load_run` rebuilds any run from the Keras configs its
``config.json`` stores, importing only modules of kerasplm or of a manifest's package (:func:`manifest_modules`).

The registry finds the manifests itself: every module of the :mod:`kerasplm.families` package, then the
modules named in the ``KERASPLM_FAMILIES`` environment variable (comma-separated; a family living outside
kerasplm, such as the toy family of the tests), then those added with :func:`add_manifest`. Nothing else
is edited to add a family: ``kerasplm --help`` and its subcommands come from here.
"""
import dataclasses
import importlib
import os
import pkgutil

__all__ = ["VERBS", "Command", "commands", "manifest_modules", "add_manifest", "resolve"]

# Subcommand groups: ``kerasplm <verb> <name>``; a command of verb "" is ``kerasplm <name>``.
VERBS = {"train": "train a model from scratch (or resume a run)",
         "finetune": "fine-tune a pretrained run on a task",
         "export": "export a run as a TF Serving SavedModel (strings in)",
         "convert": "convert pretrained weights into a run directory",
         "index": "build or extend a vector index of a corpus (Faiss) for `kerasplm search`"}
_FAMILIES_PACKAGE = "kerasplm.families"
_ENV = "KERASPLM_FAMILIES"


@dataclasses.dataclass(frozen=True)
class Command:
    """One subcommand.

    ``options``: a :class:`kerasplm.options.JobOptions` subclass (its fields are the flags; importable without
    TensorFlow). ``run``: ``"module:function"``. For ``train`` and ``finetune`` (a job), and a top-level command
    declared with ``job=True``, it is called as
    ``job(out, **options_given)`` and returns the job's summary dict (``stop_reason`` "sigterm" makes the
    command exit 143); the command adds ``--out`` (default ``out_default``; required when None) and, when
    neither ``--steps`` nor ``--time-budget`` is given, ``default_time_budget`` seconds. Any other command's
    function is called with every option as a keyword and returns an exit status (None = 0).
    ``cli_defaults``: option values the command line uses where the Python API's default differs.
    """

    verb: str
    name: str
    help: str
    options: type
    run: str
    description: str = ""
    out_default: str = None
    default_time_budget: float = None
    cli_defaults: dict = dataclasses.field(default_factory=dict)
    job: bool = False   # a top-level command (verb "") that runs a job, as train and finetune do (``distill``)

    @property
    def is_job(self):
        return self.job or self.verb in ("train", "finetune")

    @property
    def path(self):
        return f"{self.verb} {self.name}".strip()


_extra_manifests = []


def add_manifest(module_name):
    """Register the manifest module ``module_name`` (its ``COMMANDS``) in this process."""
    if module_name not in _extra_manifests:
        _extra_manifests.append(module_name)


def manifest_modules():
    """The names of every family manifest module (kerasplm's, then ``KERASPLM_FAMILIES``'s, then added ones)."""
    return _manifest_names()


def _manifest_names():
    package = importlib.import_module(_FAMILIES_PACKAGE)
    names = [f"{_FAMILIES_PACKAGE}.{m.name}" for m in pkgutil.iter_modules(package.__path__)
             if not m.name.startswith("_")]
    names += [n.strip() for n in os.environ.get(_ENV, "").split(",") if n.strip()]
    return list(dict.fromkeys(names + _extra_manifests))


def _manifests():
    modules = []
    for name in _manifest_names():
        try:
            modules.append(importlib.import_module(name))
        except ImportError as e:
            raise ImportError(f"family manifest {name!r} (from {_ENV} or {_FAMILIES_PACKAGE}) cannot be imported "
                              f"({e})") from e
    return modules


def commands():
    """Every registered :class:`Command`, in manifest order; two commands with one path are an error."""
    found, seen = [], {}
    for manifest in _manifests():
        for command in getattr(manifest, "COMMANDS", ()):
            if command.path in seen:
                raise ValueError(f"command {command.path!r} is declared by both {seen[command.path]} and "
                                 f"{manifest.__name__}")
            seen[command.path] = manifest.__name__
            found.append(command)
    return found


def resolve(target):
    """``"module:attribute"`` -> the attribute (importing the module); anything else is returned as it is."""
    if not isinstance(target, str):
        return target
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)
