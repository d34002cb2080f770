"""The character-level RNN language model (Karpathy's char-rnn; seed 001 section 2.2).

``model.py`` (config, presets, backbone, language model), ``job.py`` (``kerasplm train char-rnn``),
``manifest.py``. Base family: ``gpt`` (its causal-LM decoding, ``TextGenerator`` and export).
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "model": ["CharRNNConfig", "CharRNNBackbone", "CharRNNLanguageModel", "PRESETS"],
    "job": ["CharRNNJob", "train_char_rnn"],
})
