"""ELECTRA: the command-line face of the family, declared without TensorFlow.

``kerasplm train electra``; ``convert electra``. Its runs are ``bert`` runs (task ``electra_pretraining``, or
``electra_discriminator`` / ``pretraining`` when converted): every BERT fine-tuning job takes them as ``--init``.
"""
import dataclasses

from kerasplm.models.bert.manifest import DEFAULT_TIME_BUDGET, BertPretrainingOptions
from kerasplm.options import WeightsDirectoryOptions, option
from kerasplm.registry import Command


@dataclasses.dataclass(frozen=True)
class ElectraPretrainingOptions(BertPretrainingOptions):
    """Options of ``train_electra`` / ``kerasplm train electra``: BERT pretraining's, with ELECTRA's presets."""
    preset: str = option("electra_small", "model preset: the discriminator's size (the generator's follows "
                                          "--generator-size)", choices="kerasplm.models.electra.model:PRESETS")
    sentence_task: str = option("none", "ELECTRA has no sentence-level objective: single segments of consecutive "
                                        "sentences", choices=["none"])
    generator_size: float = option(None, "generator hidden size, FFN size and heads as a fraction of the "
                                         "discriminator's (default: the preset's; the paper's 1/4 for small, 1/3 "
                                         "for base)", kind=float, minimum=0, exclusive_minimum=True, maximum=1)
    rtd_weight: float = option(50.0, "lambda: weight of the replaced-token-detection loss (mean over real tokens) "
                                     "against the generator's MLM loss (mean over masked pieces)", kind=float,
                               minimum=0)


# The families whose public modules this one imports (the layering contracts check it).
BASES = ("bert",)
# Importing these registers the family's presets (kerasplm presets, get_preset).
PRESET_MODULES = ("kerasplm.models.electra.model",)
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.electra": "kerasplm.models.electra.model",
}

COMMANDS = [
    Command("train", "electra", "pretrain ELECTRA (generator MLM + replaced-token detection) on a plain-text corpus",
            ElectraPretrainingOptions, "kerasplm.models.electra.pretraining_job:train_electra",
            description="Pretrain ELECTRA from raw text (BERT's corpus formats): a small generator fills the masked "
                        "pieces with samples, the discriminator tells every token replaced or original; the run's "
                        "discriminator is a BERT backbone every fine-tuning job takes as --init. Resumes an "
                        "existing run in --out with its stored options.",
            out_default="runs/electra", default_time_budget=DEFAULT_TIME_BUDGET),
    Command("convert", "electra", "a HuggingFace ELECTRA discriminator or generator directory",
            WeightsDirectoryOptions, "kerasplm.models.electra.convert:convert_electra_command",
            description="Convert a HuggingFace ELECTRA directory (config.json, model.safetensors, vocab.txt) into a "
                        "BERT run directory: the discriminator with its replaced-token-detection head, or the "
                        "generator as an MLM-only pretraining run."),
]
