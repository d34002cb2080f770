"""Distillation into a smaller BERT (its command is declared with BERT's for now)."""
# The families whose public modules this one imports (the layering contracts check it).
BASES = ("bert",)
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.distillation": "kerasplm.models.distilbert.distillation",
}
COMMANDS = []
