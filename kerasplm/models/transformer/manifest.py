"""The seed's Transformer: its presets (the translator family trains, decodes and exports it)."""
# The families whose public modules this one imports (the layering contracts check it).
BASES = ()
# Importing these registers the family's presets (kerasplm presets, get_preset).
PRESET_MODULES = ("kerasplm.models.transformer.model",)
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.transformer": "kerasplm.models.transformer.model",
}
COMMANDS = []
