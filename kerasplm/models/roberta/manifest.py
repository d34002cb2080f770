"""RoBERTa: the command-line face of the family, declared without TensorFlow.

``kerasplm convert roberta``: a HuggingFace RoBERTa directory as a ``bert`` run (byte-level BPE).
"""
from kerasplm.options import WeightsDirectoryOptions
from kerasplm.registry import Command

# The families whose public modules this one imports (the layering contracts check it).
BASES = ("bert",)

COMMANDS = [
    Command("convert", "roberta", "a HuggingFace RoBERTa directory", WeightsDirectoryOptions,
            "kerasplm.models.roberta.convert:convert_roberta_command",
            description="Convert a HuggingFace RoBERTa directory (config.json, model.safetensors, vocab.json, "
                        "merges.txt) into a BERT run directory: byte-level BPE, <s> A </s></s> B </s>, positions "
                        "from padding_idx + 1; a RobertaForMaskedLM keeps its MLM head."),
]
