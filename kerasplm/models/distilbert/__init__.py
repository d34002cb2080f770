"""Knowledge distillation into a smaller BERT (Hinton et al. 2015; DistilBERT, TinyBERT). Base family: ``bert``.

``distillation.py`` (the soft-target, hidden-state and attention losses, student initialisation,
augmentation), ``distillation_job.py`` (``kerasplm distill``), ``convert.py`` (``kerasplm convert distilbert``:
HuggingFace DistilBERT weights as a ``bert`` run), ``manifest.py``.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "distillation": ["DistillationSettings", "DistillationProjections", "distillation_loss_sums", "student_config", "Augmentation"],
    "distillation_job": ["DistillationJob", "ClassifierDistillationJob", "TaggerDistillationJob", "distill"],
    "convert": ["load_hf_distilbert", "convert_distilbert_to_run"],
})
