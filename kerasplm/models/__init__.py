"""The model families, one folder each (``kerasplm/models/<family>/``), over the shared bases of this package.

Shared here: :mod:`kerasplm.models.base` (``ConfigMixin``, ``Backbone``, ``Task``, ``Preprocessor``),
:mod:`kerasplm.models.presets` (the one preset registry). Each family's
folder holds its backbone, task models, jobs, exports, converters and its ``manifest.py`` (its commands and
presets, found by :mod:`kerasplm.registry`); its ``__init__.py`` is its public API::

    from kerasplm.models.bert import BertBackbone, BertClassifier
    from kerasplm.models.gpt import GPT, TextGenerator

Nothing here names a family, and importing this package imports no TensorFlow (``kerasplm --help`` reads every
family's manifest, and a submodule's import runs its packages' ``__init__.py`` first).
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "base": ["Backbone", "ConfigMixin", "Preprocessor", "Task"],
    "presets": ["get_preset", "list_presets", "register_presets"],
})
