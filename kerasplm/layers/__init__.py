"""Building blocks shared by several model families (see each module's docstring)."""
from kerasplm.layers.attention import (MultiHeadAttention, cache_causal_mask, scaled_dot_product_attention,
                                       write_cache)
from kerasplm.layers.dropout import Dropout
from kerasplm.layers.embedding import EmbeddingMixin, TransformerEmbedding, table_logits
from kerasplm.layers.masks import create_look_ahead_mask, create_masks, create_padding_mask
from kerasplm.layers.position import get_angles, positional_encoding
from kerasplm.layers.rnn_attention import AdditiveAttention, masked_softmax
from kerasplm.layers.tracking import TracksLayerLists, track_layer_list
from kerasplm.layers.transformer import (ACTIVATIONS, DecoderLayer, EncoderLayer, gelu, gelu_tanh, get_activation,
                                         point_wise_feed_forward_network, residual, write_cache_step)

__all__ = [
    "ACTIVATIONS", "AdditiveAttention", "masked_softmax", "DecoderLayer", "Dropout", "EmbeddingMixin", "EncoderLayer", "MultiHeadAttention",
    "TracksLayerLists", "TransformerEmbedding", "cache_causal_mask", "create_look_ahead_mask", "create_masks",
    "create_padding_mask", "gelu", "gelu_tanh", "get_activation", "get_angles", "point_wise_feed_forward_network",
    "positional_encoding", "residual", "scaled_dot_product_attention", "table_logits", "track_layer_list", "write_cache",
    "write_cache_step",
]
