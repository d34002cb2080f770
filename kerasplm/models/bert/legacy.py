"""Format-2 runs of the BERT family: ``bert`` (converted or pretrained), ``bert_classifier``, ``bert_tagger``,
``bert_qa`` (``bert_simcse``: :mod:`kerasplm.models.sentence_embedding.legacy`, on these helpers).

Their ``model`` sections: a ``bert`` run's is the :class:`BertConfig` itself (task ``backbone``: the checkpoint's
``model`` is the backbone; task ``pretraining``: the whole :class:`BertPretrainer`, its ``sentence_task`` in the
options); a task run's holds the backbone's config under ``backbone`` plus the head's settings (the classifier's
``num_labels``, ``labels``, ``dropout``, ``pooling``; the tagger's ``labels`` and ``lower_case``; SimCSE's
``pooling``, ``mlp``, ``temperature``; the question answerer's ``lower_case``), the rest in the options. Every run
has its vocabulary as asset ``vocab``.
"""
from kerasplm.models.bert.backbone import BertBackbone, BertConfig, bert_run_preprocessor
from kerasplm.models.bert.pretrainer import PRETRAINING_TASK, BertPretrainer
from kerasplm.models.bert.question_answering import BertQuestionAnswerer, QuestionAnswerPreprocessor
from kerasplm.models.bert.tagger import BertTaggerPreprocessor, BertTokenClassifier
from kerasplm.models.bert.classifier import POOLINGS, BertClassifier
from kerasplm.text import BertPreprocessor, BertTokenizer, WordPieceTokenizer


def parsed_section(run, what, parse):
    """``parse()``, its KeyError/TypeError/ValueError a one-line error naming config.json."""
    try:
        return parse()
    except (KeyError, TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"'model' is not a {what} config ({e})") from None


def legacy_backbone(section):
    return BertBackbone.from_config_object(BertConfig(**section).validate())


def build_bert(run, config):
    """A converted run (task ``backbone``) or a pretraining run (task ``pretraining``: the whole pretrainer)."""
    backbone = parsed_section(run, "BERT", lambda: legacy_backbone(config["model"]))
    options = config["options"]
    if config.get("task") == PRETRAINING_TASK:
        # The corpus was tokenized by tensorflow-text's WordPiece tokenizer (uncased): fill-mask reads the same.
        tokenizer = WordPieceTokenizer(run.asset(config, "vocab"))
        model = BertPretrainer(backbone, sentence_task=options.get("sentence_task", "nsp"), name=config["preset"])
    else:
        tokenizer = BertTokenizer(run.asset(config, "vocab"), lower_case=bool(options.get("lower_case", True)))
        model = backbone
    return model, bert_run_preprocessor(tokenizer, backbone.config)


def build_classifier(run, config):
    def parse():
        model = config["model"]
        pooling = model.get("pooling", "cls")             # runs written before the option pooled [CLS]
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r} is not one of {', '.join(POOLINGS)}")
        return (legacy_backbone(model["backbone"]), list(model["labels"]), int(model["num_labels"]), float(model["dropout"]),
                pooling)

    backbone, labels, num_labels, dropout, pooling = parsed_section(run, "BERT classifier", parse)
    options = config["options"]
    tokenizer = BertTokenizer(run.asset(config, "vocab"), lower_case=bool(options.get("lower_case", True)))
    preprocessor = BertPreprocessor(tokenizer, int(options.get("max_length", 128)))
    model = BertClassifier(backbone, num_labels, preprocessor=preprocessor, dropout=dropout, pooling=pooling,
                           labels=labels, pair_input=options.get("pair_col") is not None)
    return model, preprocessor


def build_tagger(run, config):
    def parse():
        model = config["model"]
        return legacy_backbone(model["backbone"]), list(model["labels"]), bool(model["lower_case"])

    backbone, labels, lower_case = parsed_section(run, "BERT tagger", parse)
    options = config["options"]
    model = BertTokenClassifier(backbone, len(labels), dropout=options.get("dropout", 0.1),
                                crf=bool(options.get("crf", False)), labels=labels)
    tokenizer = WordPieceTokenizer(run.asset(config, "vocab"), lower_case=lower_case)
    return model, BertTaggerPreprocessor(tokenizer, options["sequence_length"])


def build_qa(run, config):
    def parse():
        model = config["model"]
        return legacy_backbone(model["backbone"]), bool(model["lower_case"])

    backbone, lower_case = parsed_section(run, "BERT question answering", parse)
    options = config["options"]
    model = BertQuestionAnswerer(backbone, max_answer_length=int(options["max_answer_length"]),
                                 n_best=int(options["n_best"]))
    tokenizer = BertTokenizer(run.asset(config, "vocab"), lower_case=lower_case)
    preprocessor = QuestionAnswerPreprocessor(tokenizer, int(options["sequence_length"]), int(options["doc_stride"]),
                                              int(options["max_query_length"]), pad_to_length=False)
    return model, preprocessor


BUILDERS = {"bert": build_bert, "bert_classifier": build_classifier, "bert_tagger": build_tagger, "bert_qa": build_qa}
