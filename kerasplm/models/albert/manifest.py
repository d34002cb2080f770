"""ALBERT: the command-line face of the family, declared without TensorFlow.

``kerasplm convert albert``: a HuggingFace ALBERT directory as a ``bert`` run (factorized embedding, one shared
block, SentencePiece). Its ``albert_base`` preset is a ``BertConfig`` registered with BERT's presets.
"""
from kerasplm.options import WeightsDirectoryOptions
from kerasplm.registry import Command

# The families whose public modules this one imports (the layering contracts check it).
BASES = ("bert",)

COMMANDS = [
    Command("convert", "albert", "a HuggingFace ALBERT directory", WeightsDirectoryOptions,
            "kerasplm.models.albert.convert:convert_albert_command",
            description="Convert a HuggingFace ALBERT directory (config.json, model.safetensors, spiece.model) into a "
                        "BERT run directory: factorized embedding, one shared block, SentencePiece vocabulary; "
                        "AlbertForPreTraining / AlbertForMaskedLM keep their MLM (and SOP) heads."),
]
