"""ALBERT (Lan et al. 2020): HuggingFace ALBERT weights as ``bert`` runs. Base family: ``bert``.

``convert.py`` (``kerasplm convert albert``: BERT's encoder with a factorized embedding, one shared block and a
SentencePiece vocabulary), ``manifest.py``. The ``albert_base`` preset (a ``BertConfig``) is BERT's.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "convert": ["load_hf_albert", "convert_albert_to_run"],
})
