"""ELECTRA: its presets (its commands are declared with BERT's for now)."""
# The families whose public modules this one imports (the layering contracts check it).
BASES = ("bert",)
# Importing these registers the family's presets (kerasplm presets, get_preset).
PRESET_MODULES = ("kerasplm.models.electra.model",)
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.electra": "kerasplm.models.electra.model",
}
COMMANDS = []
