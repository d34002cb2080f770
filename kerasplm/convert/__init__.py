"""Pretrained weights from other formats into kerasplm models (see each family's module)."""
from kerasplm.convert.bert import load_hf_bert, load_tf_bert, save_tf_bert

__all__ = ["load_hf_bert", "load_tf_bert", "save_tf_bert"]
