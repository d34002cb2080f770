"""A package's public API, imported on first use (ground floor, no TensorFlow).

A family's ``__init__.py`` lists its public names by the module that defines them and hands the table to
:func:`lazy_exports`. ``from kerasplm.models.bert import BertBackbone`` then imports
``kerasplm.models.bert.backbone`` at that moment, while ``kerasplm.models.bert.manifest`` (which the command line
reads for ``kerasplm --help``) is imported without TensorFlow: importing a package's submodule always runs the
package's ``__init__.py`` first, so that file must stay light. :mod:`kerasplm.runs` does the same for ``kerasplm.runs.manifest``.
"""
import importlib

__all__ = ["lazy_exports"]


def lazy_exports(package, names_by_module):
    """``(__getattr__, __dir__, __all__)`` for the package named ``package``.

    ``names_by_module``: ``{"backbone": ["BertBackbone", "BertConfig"], ...}``, modules relative to the package.
    """
    where = {name: module for module, names in names_by_module.items() for name in names}

    def __getattr__(name):
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__():
        return sorted(where)

    return __getattr__, __dir__, sorted(where)
