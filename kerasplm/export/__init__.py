"""SavedModel export with TF Serving signatures (``<model_base_path>/<version>/``, written atomically).

>>> path = export_translator(translator, "export/translator")   # -> ".../export/translator/1"
>>> load_and_translate(path, ["Hace mucho frío aquí."])

Serving: ``kerasplm serve`` (:mod:`kerasplm.serving`) or TensorFlow Serving (export/README.md).
"""
from kerasplm.export.translator import (TranslatorModule, export_translator, load_and_translate,
                                        read_metadata)

__all__ = ["TranslatorModule", "export_translator", "load_and_translate", "read_metadata"]
