"""The export base shared by every family: SavedModels with TF Serving signatures, written atomically.

:mod:`kerasplm.export.base` (:class:`ExportModule`: variable tracking for TF1-style loaders; :func:`save_version`:
metadata signature, ``assets.extra/kerasplm.json``, atomic versions and the overwrite rule),
:mod:`kerasplm.export.atomic` (``<model_base_path>/<version>/`` written in a sibling directory, then renamed),
:mod:`kerasplm.export.warmup` (``assets.extra/tf_serving_warmup_requests``) and :mod:`kerasplm.export.classifier`
(the classifier export every family's classifier runs share). A family's own signatures live in its folder
(``kerasplm.models.translator.export``, ``kerasplm.models.gpt.export`` ...).
Serving: ``kerasplm serve`` (:mod:`kerasplm.serving`) or TensorFlow Serving (export/README.md).
"""
from kerasplm.export.base import ExportModule, read_metadata, save_version

__all__ = ["ExportModule", "save_version", "read_metadata"]
