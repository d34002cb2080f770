"""The seeds" RNN encoder-decoder (Cho et al. 2014; Bahdanau et al. 2015; Luong et al. 2015).

``model.py``: ``RNNSeq2SeqConfig``, presets, ``RNNEncoder``, ``RNNSeq2Seq``. Base family: ``transformer`` (its
loss and vocabulary check). Trained, decoded and exported by :mod:`kerasplm.models.translator`.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "model": ["RNNSeq2SeqConfig", "RNNEncoder", "RNNSeq2Seq", "num_parameters", "PRESETS"],
})
