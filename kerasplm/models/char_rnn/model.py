"""The character-level RNN language model (seed ``001_*`` §2.2; d2l's ``RNNModel`` with ``nn.GRU``):

    x_t = onehot(c_t)  or  E[c_t]                 (one-hot inputs, the seed's, or a learned embedding)
    h^l_t = GRU_l(h^l_{t-1}, h^{l-1}_t)           (or LSTM; h^0_t = x_t; dropout between layers in training)
    P(c_{t+1} | c_1..c_t) = softmax(W h^L_t + b)  (a dense layer over the character vocabulary)

Inputs are the ids of :class:`kerasplm.text.char_vocab.CharacterTokenizer` (0 = padding, ignored by the loss);
labels are the inputs shifted by one, as the seed's ``Y`` is ``X`` moved one step to the right.

The recurrent layers are ``keras.layers.GRU`` / ``keras.layers.LSTM``. Generation goes through the one engine of
:mod:`kerasplm.generation` with the RNN state as the cache. The engine feeds right-padded prompts of different
lengths in one prefill call and then steps each row at its own position (a ``(batch,)`` cache index), so a
single running state per row would absorb the padding of the shorter prompts. The cache therefore holds the
state *after every position*: ``(batch, max_length, units)`` per layer (two, h and c, for an LSTM). A call at
positions ``i .. i + n - 1`` starts from the state stored at ``i - 1`` (zeros at ``i = 0``), runs the cell over
the ``n`` new characters and stores their states at ``i .. i + n - 1``; a padded position's state is garbage
that the row overwrites before reading it, as the key/value cache's padded slots. The engine's
``max_positions`` is the cache's length (prompt plus new characters), not a limit of the model: ``call``
runs on sequences of any length.

Presets (``kerasplm presets``; counts with the tiny-shakespeare vocabulary, 65 characters + 3 special tokens):
``char_rnn_tiny`` (tests), ``char_rnn_seed`` (the seed's: one GRU layer of 256 units on one-hot inputs) and
``char_rnn_lstm`` (2 LSTM layers of 512 units over a 64-wide embedding, dropout 0.2).
"""
import dataclasses

import keras
import tensorflow as tf

from kerasplm.layers.dropout import Dropout
from kerasplm.models.base import Backbone, Task
from kerasplm.models.gpt.causal_lm import CausalLM
from kerasplm.models.presets import register_presets

__all__ = ["CELLS", "CharRNNConfig", "CharRNNBackbone", "CharRNNLanguageModel", "PRESETS", "PRESET_NAMES",
           "num_parameters"]

CELLS = ("gru", "lstm")
# The tiny-shakespeare vocabulary (65 characters + <pad>, <unk>, <|endoftext|>): the presets' listed counts.
SHAKESPEARE_VOCAB_SIZE = 68


