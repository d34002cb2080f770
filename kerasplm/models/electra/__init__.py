"""ELECTRA (Clark et al. 2020): replaced-token detection on a BERT encoder. Base family: ``bert``.

``model.py`` (``ElectraConfig``, presets, ``ElectraDiscriminator``, ``ElectraPretrainer``),
``pretraining_job.py`` (``kerasplm train electra``: BERT pretraining's job with four hooks overridden),
``convert.py`` (``kerasplm convert electra``: HuggingFace discriminators and generators as ``bert`` runs),
``manifest.py``.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "model": ["ElectraConfig", "ElectraDiscriminator", "ElectraPretrainer", "num_parameters"],
    "pretraining_job": ["ElectraPretrainingJob", "train_electra"],
    "convert": ["load_hf_electra", "convert_electra_to_run"],
})
