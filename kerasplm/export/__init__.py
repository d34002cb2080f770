"""SavedModel export with TF Serving signatures (``<model_base_path>/<version>/``, written atomically).

>>> path = export_translator(translator, "export/translator")   # -> ".../export/translator/1"
>>> load_and_translate(path, ["Hace mucho frío aquí."])
>>> export_generator(load_text_generator("runs/gpt"), "export/gpt")     # GPT: generate + score signatures

:mod:`kerasplm.export.base` is what every family shares (:class:`ExportModule`: variable tracking for TF1-style
loaders; :func:`save_version`: metadata signature, ``assets.extra/kerasplm.json``, atomic versions and the
overwrite rule); each family's module (:mod:`kerasplm.export.translator`, ...) holds only its signatures.
Serving: ``kerasplm serve`` (:mod:`kerasplm.serving`) or TensorFlow Serving (export/README.md).
"""
from kerasplm.export.base import ExportModule, read_metadata, save_version
from kerasplm.export.classifier import ClassifierModule, export_classifier
from kerasplm.export.elmo import ElmoModule, export_elmo
from kerasplm.export.embedder import EmbedderModule, export_embedder
from kerasplm.export.generator import GeneratorModule, export_generator, load_and_generate
from kerasplm.export.translator import TranslatorModule, export_translator, load_and_translate

__all__ = ["ExportModule", "save_version", "read_metadata", "ElmoModule", "export_elmo", "TranslatorModule",
           "export_translator", "load_and_translate", "GeneratorModule", "export_generator", "load_and_generate",
           "EmbedderModule", "export_embedder", "ClassifierModule", "export_classifier"]
