"""RoBERTa (Liu et al. 2019): HuggingFace RoBERTa weights as ``bert`` runs. Base family: ``bert``.

``convert.py`` (``kerasplm convert roberta``: BERT's encoder with positions from ``padding_idx + 1`` and
GPT-2's byte-level BPE), ``manifest.py``.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "convert": ["load_hf_roberta", "convert_roberta_to_run"],
})
