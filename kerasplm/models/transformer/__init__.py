"""The seed's Transformer translator (Vaswani et al. 2017; the TensorFlow tutorial's names and call).

``model.py``: ``TransformerConfig``, presets, ``Encoder``, ``Decoder``, ``Transformer`` and the translation loss.
The job that trains it, its ``translate`` command and export live in :mod:`kerasplm.models.translator`.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "model": ["TransformerConfig", "Encoder", "Decoder", "Transformer", "translation_loss", "real_token_loss_sums", "num_parameters", "PRESETS"],
})
