"""SavedModel export with TF Serving signatures (``<model_base_path>/<version>/``, written atomically).

>>> path = export_translator(translator, "export/translator")   # -> ".../export/translator/1"
>>> load_and_translate(path, ["Hace mucho frío aquí."])

:mod:`kerasplm.export.base` is what every family shares (:class:`ExportModule`: variable tracking for TF1-style
loaders; :func:`save_version`: metadata signature, ``assets.extra/kerasplm.json``, atomic versions and the
overwrite rule); each family's module (:mod:`kerasplm.export.translator`, ...) holds only its signatures.
Serving: ``kerasplm serve`` (:mod:`kerasplm.serving`) or TensorFlow Serving (export/README.md).
"""
from kerasplm.export.base import ExportModule, read_metadata, save_version
from kerasplm.export.classifier import ClassifierModule, export_classifier
from kerasplm.export.embedder import EmbedderModule, export_embedder
from kerasplm.export.translator import TranslatorModule, export_translator, load_and_translate

__all__ = ["ExportModule", "save_version", "read_metadata", "TranslatorModule", "export_translator",
           "load_and_translate", "EmbedderModule", "export_embedder", "ClassifierModule", "export_classifier"]
