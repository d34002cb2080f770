"""A run's model and preprocessor as Keras configs: what ``config.json`` stores under ``model`` and ``preprocessor``.

Every object a run stores is registered with :func:`serializable` (``keras.saving.register_keras_serializable`` in
package ``kerasplm``) and has ``get_config``/``from_config``; :func:`serialize` writes it as Keras does
(``{"module", "class_name", "config", "registered_name"}``) and :func:`deserialize` rebuilds it, without weights (the
checkpoint holds those). So one loader reads every family's runs: labels, pooling, a classifier's sentence-pair
input... live in the task model's own config, and nothing re-parses a family's config by hand.

**Assets.** An object that reads a file (a vocabulary, merges, a SentencePiece model) stores the file's name from its
``get_config`` through :func:`asset_name` and resolves it in ``from_config`` through :func:`asset_path`. While a run
is written or read (:func:`asset_root`, entered by :func:`serialize` / :func:`deserialize`), files inside the run
directory are stored relative to it, so a run directory can be moved or copied; elsewhere paths stay as given.

**Which classes.** Keras finds a registered class once its module is imported; :func:`deserialize` imports the
module the stored config names, but only a module of kerasplm or of a family manifest's package
(``KERASPLM_FAMILIES``), never an arbitrary one a damaged or hostile ``config.json`` names. A module that has
moved since the run was written is read from where it lives now: each family's manifest lists its
``FORMER_MODULES`` (:func:`kerasplm.registry.former_modules`).
"""
import contextlib
import copy
import importlib
import os
import threading

import keras

from kerasplm import registry

__all__ = ["serializable", "serialize", "deserialize", "attach_preprocessor", "asset_root", "asset_name", "asset_path"]

_state = threading.local()
# Keys Keras adds for saving whole models (.keras files); a run rebuilds and restores its objects itself.
_SAVING_ONLY_KEYS = ("build_config", "compile_config")


def serializable(cls):
    """Class decorator: register ``cls`` for run configs (``registered_name`` "kerasplm>ClassName")."""
    return keras.saving.register_keras_serializable(package="kerasplm")(cls)


@contextlib.contextmanager
def asset_root(directory):
    """Within this block, :func:`asset_name` and :func:`asset_path` are relative to ``directory``."""
    previous = getattr(_state, "root", None)
    _state.root = os.path.abspath(os.fspath(directory))
    try:
        yield
    finally:
        _state.root = previous


def asset_name(path):
    """How a ``get_config`` stores the file ``path``: relative to the run being written when inside it."""
    if path is None:
        return None
    path = os.fspath(path)
    root = getattr(_state, "root", None)
    if root is not None:
        absolute = os.path.abspath(path)
        if os.path.commonpath([absolute, root]) == root:
            return os.path.relpath(absolute, root)
    return path


def asset_path(name):
    """The file a ``from_config`` reads for a stored ``name``: relative names are inside the run being read."""
    if name is None:
        return None
    name = os.fspath(name)
    root = getattr(_state, "root", None)
    if root is not None and not os.path.isabs(name):
        return os.path.join(root, name)
    return name


def _strip_saving_keys(value):
    if isinstance(value, dict):
        return {k: _strip_saving_keys(v) for k, v in value.items() if k not in _SAVING_ONLY_KEYS}
    if isinstance(value, list):
        return [_strip_saving_keys(v) for v in value]
    return value


def serialize(obj, run_path):
    """``obj``'s Keras config (JSON-ready), files inside ``run_path`` named relative to it; None stays None."""
    if obj is None:
        return None
    with asset_root(run_path):
        return _strip_saving_keys(keras.saving.serialize_keras_object(obj))


def _allowed_module(module):
    packages = {"kerasplm"} | {name.split(".")[0] for name in registry.manifest_modules()}
    return isinstance(module, str) and module.split(".")[0] in packages


def _import_classes(spec, moved):
    """Import the modules of every registered class ``spec`` names (nested configs included); a module of
    ``moved`` (old name -> new name) is imported under its new name, and the spec is updated to it."""
    if isinstance(spec, dict):
        module = spec.get("module")
        if "class_name" in spec and "config" in spec and _allowed_module(module):
            if module in moved:
                module = spec["module"] = moved[module]
            importlib.import_module(module)
        for value in spec.values():
            _import_classes(value, moved)
    elif isinstance(spec, list):
        for value in spec:
            _import_classes(value, moved)


def deserialize(spec, run_path):
    """The object of a stored Keras config (no weights), files resolved inside ``run_path``; None stays None.

    Raises ``ValueError`` with Keras' or the class's message when the config does not describe a known object.
    """
    if spec is None:
        return None
    if not isinstance(spec, dict) or "class_name" not in spec or "config" not in spec:
        raise ValueError("not a Keras object config (needs 'class_name' and 'config')")
    spec = copy.deepcopy(spec)
    try:
        _import_classes(spec, registry.former_modules())
    except ImportError as e:
        raise ValueError(f"cannot import {spec.get('module')!r} ({e})") from None
    with asset_root(run_path):
        try:
            return keras.saving.deserialize_keras_object(spec)
        except (TypeError, ValueError, KeyError) as e:
            message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(f"{spec.get('class_name')}: {message}") from None


def attach_preprocessor(model, preprocessor):
    """Set ``model.preprocessor``. A task model (:class:`kerasplm.models.base.Task`) has the attribute and tracks it
    as it always did; on any other model it is set untracked, so that the checkpoint's object graph stays the
    model's own (a tracked tokenizer would add its tables' variables to every checkpoint of the model)."""
    if "preprocessor" in vars(model) or hasattr(type(model), "preprocessor"):
        model.preprocessor = preprocessor
    else:
        object.__setattr__(model, "preprocessor", preprocessor)
    return model
