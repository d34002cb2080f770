"""BERT (Devlin et al. 2019): backbone, pretraining and every fine-tuning head, with their jobs and exports.

``backbone.py`` (config, presets, ``BertBackbone``), ``pretrainer.py`` (MLM + NSP), ``classifier.py``,
``tagger.py``, ``question_answering.py``, ``multiple_choice.py``; jobs ``pretraining_job.py``,
``classifier_job.py``, ``tagger_job.py``, ``question_answering_job.py`` (metrics: ``ner_metrics.py``,
``squad_metrics.py``); exports ``fill_mask.py``, ``tagger_export.py``, ``question_answering_export.py`` (the
classifier's is the shared :mod:`kerasplm.export.classifier`); ``convert.py`` (HF and Google checkpoints, and
the weight plans and run writing the variants' converters share: ``distilbert``, ``electra``, ``roberta``,
``albert``), ``legacy.py``, ``manifest.py``.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "backbone": ["BertConfig", "BertBackbone", "num_parameters", "bert_run_preprocessor"],
    "pretrainer": ["BertPretrainer", "BertMaskedLMHead"],
    "classifier": ["BertClassifier", "SentenceEncoder", "classification_metrics"],
    "tagger": ["BertTokenClassifier", "BertTaggerPreprocessor"],
    "question_answering": ["BertQuestionAnswerer", "QuestionAnswerPreprocessor"],
    "multiple_choice": ["BertMultipleChoice", "BertMultipleChoicePreprocessor"],
    "runs": ["bert_run_parts"],
    "finetuning": ["BertFineTuningJob", "BertClassificationJob"],
    "pretraining_job": ["BertPretrainingJob", "train_bert"],
    "classifier_job": ["BertClassifierJob", "finetune_bert_classifier", "load_bert_classifier"],
    "tagger_job": ["BertTagger", "finetune_bert_tagger", "load_bert_tagger"],
    "question_answering_job": ["BertQA", "finetune_bert_qa", "load_bert_qa"],
    "fill_mask": ["FillMaskModule", "export_fill_mask", "export_fill_mask_run"],
    "tagger_export": ["TaggerModule", "export_tagger", "export_tagger_run"],
    "question_answering_export": ["QAModule", "export_qa", "export_qa_run"],
    "convert": ["load_hf_bert", "load_hf_bert_pretrainer", "load_tf_bert", "save_tf_bert", "convert_bert_to_run"],
})
