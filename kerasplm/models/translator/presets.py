"""The translator job's models: every preset of the Transformer (:mod:`kerasplm.models.transformer.model`) and of the RNN
encoder-decoder (:mod:`kerasplm.models.rnn_seq2seq.model`), one choice of ``kerasplm train translator --preset``.

Both models take the same call (``((src_ids, tgt_in)) -> (logits, attention weights)``), loss
(``compute_loss_sums``), decoding protocol and export, so the job picks the class from the preset and nothing else
changes.
"""
import collections.abc

from kerasplm.models.rnn_seq2seq import model as rnn_seq2seq
from kerasplm.models.transformer import model as transformer

_FAMILIES = ((transformer, transformer.Transformer), (rnn_seq2seq, rnn_seq2seq.RNNSeq2Seq))


class _TranslatorPresets(collections.abc.Mapping):
    """Both families' preset dicts as one read-only mapping, read live (a preset added to either dict is in it)."""

    def __getitem__(self, name):
        for module, _ in _FAMILIES:
            if name in module.PRESETS:
                return module.PRESETS[name]
        raise KeyError(name)

    def __iter__(self):
        for module, _ in _FAMILIES:
            yield from module.PRESETS

    def __len__(self):
        return sum(len(module.PRESETS) for module, _ in _FAMILIES)


PRESETS = _TranslatorPresets()


def _family(preset):
    for module, cls in _FAMILIES:
        if preset in module.PRESETS:
            return module, cls
    raise ValueError(f"unknown translator preset {preset!r}; expected one of {sorted(PRESETS)}")


def model_class(preset):
    """The translator model class of a preset name."""
    return _family(preset)[1]


def is_recurrent(preset):
    """True for an RNN encoder-decoder preset."""
    return model_class(preset) is rnn_seq2seq.RNNSeq2Seq


def get_preset(name, **overrides):
    """The config of a translator preset (Transformer or RNN) with fields replaced by ``overrides``."""
    return _family(name)[0].get_preset(name, **overrides)


def max_source_length(config):
    """The longest source a model of ``config`` encodes: the Transformer's position table (``pe_input``), the RNN's
    ``max_source_length``."""
    return config.pe_input if isinstance(config, transformer.TransformerConfig) else config.max_source_length


def build_model(config, name=None):
    """The translator model of a config: a ``Transformer`` for a ``TransformerConfig``, an ``RNNSeq2Seq`` for an
    ``RNNSeq2SeqConfig``."""
    cls = transformer.Transformer if isinstance(config, transformer.TransformerConfig) else rnn_seq2seq.RNNSeq2Seq
    return cls.from_config_object(config, name=name)