@dataclasses.dataclass(frozen=True)
class CharRNNConfig:
    """Hyper-parameters of a character-level RNN LM.

    ``embedding_dim`` 0 feeds one-hot characters (the seed's); ``max_positions`` is the generation cache's length
    (prompt + new characters), see the module docstring.
    """

    vocab_size: int
    cell: str = "gru"
    num_layers: int = 1
    units: int = 256
    embedding_dim: int = 0
    dropout: float = 0.0
    max_positions: int = 1024

    def validate(self):
        for name in ("vocab_size", "num_layers", "units", "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"CharRNNConfig.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.embedding_dim, int) or self.embedding_dim < 0:
            raise ValueError(f"CharRNNConfig.embedding_dim must be an integer >= 0 (0: one-hot inputs), got "
                             f"{self.embedding_dim!r}")
        if self.cell not in CELLS:
            raise ValueError(f"CharRNNConfig.cell must be one of {list(CELLS)}, got {self.cell!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"CharRNNConfig.dropout must be in [0, 1), got {self.dropout}")
        return self


PRESETS = {
    "char_rnn_tiny": CharRNNConfig(vocab_size=SHAKESPEARE_VOCAB_SIZE, cell="gru", num_layers=1, units=16,
                                   embedding_dim=8, max_positions=128),
    "char_rnn_seed": CharRNNConfig(vocab_size=SHAKESPEARE_VOCAB_SIZE, cell="gru", num_layers=1, units=256),
    "char_rnn_lstm": CharRNNConfig(vocab_size=SHAKESPEARE_VOCAB_SIZE, cell="lstm", num_layers=2, units=512,
                                   embedding_dim=64, dropout=0.2),
}
PRESET_NAMES = sorted(PRESETS)


def num_parameters(config):
    """Exact weight count of a :class:`CharRNNLanguageModel` (the output layer included).

    Keras' GRU (``reset_after=True``) has kernels ``(in, 3U)``, ``(U, 3U)`` and a bias ``(2, 3U)``; the LSTM
    ``(in, 4U)``, ``(U, 4U)`` and ``(4U,)``; ``in`` is the embedding width (the vocabulary for one-hot inputs)
    for the first layer and ``U`` after it.
    """
    c = config
    gates, biases = (3, 6) if c.cell == "gru" else (4, 4)
    width = c.embedding_dim or c.vocab_size
    total = c.vocab_size * c.embedding_dim
    for _ in range(c.num_layers):
        total += gates * (width * c.units + c.units * c.units) + biases * c.units
        width = c.units
    return total + c.units * c.vocab_size + c.vocab_size


class _EveryState(keras.layers.Layer):
    """An RNN cell whose output at each step is its whole new state, ``h`` (GRU) or ``[h; c]`` (LSTM): what the
    generation cache stores per position. It wraps the recurrent layer's own cell (same weights)."""

    def __init__(self, cell, **kwargs):
        super().__init__(**kwargs)
        self.cell = cell
        self.state_size = cell.state_size
        self.output_size = sum(cell.state_size) if isinstance(cell.state_size, (list, tuple)) else cell.state_size
        self.built = True

    def call(self, inputs, states, training=False):
        _, new_states = self.cell(inputs, states, training=False)
        return tf.concat(list(new_states), axis=-1), new_states


@keras.saving.register_keras_serializable(package="kerasplm")
class CharRNNBackbone(Backbone):
    """Character inputs (one-hot or embedded) and ``num_layers`` GRU/LSTM layers.

    Args: the fields of :class:`CharRNNConfig` (``config_class``), plus Keras' ``name`` etc.
    Call: ``token_ids (batch, seq_len)`` -> ``{"sequence_output": (batch, seq_len, units)}``: the last layer's
    ``h_t`` at every position, from a zero state.
    """

    config_class = CharRNNConfig
    preset_family = "char_rnn"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        c = self.config
        if c.embedding_dim:
            self.embedding = keras.layers.Embedding(c.vocab_size, c.embedding_dim, name="embedding")
        layer_class = keras.layers.GRU if c.cell == "gru" else keras.layers.LSTM
        self.rnns = [layer_class(c.units, return_sequences=True, name=f"{c.cell}{i + 1}")
                     for i in range(c.num_layers)]
        self.dropouts = [Dropout(c.dropout, name=f"dropout{i + 1}") for i in range(c.num_layers)]
        self.build()
        # The cached path's view of each layer (untracked: it holds no weight of its own).
        object.__setattr__(self, "_state_rnns", [
            keras.layers.RNN(_EveryState(rnn.cell), return_sequences=True, name=f"{rnn.name}_states")
            for rnn in self.rnns])

    @staticmethod
    def num_parameters(config):
        return num_parameters(config)

    @property
    def num_states(self):
        """State tensors per layer: 1 (GRU: h) or 2 (LSTM: h, c)."""
        return 1 if self.config.cell == "gru" else 2

    def build(self, input_shape=None):
        c = self.config
        width = c.embedding_dim or c.vocab_size
        if c.embedding_dim:
            self.embedding.build((None, None))
        for rnn in self.rnns:
            rnn.build((None, None, width))
            width = c.units
        self.built = True

    def _inputs(self, token_ids):
        if self.config.embedding_dim:
            return self.embedding(token_ids)
        return tf.one_hot(tf.cast(token_ids, tf.int32), self.config.vocab_size, dtype=self.compute_dtype)

    def call(self, token_ids, training=None):
        x = self._inputs(token_ids)
        for rnn, dropout in zip(self.rnns, self.dropouts):
            x = dropout(rnn(x, training=training), training=training)
        return {"sequence_output": x}

    # ---- incremental decoding (kerasplm.generation): the state after every position is the cache ----
    def init_cache(self, batch_size, max_length):
        """Per layer, a list of ``num_states`` zero tensors ``(batch_size, max_length, units)``."""
        if max_length > self.config.max_positions:
            raise ValueError(f"cache length {max_length} exceeds max_positions={self.config.max_positions}")
        shape = tf.stack([batch_size, max_length, self.config.units])
        return [[tf.zeros(shape, self.compute_dtype) for _ in range(self.num_states)] for _ in self.rnns]

    def call_with_cache(self, token_ids, cache, cache_index):
        """``token_ids (batch, n)`` at positions ``cache_index .. cache_index + n - 1`` (int32 scalar or
        ``(batch,)``) -> ``(sequence_output (batch, n, units), new cache)``; equal to ``call`` on the whole
        prefix restricted to the new positions."""
        batch, n = tf.shape(token_ids)[0], tf.shape(token_ids)[1]
        index = tf.convert_to_tensor(cache_index, tf.int32)
        index = tf.broadcast_to(index, [batch]) if index.shape.rank == 0 else index
        positions = index[:, tf.newaxis] + tf.range(n)[tf.newaxis]                        # (B, n)
        rows = tf.broadcast_to(tf.range(batch)[:, tf.newaxis], tf.shape(positions))
        where = tf.stack([rows, positions], axis=-1)                                     # (B, n, 2)
        started = (index > 0)[:, tf.newaxis]
        x, new_cache = self._inputs(token_ids), []
        for rnn, state_rnn, history in zip(self.rnns, self._state_rnns, cache):
            previous = [tf.where(started, tf.gather(h, tf.maximum(index - 1, 0), batch_dims=1), tf.zeros_like(h[:, 0]))
                        for h in history]
            if token_ids.shape[1] == 1:    # one step (every decoding step): the cell itself, no loop
                _, states = rnn.cell(x[:, 0], previous, training=False)
                states = [s[:, tf.newaxis] for s in states]
            else:
                states = tf.split(state_rnn(x, initial_state=previous), self.num_states, axis=-1)
            new_cache.append([tf.tensor_scatter_nd_update(h, where, tf.cast(s, h.dtype))
                              for h, s in zip(history, states)])
            x = states[0]    # h: the layer's output
        return x, new_cache


@keras.saving.register_keras_serializable(package="kerasplm")
class CharRNNLanguageModel(Task):
    """Next-character model: a :class:`CharRNNBackbone` and a dense layer over the vocabulary.

    Call: ``token_ids (batch, seq_len)`` -> float32 logits ``(batch, seq_len, vocab_size)``.
    Loss (``compute_loss_sums``): ``batch = (token_ids, labels)`` (label 0 = ignored) or ``batch = token_ids``
    (labels are the ids shifted by one): summed cross-entropy in nats, so loss / weight is nats per character.
    """

    backbone_class = CharRNNBackbone

    def __init__(self, backbone, preprocessor=None, **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        self.head = keras.layers.Dense(backbone.config.vocab_size, name="logits")
        self.head.build((None, None, backbone.config.units))
        self.built = True

    def call(self, token_ids, training=None):
        return tf.cast(self.head(self.backbone(token_ids, training=training)["sequence_output"]), tf.float32)

    # The next-token loss sums of every language model here (windows of ids, or (inputs, labels) pairs).
    compute_loss_sums = CausalLM.compute_loss_sums

    # ---- incremental decoding (kerasplm.generation) ----
    def init_cache(self, batch_size, max_length):
        return self.backbone.init_cache(batch_size, max_length)

    def call_with_cache(self, token_ids, cache, cache_index):
        """-> ``(float32 logits (batch, n, vocab_size), hidden (batch, n, units), new cache)``."""
        hidden, cache = self.backbone.call_with_cache(token_ids, cache, cache_index)
        return tf.cast(self.head(hidden), tf.float32), hidden, cache

    def check_preprocessor(self, tokenizer):
        """ValueError naming the file when the tokenizer's vocabulary is not the output layer's size."""
        size = getattr(tokenizer, "vocab_size", None)
        if size is not None and size != self.vocab_size:
            where = getattr(tokenizer, "vocabulary_file", None) or "the tokenizer"
            raise ValueError(f"{where}: {size} tokens, but the model predicts vocab_size={self.vocab_size}; the "
                             f"file is damaged or from another run")

    # As the causal LM's: the backbone config's sizes, and token-id generation through the engine (the RNN state
    # is the cache).
    max_positions = CausalLM.max_positions
    vocab_size = CausalLM.vocab_size
    generate = CausalLM.generate


register_presets("char_rnn", CharRNNBackbone, PRESETS, num_parameters=num_parameters,
                 listing_overrides={"vocab_size": SHAKESPEARE_VOCAB_SIZE},
                 description="character-level GRU/LSTM language model (seed 001 §2.2)")
