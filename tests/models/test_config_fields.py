"""Every family's config dataclass is the one declaration of its fields: a model built from a config keeps
every field in its place (no hand-written positional re-pack that a reordered field would silently swap),
``get_config``/``from_config`` round-trip, and the dicts today's ``.keras`` files and run configs hold still
load."""
import dataclasses
import json

import keras
import pytest

from kerasplm.models.bert import BertBackbone, BertConfig
from kerasplm.models.gpt import CausalLMConfig, DecoderOnlyBackbone, GPTBackbone, GPTConfig
from kerasplm.models.elmo import ElmoBiLM, ElmoConfig
from kerasplm.models.rnn_seq2seq import RNNSeq2Seq, RNNSeq2SeqConfig
from kerasplm.models.transformer import Transformer, TransformerConfig
from kerasplm.models.base import config_arguments

# All-distinct values (every integer field differs from every other, floats and booleans off their defaults),
# small enough to build in a moment: any two fields swapped on the way into the model change its config.
CONFIGS = {
    "transformer": (Transformer, TransformerConfig(
        num_layers=2, d_model=24, num_heads=3, dff=40, input_vocab_size=50, target_vocab_size=60, pe_input=70,
        pe_target=80, rate=0.25, normalize_first=True)),
    "bert": (BertBackbone, BertConfig(
        vocab_size=97, num_layers=2, hidden_size=24, num_heads=3, intermediate_size=40, max_positions=50,
        num_segments=4, dropout=0.15, attention_dropout=0.05, layer_norm_epsilon=1e-7, embedding_size=16,
        share_layers=True, initializer_range=0.03, activation="gelu_tanh", position_offset=7)),
    "causal_lm": (DecoderOnlyBackbone, CausalLMConfig(
        vocab_size=97, num_layers=2, d_model=24, num_heads=3, dff=40, max_positions=50, rate=0.15,
        attention_dropout=0.05, normalize_first=False, activation="gelu", layer_norm_epsilon=1e-7,
        position_embedding="sinusoidal", initializer_range=0.03)),
    "gpt": (GPTBackbone, GPTConfig(
        vocab_size=97, num_layers=2, d_model=24, num_heads=3, dff=40, max_positions=50, rate=0.15,
        attention_dropout=0.05, normalize_first=False, activation="gelu", layer_norm_epsilon=1e-7,
        position_embedding="learned", initializer_range=0.03, scale_residual_init=False)),
    "elmo": (ElmoBiLM, ElmoConfig(
        filters=((1, 4), (2, 6)), char_embedding_dim=5, n_characters=70, max_characters_per_token=9,
        activation="tanh", n_highway=1, lstm_dim=12, projection_dim=8, n_layers=3, cell_clip=2.5, proj_clip=1.5,
        use_skip_connections=False, dropout=0.2)),
    "rnn_seq2seq": (RNNSeq2Seq, RNNSeq2SeqConfig(
        embedding_dim=6, units=14, num_layers=2, cell="lstm", bidirectional=True, attention="additive",
        attention_units=9, input_vocab_size=50, target_vocab_size=60, rate=0.25, max_source_length=70,
        max_target_length=80)),
}

