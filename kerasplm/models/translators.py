"""The translator job's models: every preset of the Transformer (:mod:`kerasplm.models.transformer`) and of the RNN
encoder-decoder (:mod:`kerasplm.models.rnn_seq2seq`), one choice of ``kerasplm train translator --preset``.

Both models take the same call (``((src_ids, tgt_in)) -> (logits, attention weights)``), loss
(``compute_loss_sums``), decoding protocol and export, so the job picks the class from the preset and nothing else
changes.
"""
from kerasplm.models import rnn_seq2seq, transformer

PRESETS = {**transformer.PRESETS, **rnn_seq2seq.PRESETS}
MODEL_CLASSES = {**{name: transformer.Transformer for name in transformer.PRESETS},
                 **{name: rnn_seq2seq.RNNSeq2Seq for name in rnn_seq2seq.PRESETS}}


def model_class(preset):
    """The translator model class of a preset name."""
    if preset not in MODEL_CLASSES:
        raise ValueError(f"unknown translator preset {preset!r}; expected one of {sorted(MODEL_CLASSES)}")
    return MODEL_CLASSES[preset]


def is_recurrent(preset):
    """True for an RNN encoder-decoder preset."""
    return model_class(preset) is rnn_seq2seq.RNNSeq2Seq


def get_preset(name, **overrides):
    """The config of a translator preset (Transformer or RNN) with fields replaced by ``overrides``."""
    module = transformer if model_class(name) is transformer.Transformer else rnn_seq2seq
    return module.get_preset(name, **overrides)


def max_source_length(config):
    """The longest source a model of ``config`` encodes: the Transformer's position table (``pe_input``), the RNN's
    ``max_source_length``."""
    return config.pe_input if isinstance(config, transformer.TransformerConfig) else config.max_source_length


def build_model(config, name=None):
    """The translator model of a config: a ``Transformer`` for a ``TransformerConfig``, an ``RNNSeq2Seq`` for an
    ``RNNSeq2SeqConfig``."""
    cls = transformer.Transformer if isinstance(config, transformer.TransformerConfig) else rnn_seq2seq.RNNSeq2Seq
    return cls.from_config_object(config, name=name)
