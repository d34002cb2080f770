"""The registry of the model families: their commands, presets and history (ground floor, no TensorFlow).

A family is one folder, ``kerasplm/models/<family>/``; its ``manifest.py`` imports no TensorFlow (only
:mod:`kerasplm.options`, this module and its base families' manifests) and declares:

- ``COMMANDS``: a list of :class:`Command` — every ``kerasplm train|finetune|export|convert ...`` subcommand
  and every top-level one (``translate``, ``generate`` ...): its help, its options dataclass (the flags), and
  the function that runs it, named as ``"module:function"`` so that nothing heavy is imported until it runs.
- ``PRESET_MODULES`` (optional): the modules whose import registers the family's presets
  (:func:`kerasplm.models.presets.register_presets`); ``kerasplm presets`` and ``get_preset`` import them.
- ``BASES`` (optional): the families whose public modules it imports (ELECTRA: ``("bert",)``), checked by the
  layering contracts.
- ``FORMER_MODULES`` (optional): ``{old module: new module}`` for classes that moved, so that runs written
  before the move still load (their ``config.json`` names the module a class was in).
- ``LEGACY_BUILDERS`` (optional): ``"module:attribute"``, the family's builders of runs of format 1-2
  (``kerasplm convert run``).

Runs need no registration: :func:`kerasplm.runs.load_run` rebuilds any run from the Keras configs its
``config.json`` stores, importing only modules of kerasplm or of a manifest's package (:func:`manifest_modules`).

The registry finds the manifests itself: the ``manifest`` module of every package under :mod:`kerasplm.models`,
the ground floor's own (``kerasplm.runs.manifest``: ``kerasplm convert run``), then the modules named in the
``KERASPLM_FAMILIES`` environment variable (comma-separated; a family living outside kerasplm, such as the toy
family of the tests), then those added with :func:`add_manifest`. Nothing else is edited to add a family:
``kerasplm --help``, its subcommands and ``kerasplm presets`` come from here.
"""
import dataclasses
import importlib
import os
import pkgutil

__all__ = ["VERBS", "Command", "commands", "manifest_modules", "manifests", "add_manifest", "resolve",
           "preset_modules", "former_modules", "legacy_builders", "family_of_manifest"]

# Subcommand groups: ``kerasplm <verb> <name>``; a command of verb "" is ``kerasplm <name>``.
VERBS = {"train": "train a model from scratch (or resume a run)",
         "finetune": "fine-tune a pretrained run on a task",
         "export": "export a run as a TF Serving SavedModel (strings in)",
         "convert": "convert pretrained weights into a run directory",
         "index": "build or extend a vector index of a corpus (Faiss) for `kerasplm search`"}
_MODELS_PACKAGE = "kerasplm.models"
_FLOOR_MANIFESTS = ("kerasplm.runs.manifest",)
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


def _family_folders():
    """The packages under ``kerasplm/models`` that hold a ``manifest.py``, found on disk (nothing imported)."""
    package = importlib.import_module(_MODELS_PACKAGE)
    return [m.name for m in pkgutil.iter_modules(package.__path__)
            if m.ispkg and not m.name.startswith("_")
            and os.path.isfile(os.path.join(m.module_finder.path, m.name, "manifest.py"))]


def _manifest_names():
    names = [f"{_MODELS_PACKAGE}.{folder}.manifest" for folder in sorted(_family_folders())]
    names += list(_FLOOR_MANIFESTS)
    names += [n.strip() for n in os.environ.get(_ENV, "").split(",") if n.strip()]
    return list(dict.fromkeys(names + _extra_manifests))


def manifests():
    """Every manifest module, imported (no TensorFlow is)."""
    modules = []
    for name in _manifest_names():
        try:
            modules.append(importlib.import_module(name))
        except ImportError as e:
            raise ImportError(f"family manifest {name!r} (from {_ENV} or {_MODELS_PACKAGE}) cannot be imported "
                              f"({e})") from e
    return modules


def family_of_manifest(manifest):
    """The family a manifest module declares: its folder's name (``kerasplm.models.bert.manifest`` -> "bert"), or
    its own ``FAMILY`` attribute when set (a family outside kerasplm)."""
    name = getattr(manifest, "FAMILY", None)
    if name:
        return name
    parts = manifest.__name__.split(".")
    return parts[-2] if parts[-1] == "manifest" and len(parts) > 1 else parts[-1]


def preset_modules():
    """The modules whose import registers every family's presets, in manifest order."""
    return list(dict.fromkeys(m for manifest in manifests() for m in getattr(manifest, "PRESET_MODULES", ())))


def former_modules():
    """``{old module: new module}`` over every manifest: where the classes of runs written before a move live now."""
    moved = {}
    for manifest in manifests():
        moved.update(getattr(manifest, "FORMER_MODULES", {}))
    return moved


def legacy_builders():
    """``{run family: build(run, config) -> (model, preprocessor)}`` for runs of format 1-2, over every manifest."""
    builders = {}
    for manifest in manifests():
        target = getattr(manifest, "LEGACY_BUILDERS", None)
        if target:
            builders.update(resolve(target))
    return builders


def commands():
    """Every registered :class:`Command`, in manifest order; two commands with one path are an error."""
    found, seen = [], {}
    for manifest in manifests():
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
