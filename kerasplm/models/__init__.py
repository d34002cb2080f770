"""Model families: one module each."""
from kerasplm.models.transformer import PRESETS as TRANSFORMER_PRESETS
from kerasplm.models.transformer import Decoder, Encoder, Transformer, TransformerConfig, get_preset

__all__ = ["TRANSFORMER_PRESETS", "Decoder", "Encoder", "Transformer", "TransformerConfig", "get_preset"]
