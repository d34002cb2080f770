"""Model families (one module each), their base classes and the preset registry.

``get_preset(name, **overrides)`` here is the registry's lookup over every family (preset names are
unique); ``kerasplm.models.transformer.get_preset`` is the translator's own.
"""
from kerasplm.models import presets
from kerasplm.models.base import Backbone, ConfigMixin, Preprocessor, Task
from kerasplm.models.bert import BertBackbone, BertConfig
from kerasplm.models.bert_pretraining import BertMaskedLMHead, BertPretrainer
from kerasplm.models.bert_tasks import BertClassifier
from kerasplm.models.bert_tagger import BertTaggerPreprocessor, BertTokenClassifier
from kerasplm.models.causal_lm import CausalLM, CausalLMConfig, DecoderOnlyBackbone
from kerasplm.models.awd_lstm import AWDLSTMBackbone, AWDLSTMConfig, AWDLSTMLanguageModel, ULMFiTClassifier
from kerasplm.models.char_rnn import CharRNNBackbone, CharRNNConfig, CharRNNLanguageModel
from kerasplm.models.electra import ElectraDiscriminator
from kerasplm.models.elmo import ElmoBiLM, ElmoConfig, ElmoEmbedder, ElmoLanguageModel, ScalarMix
from kerasplm.models.gpt import GPT, GPTBackbone, GPTConfig
from kerasplm.models.presets import get_preset, list_presets, register_presets
from kerasplm.models.rnn_seq2seq import RNNEncoder, RNNSeq2Seq, RNNSeq2SeqConfig
from kerasplm.models.transformer import PRESETS as TRANSFORMER_PRESETS
from kerasplm.models.transformer import Decoder, Encoder, Transformer, TransformerConfig

__all__ = [
    "AWDLSTMBackbone", "AWDLSTMConfig", "AWDLSTMLanguageModel", "ULMFiTClassifier",
    "Backbone", "BertBackbone", "BertClassifier", "BertConfig", "BertMaskedLMHead", "BertPretrainer",
    "BertTaggerPreprocessor", "BertTokenClassifier", "CausalLM", "CausalLMConfig", "CharRNNBackbone", "CharRNNConfig",
    "CharRNNLanguageModel", "ConfigMixin", "Decoder", "DecoderOnlyBackbone", "ElectraDiscriminator", "ElmoBiLM",
    "ElmoConfig", "ElmoEmbedder", "ElmoLanguageModel", "Encoder", "GPT", "GPTBackbone", "GPTConfig", "Preprocessor",
    "RNNEncoder", "RNNSeq2Seq", "RNNSeq2SeqConfig", "ScalarMix", "TRANSFORMER_PRESETS", "Task", "Transformer",
    "TransformerConfig", "get_preset",
    "list_presets", "presets", "register_presets",
]
