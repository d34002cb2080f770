"""The RNN encoder-decoder: its presets (the translator family trains, decodes and exports it)."""
# The families whose public modules this one imports (the layering contracts check it).
BASES = ("transformer",)
# Importing these registers the family's presets (kerasplm presets, get_preset).
PRESET_MODULES = ("kerasplm.models.rnn_seq2seq.model",)
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.rnn_seq2seq": "kerasplm.models.rnn_seq2seq.model",
}
COMMANDS = []
