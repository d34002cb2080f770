"""The translation task: one job, one ``Translator`` and one export for every encoder-decoder preset.

``presets.py`` (the Transformer's and the RNN's presets as one ``--preset`` choice), ``job.py``
(``kerasplm train translator``, ``Translator``, BLEU), ``export.py`` (``kerasplm export translator``),
``legacy.py`` (runs of format 1-2), ``manifest.py`` (commands). Bases: ``transformer``, ``rnn_seq2seq``.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "job": ["Translator", "TranslatorJob", "train_translator", "load_translator", "corpus_bleu"],
    "export": ["TranslatorModule", "export_translator", "export_translator_run", "load_and_translate"],
    "presets": ["PRESETS", "build_model", "model_class", "is_recurrent"],
})