# get_config() of these models as written (through JSON, as in a .keras file's config.json) by the code
# before the configs were declared once: they must keep loading.
SERIALIZED = {
    "transformer": {"num_layers": 2, "d_model": 24, "num_heads": 3, "dff": 40, "input_vocab_size": 50,
                    "target_vocab_size": 60, "pe_input": 70, "pe_target": 80, "rate": 0.25, "normalize_first": True,
                    "name": "m", "trainable": True},
    "bert": {"vocab_size": 97, "num_layers": 2, "hidden_size": 24, "num_heads": 3, "intermediate_size": 40,
             "max_positions": 50, "num_segments": 4, "dropout": 0.15, "attention_dropout": 0.05,
             "layer_norm_epsilon": 1e-07, "embedding_size": 16, "share_layers": True, "initializer_range": 0.03,
             "name": "m", "trainable": True},
    "causal_lm": {"vocab_size": 97, "num_layers": 2, "d_model": 24, "num_heads": 3, "dff": 40, "max_positions": 50,
                  "rate": 0.15, "attention_dropout": 0.05, "normalize_first": False, "activation": "gelu",
                  "layer_norm_epsilon": 1e-07, "position_embedding": "sinusoidal", "initializer_range": 0.03,
                  "name": "m", "trainable": True},
    "gpt": {"vocab_size": 97, "num_layers": 2, "d_model": 24, "num_heads": 3, "dff": 40, "max_positions": 50,
            "rate": 0.15, "attention_dropout": 0.05, "normalize_first": False, "activation": "gelu",
            "layer_norm_epsilon": 1e-07, "position_embedding": "learned", "initializer_range": 0.03,
            "scale_residual_init": False, "name": "m", "trainable": True},
    "elmo": {"filters": [[1, 4], [2, 6]], "char_embedding_dim": 5, "n_characters": 70, "max_characters_per_token": 9,
             "activation": "tanh", "n_highway": 1, "lstm_dim": 12, "projection_dim": 8, "n_layers": 3,
             "cell_clip": 2.5, "proj_clip": 1.5, "use_skip_connections": False, "dropout": 0.2, "name": "m",
             "trainable": True},
    "rnn_seq2seq": {"embedding_dim": 6, "units": 14, "num_layers": 2, "cell": "lstm", "bidirectional": True,
                    "attention": "additive", "attention_units": 9, "input_vocab_size": 50, "target_vocab_size": 60,
                    "rate": 0.25, "max_source_length": 70, "max_target_length": 80, "name": "m", "trainable": True},
}

# Fields added after those files were written: today's get_config() writes them, and an old dict without them
# loads with their defaults (the model it was written for).
ADDED = {"bert": {"activation": "gelu_tanh", "position_offset": 7}}


def _field_values(config):
    return [getattr(config, field.name) for field in dataclasses.fields(config)]


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_config_reaches_the_model_unchanged_and_round_trips(family):
    cls, config = CONFIGS[family]
    ints = [v for v in _field_values(config) if isinstance(v, int) and not isinstance(v, bool)]
    assert len(set(ints)) == len(ints), "the test config's integer fields must all differ"
    model = cls.from_config_object(config, name="m")
    assert model.config == config
    # The layers are built from the config's fields, each in its place (a swap changes the weight count).
    assert cls.num_parameters(config) == model.count_params()
    assert cls(**dataclasses.asdict(config)).config == config
    assert cls(*_field_values(config)).config == config          # positions follow the dataclass' field order
    serialized = json.loads(json.dumps(model.get_config()))
    assert serialized == {**SERIALIZED[family], **ADDED.get(family, {})}
    defaults = {name: field.default for field in dataclasses.fields(config) for name in [field.name]
                if name in ADDED.get(family, {})}
    assert cls.from_config(SERIALIZED[family]).config == dataclasses.replace(config, **defaults)
    assert cls.from_config(serialized).config == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
    assert type(restored) is cls and restored.config == config and restored.name == "m"


def test_the_seeds_positional_call_maps_onto_the_named_fields():
    # The seed's Transformer(num_layers, d_model, num_heads, dff, input_vocab_size, target_vocab_size, pe_input,
    # pe_target, rate): TransformerConfig's field order is that signature, and must stay so.
    model = Transformer(2, 24, 3, 40, 50, 60, 70, 80, 0.25, name="seed_call")
    assert model.config == TransformerConfig(num_layers=2, d_model=24, num_heads=3, dff=40, input_vocab_size=50,
                                             target_vocab_size=60, pe_input=70, pe_target=80, rate=0.25)
    assert model.name == "seed_call"
    assert Transformer(2, 24, 3, 40, 50, 60, 70, 80, rate=0.0, normalize_first=True).config.normalize_first


def test_config_arguments_rejects_what_python_would():
    with pytest.raises(TypeError, match="multiple values for argument 'd_model'"):
        Transformer(2, 24, 3, 40, 50, 60, 70, 80, d_model=32)
    with pytest.raises(TypeError, match="at most 10 positional arguments"):
        Transformer(2, 24, 3, 40, 50, 60, 70, 80, 0.1, False, "extra")
    with pytest.raises(TypeError):
        Transformer(2, 24, 3)                                     # dff has no default
    config, rest = config_arguments(TransformerConfig, (2, 24), {"num_heads": 3, "dff": 40, "name": "x"})
    assert (config.num_layers, config.d_model, config.num_heads, config.dff) == (2, 24, 3, 40)
    assert rest == {"name": "x"}
