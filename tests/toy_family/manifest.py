"""The toy family's manifest (no TensorFlow): registered by naming this module in KERASPLM_FAMILIES.

Its targets are named relative to the package it lives in, so the folder works under any name (the test copies it
out of the repository)."""
import dataclasses

from kerasplm.options import RUN, ExportOptions, TrainingOptions, option
from kerasplm.registry import Command

FAMILY = "toy"
BASES = ()
PRESET_MODULES = (f"{__package__}.toy",)


@dataclasses.dataclass(frozen=True)
class ToyOptions(TrainingOptions):
    """``kerasplm train toy``: learn score = 2·(bytes of the text) + 1 from generated texts."""
    preset: str = option("toy_linear", "model preset", scope=RUN)
    learning_rate: float = option(0.05, "Adam learning rate", kind=float, minimum=0, exclusive_minimum=True)
    batch_size: int = option(16, "texts per batch", kind=int, minimum=1)
    max_chars: int = option(12, "longest generated text", kind=int, minimum=1, scope=RUN)


@dataclasses.dataclass(frozen=True)
class ToyExportOptions(ExportOptions):
    """``kerasplm export toy``."""
    to: str = option("export/toy", "model base path: the SavedModel goes to <to>/<version>/", metavar="DIR")


COMMANDS = [
    Command("train", "toy", "the toy regression family (tests only)", ToyOptions, f"{__package__}.toy:train_toy",
            out_default="runs/toy"),
    Command("export", "toy", "export a toy run", ToyExportOptions, f"{__package__}.toy:export_toy_run"),
]
