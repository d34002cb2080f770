"""ELMo (Peters et al. 2018): the character-CNN biLM, its scalar mix, a classifier, jobs, export, bilm-tf import.

``model.py`` (``ElmoConfig``, presets, ``ElmoBiLM``, ``ElmoLanguageModel``, ``ScalarMix``, ``ElmoEmbedder``),
``runs.py`` (``Elmo``: a run's embedder with its vocabulary), ``classifier.py``, ``job.py``
(``kerasplm train elmo``), ``classifier_job.py``, ``export.py``, ``convert.py``, ``legacy.py``, ``manifest.py``.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "model": ["ElmoConfig", "ElmoBiLM", "ElmoLanguageModel", "ScalarMix", "ElmoEmbedder"],
    "runs": ["Elmo", "load_elmo"],
    "classifier": ["ElmoClassifier"],
    "job": ["ElmoJob", "train_elmo"],
    "classifier_job": ["ElmoClassifierJob", "finetune_elmo_classifier", "load_elmo_classifier"],
    "export": ["ElmoModule", "export_elmo"],
    "convert": ["load_bilm_tf", "convert_elmo_to_run"],
})
