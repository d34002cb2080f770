"""Pretrained weights from other formats into kerasplm models (see each family's module).

``bert``: HuggingFace BERT directories and Google's original TF checkpoints; ``gpt2``: HuggingFace GPT-2
directories. Both read safetensors (pickled ``pytorch_model.bin`` only with ``allow_pickle=True``) and
report every missing, unknown or mis-shaped tensor in one error.
"""
from kerasplm.convert.bert import load_hf_bert, load_tf_bert, save_tf_bert
from kerasplm.convert.gpt2 import load_gpt2

__all__ = ["load_gpt2", "load_hf_bert", "load_tf_bert", "save_tf_bert"]
