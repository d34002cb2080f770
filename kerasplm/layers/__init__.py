"""Building blocks shared by several model families."""
from kerasplm.layers.attention import MultiHeadAttention, scaled_dot_product_attention
from kerasplm.layers.dropout import Dropout
from kerasplm.layers.masks import create_look_ahead_mask, create_masks, create_padding_mask
from kerasplm.layers.position import get_angles, positional_encoding
from kerasplm.layers.tracking import track_layer_list
from kerasplm.layers.transformer import DecoderLayer, EncoderLayer, point_wise_feed_forward_network

__all__ = [
    "Dropout", "MultiHeadAttention", "scaled_dot_product_attention", "create_look_ahead_mask", "create_masks",
    "create_padding_mask", "get_angles", "positional_encoding", "DecoderLayer", "EncoderLayer",
    "point_wise_feed_forward_network", "track_layer_list",
]
