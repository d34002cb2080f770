"""GPT (Radford et al. 2018) and GPT-2: decoder-only language models, their classifier, generation and export.

``causal_lm.py`` (``CausalLMConfig``, ``DecoderOnlyBackbone``, ``CausalLM``), ``model.py`` (GPT"s config,
presets, ``GPTBackbone``, ``GPT``), ``generator.py`` (``TextGenerator``), ``classifier.py`` and
``preprocessor.py`` (GPT-1"s fine-tuning head and its input transformations), ``job.py`` (``kerasplm train gpt``),
``classifier_job.py``, ``export.py``, ``convert.py`` (HF GPT-2), ``legacy.py``, ``manifest.py``.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "causal_lm": ["CausalLMConfig", "DecoderOnlyBackbone", "CausalLM"],
    "model": ["GPTConfig", "GPTBackbone", "GPT", "PRESETS"],
    "generator": ["TextGenerator", "load_text_generator", "perplexity"],
    "classifier": ["GPTClassifier"],
    "preprocessor": ["GPTClassifierPreprocessor"],
    "job": ["GPTJob", "train_gpt"],
    "classifier_job": ["GPTClassifierJob", "finetune_gpt_classifier", "load_gpt_classifier"],
    "export": ["GeneratorModule", "export_generator", "export_generator_run", "load_and_generate"],
    "convert": ["load_gpt2"],
})
