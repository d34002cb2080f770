"""ULMFiT (Howard and Ruder 2018) on the AWD-LSTM (Merity et al. 2018).

``awd_lstm.py`` (config, presets, backbone, language model, ``ULMFiTClassifier``), ``job.py`` (the three
stages: ``kerasplm train ulmfit-lm``, ``finetune ulmfit-lm``, ``finetune ulmfit-classifier``), ``manifest.py``.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "awd_lstm": ["AWDLSTMConfig", "AWDLSTMBackbone", "AWDLSTMLanguageModel", "ULMFiTClassifier", "PRESETS"],
    "job": ["ULMFiTLanguageModelJob", "ULMFiTClassifierJob", "train_ulmfit_lm", "finetune_ulmfit_lm", "finetune_ulmfit_classifier", "load_ulmfit_classifier"],
})
