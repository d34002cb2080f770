"""Format-2 runs of SimCSE (``bert_simcse``): the backbone's config under ``model.backbone`` plus ``pooling``,
``mlp`` and ``temperature``; the vocabulary as asset ``vocab``. BERT's format-2 helpers read the sections."""
from kerasplm.models.bert.legacy import legacy_backbone, parsed_section
from kerasplm.models.sentence_embedding.simcse import BertSimCSE
from kerasplm.text import BertPreprocessor, BertTokenizer


def build_simcse(run, config):
    def parse():
        model = config["model"]
        return legacy_backbone(model["backbone"]), str(model["pooling"]), bool(model["mlp"]), float(model["temperature"])

    backbone, pooling, mlp, temperature = parsed_section(run, "SimCSE", parse)
    options = config["options"]
    tokenizer = BertTokenizer(run.asset(config, "vocab"), lower_case=bool(options.get("lower_case", True)))
    preprocessor = BertPreprocessor(tokenizer, int(options.get("max_length", 32)))
    return BertSimCSE(backbone, pooling, temperature, mlp, preprocessor=preprocessor), preprocessor


BUILDERS = {"bert_simcse": build_simcse}
