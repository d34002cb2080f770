"""Pretrained weights from other formats into kerasplm models (see each family's module).

``bert``: HuggingFace BERT directories and Google's original TF checkpoints; ``bert_variants``: HuggingFace
DistilBERT, ELECTRA, RoBERTa and ALBERT directories (as ``bert`` runs); ``gpt2``: HuggingFace GPT-2
directories; ``elmo``: AllenNLP bilm-tf's options.json + weights.hdf5. BERT and GPT-2 read safetensors (pickled ``pytorch_model.bin`` only with ``allow_pickle=True``) and
report every missing, unknown or mis-shaped tensor in one error.
"""
from kerasplm.convert.bert import load_hf_bert, load_tf_bert, save_tf_bert
from kerasplm.convert.elmo import load_bilm_tf
from kerasplm.convert.gpt2 import load_gpt2

__all__ = ["load_bilm_tf", "load_gpt2", "load_hf_bert", "load_tf_bert", "save_tf_bert"]
