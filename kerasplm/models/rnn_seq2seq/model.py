"""The seeds' RNN encoder-decoder translator (seed 001_*, §3.1-3.2): a GRU (or LSTM) encoder and a GRU decoder,
with additive (Bahdanau) attention or without (the encoder's last state fed at every step).

Encoder (the seed's ``Seq2SeqEncoder``): embedding, then ``num_layers`` recurrent layers over the source; padding
is masked (the seed runs over it), so each row's final state is the state at its last real token. Options:
LSTM cells, bidirectional layers (each direction ``units / 2`` wide, the two concatenated: outputs and states
stay ``units`` wide, what the decoder's width and its initial state need).

    outputs h_1..h_S (B, S, units)   = the top layer's states at every source position (keys and values)
    state   s_0 = [h_S^(l)]_l        = every layer's final state (the decoder's initial state, as the seed's
                                       ``init_state``)

Decoder with attention (the seed's ``Seq2SeqAttentionDecoder``), at target step t with input token y_{t-1}:

    q_t = s_{t-1}^(L)                               the previous top-layer hidden state (the query)
    α_t = masked_softmax(score(q_t, h_1..S))        :class:`kerasplm.layers.AdditiveAttention`
    c_t = Σ_s α_{t,s} h_s
    s_t = GRU([c_t ; embed(y_{t-1})], s_{t-1})      context FIRST, then the embedding (the seed's torch.cat order)
    logits_t = W_o s_t^(L) + b_o

Decoder without attention (the seed's ``Seq2SeqDecoder``, Cho et al. 2014): ``s_t = GRU([embed(y_{t-1}) ;
c], s_{t-1})`` with c = h_S^(L) the encoder's final top-layer state, the same at every step (the seed's
``torch.cat((X, context), 2)`` order). (The seed's code takes the context from the state it is handed, which in
its step-by-step prediction is the decoder's own previous state; the papers and the issue keep the encoder's.)

Training is teacher forced: the decoder runs over the whole target in one call, a ``tf.scan`` over the target
positions of :meth:`RNNSeq2Seq.decoder_step` (each step needs the previous state: no parallel form), then the output
layer on every position at once. The same ``decoder_step`` is the generation engine's step
(:meth:`RNNSeq2Seq.call_with_cache`), so cached decoding is the training graph's arithmetic. The cache is the
decoder state: ``[(h,)]`` (GRU) or ``[(h, c)]`` (LSTM) per layer, each ``(batch, units)``; the encoder outputs,
their projected keys and the padding mask are computed once per source (:meth:`RNNSeq2Seq.cross_attention_kv`).

Dropout (``rate``) is applied to the embeddings, between encoder layers and to the decoder's top outputs before
the output layer; not between the decoder's stacked cells (inside the step loop), where the seed's
``nn.GRU(dropout=...)`` puts it.

Example:
>>> model = RNNSeq2Seq.from_preset("gru_bahdanau_tiny", input_vocab_size=100, target_vocab_size=120)
>>> logits, attention = model((tf.constant([[2, 5, 6, 3, 0]]), tf.constant([[2, 7, 8]])), training=False)
>>> logits.shape, attention["decoder_layer1_block2"].shape
(TensorShape([1, 3, 120]), TensorShape([1, 1, 3, 5]))
"""
import dataclasses

import keras
import tensorflow as tf

from kerasplm.layers.dropout import Dropout
from kerasplm.layers.rnn_attention import SCORES, AdditiveAttention
from kerasplm.layers.tracking import TracksLayerLists
from kerasplm.models.base import ConfigMixin
from kerasplm.models.presets import register_presets
from kerasplm.models.transformer.model import Transformer

CELLS = ("gru", "lstm")
ATTENTIONS = (*SCORES, "none")


@dataclasses.dataclass(frozen=True)
class RNNSeq2SeqConfig:
    """Hyper-parameters of the RNN translator; vocabulary sizes are filled in from the tokenizers.

    ``units``: the decoder's width and the encoder's output width (each direction ``units // 2`` when
    bidirectional). ``attention``: "additive" (Bahdanau), Luong's "dot" or "general", or "none" (the seed's
    no-attention baseline). ``rate``: dropout (module docstring). ``max_source_length`` /
    ``max_target_length``: the longest source kept and the most tokens decoded (an RNN has no position table;
    these bound the work a request can ask for, as the Transformer's ``pe_input`` / ``pe_target`` do).
    """

    embedding_dim: int
    units: int
    num_layers: int = 1
    cell: str = "gru"
    bidirectional: bool = False
    attention: str = "additive"
    attention_units: int = None      # the additive score's hidden width; default ``units`` (the seed's)
    input_vocab_size: int = 0
    target_vocab_size: int = 0
    rate: float = 0.0
    max_source_length: int = 128
    max_target_length: int = 128

    def validate(self):
        for name in ("embedding_dim", "units", "num_layers", "input_vocab_size", "target_vocab_size",
                     "max_source_length", "max_target_length"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RNNSeq2SeqConfig.{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.cell not in CELLS:
            raise ValueError(f"RNNSeq2SeqConfig.cell must be one of {', '.join(CELLS)}, got {self.cell!r}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"RNNSeq2SeqConfig.attention must be one of {', '.join(ATTENTIONS)}, got "
                             f"{self.attention!r}")
        if self.bidirectional and self.units % 2:
            raise ValueError(f"a bidirectional encoder needs an even units (units / 2 per direction), got {self.units}")
        if self.attention_units is not None and self.attention_units <= 0:
            raise ValueError(f"RNNSeq2SeqConfig.attention_units must be a positive integer, got "
                             f"{self.attention_units!r}")
        if not 0.0 <= self.rate < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {self.rate}")
        return self


PRESETS = {
    # For tests: a few thousand weights.
    "gru_bahdanau_tiny": RNNSeq2SeqConfig(embedding_dim=16, units=16),
    "rnn_seq2seq_tiny": RNNSeq2SeqConfig(embedding_dim=16, units=16, attention="none"),
    # The seed's structure (two GRU layers, dropout 0.1) at widths a CPU trains in minutes.
    "gru_bahdanau": RNNSeq2SeqConfig(embedding_dim=128, units=256, num_layers=2, rate=0.1),
    "rnn_seq2seq": RNNSeq2SeqConfig(embedding_dim=128, units=256, num_layers=2, rate=0.1, attention="none"),
}


def get_preset(name, **overrides):
    """The ``RNNSeq2SeqConfig`` of a named RNN translator preset with fields replaced by ``overrides``."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; expected one of {sorted(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides)


def cell_parameters(cell, input_dim, units):
    """Weights of one Keras recurrent cell: GRU (``reset_after=True``, Keras' default: two bias vectors)
    3u(in + u) + 2·3u; LSTM 4u(in + u) + 4u."""
    if cell == "gru":
        return 3 * units * (input_dim + units) + 2 * 3 * units
    return 4 * units * (input_dim + units) + 4 * units


def num_parameters(config):
    """Exact weight count of an ``RNNSeq2Seq`` of ``config``."""
    c = config
    directions = 2 if c.bidirectional else 1
    per_direction = c.units // directions
    encoder = c.input_vocab_size * c.embedding_dim + sum(
        directions * cell_parameters(c.cell, c.embedding_dim if layer == 0 else c.units, per_direction)
        for layer in range(c.num_layers))
    decoder = c.target_vocab_size * c.embedding_dim + sum(
        cell_parameters(c.cell, c.embedding_dim + c.units if layer == 0 else c.units, c.units)
        for layer in range(c.num_layers))
    attention_units = c.attention_units or c.units
    attention = {"additive": 2 * c.units * attention_units + attention_units, "general": c.units * c.units,
                 "dot": 0, "none": 0}[c.attention]
    return encoder + decoder + attention + c.units * c.target_vocab_size + c.target_vocab_size


def _recurrent_layer(cell, units, name, go_backwards=False):
    layer = {"gru": keras.layers.GRU, "lstm": keras.layers.LSTM}[cell]
    return layer(units, return_sequences=True, return_state=True, go_backwards=go_backwards, name=name)


@keras.saving.register_keras_serializable(package="kerasplm")
class RNNEncoder(TracksLayerLists, keras.layers.Layer):
    """The seed's ``Seq2SeqEncoder``: embedding + ``num_layers`` GRU/LSTM layers, padding masked.

    Call: ``ids (B, S)``, ``padding_mask (B, S)`` float, 1.0 = padding -> ``(outputs (B, S, units), state)``:
    the top layer's output at every position (0 at padding) and each layer's final state, a tuple per layer:
    ``(h,)`` for GRU, ``(h, c)`` for LSTM, each ``(B, units)`` (a bidirectional layer's two directions
    concatenated, forward first).
    """

    def __init__(self, vocab_size, embedding_dim, units, num_layers=1, cell="gru", bidirectional=False, rate=0.0,
                 **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.embedding_dim, self.units = vocab_size, embedding_dim, units
        self.num_layers, self.cell, self.bidirectional, self.rate = num_layers, cell, bidirectional, rate
        per_direction = units // (2 if bidirectional else 1)
        self.embedding = keras.layers.Embedding(vocab_size, embedding_dim, name="embedding")
        self.forward_layers = [_recurrent_layer(cell, per_direction, f"{cell}{i + 1}") for i in range(num_layers)]
        self.backward_layers = ([_recurrent_layer(cell, per_direction, f"{cell}{i + 1}_backward", go_backwards=True)
                                 for i in range(num_layers)] if bidirectional else [])
        self.dropout = Dropout(rate)

    def build(self, input_shape=None):
        self.embedding.build((None, None))
        for i, layer in enumerate(self.forward_layers + self.backward_layers):
            width = self.embedding_dim if i % self.num_layers == 0 else self.units
            layer.build((None, None, width))
        self.built = True

    def call(self, ids, padding_mask=None, training=None):
        keep = None if padding_mask is None else tf.equal(padding_mask, 0)
        x = self.dropout(self.embedding(ids), training=training)
        states = []
        for i, forward in enumerate(self.forward_layers):
            if i > 0:
                x = self.dropout(x, training=training)
            out, *state = forward(x, mask=keep, training=training)
            if self.bidirectional:
                # go_backwards reads the sequence last position first (padding first: masked, the state stays 0)
                # and returns its outputs in that order: reversed back, position s holds h_s of the backward pass.
                back, *back_state = self.backward_layers[i](x, mask=keep, training=training)
                out = tf.concat([out, tf.reverse(back, axis=[1])], axis=-1)
                state = [tf.concat([f, b], axis=-1) for f, b in zip(state, back_state)]
            x = out
            states.append(tuple(state))
        if keep is not None:
            x = x * tf.cast(keep, x.dtype)[:, :, tf.newaxis]
        return x, tuple(states)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "embedding_dim": self.embedding_dim,
                "units": self.units, "num_layers": self.num_layers, "cell": self.cell,
                "bidirectional": self.bidirectional, "rate": self.rate}


@keras.saving.register_keras_serializable(package="kerasplm")
class RNNSeq2Seq(ConfigMixin, TracksLayerLists, keras.Model):
    """RNN encoder-decoder translator: ``((src_ids, tgt_in)) -> (logits, attention_weights)``, the Transformer
    translator's call, so the translator job, decoding and export take either.

    Args: the fields of :class:`RNNSeq2SeqConfig` (by keyword, or by position in its field order), plus Keras'
    ``name`` etc.

    Call:
      inputs: ``(src_ids (B, S), tgt_in (B, T))``, 0-padded ([START] y_1 .. for the target).
      training: dropout on/off.
    Returns:
      float32 logits ``(B, T, target_vocab_size)`` and ``{"decoder_layer1_block2": α (B, 1, T, S)}`` (the attention
      weights, a one-head "cross-attention" under the Transformer's key; ``{}`` without attention).

    Generation (:mod:`kerasplm.generation.seq2seq`): ``encode``, ``cross_attention_kv``, ``initial_cache`` (the
    decoder's initial state is the encoder's final state), ``call_with_cache``.
    """

    config_class = RNNSeq2SeqConfig
    preset_family = "rnn_seq2seq"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        c = self.config
        self.encoder = RNNEncoder(c.input_vocab_size, c.embedding_dim, c.units, num_layers=c.num_layers, cell=c.cell,
                                  bidirectional=c.bidirectional, rate=c.rate, name="encoder")
        self.target_embedding = keras.layers.Embedding(c.target_vocab_size, c.embedding_dim, name="target_embedding")
        cell = {"gru": keras.layers.GRUCell, "lstm": keras.layers.LSTMCell}[c.cell]
        self.decoder_cells = [cell(c.units, name=f"decoder_{c.cell}{i + 1}") for i in range(c.num_layers)]
        self.attention = (None if c.attention == "none" else
                          AdditiveAttention(c.attention_units or c.units, score=c.attention, name="attention"))
        self.dropout = Dropout(c.rate)
        self.final_layer = keras.layers.Dense(c.target_vocab_size, name="final_layer")
        self.build()

    @classmethod
    def from_preset(cls, preset, input_vocab_size, target_vocab_size, **overrides):
        """A model of a named preset (see ``PRESETS``) for the given vocabulary sizes."""
        config = get_preset(preset, input_vocab_size=input_vocab_size, target_vocab_size=target_vocab_size,
                            **overrides)
        return cls.from_config_object(config, name=preset)

    @staticmethod
    def num_parameters(config):
        return num_parameters(config)

    def build(self, input_shape=None):
        c = self.config
        self.encoder.build()
        self.target_embedding.build((None, None))
        for i, cell in enumerate(self.decoder_cells):
            cell.build((None, c.embedding_dim + c.units if i == 0 else c.units))
        if self.attention is not None:
            self.attention.build((None, None, c.units), (None, None, c.units))
        self.final_layer.build((None, None, c.units))
        self.built = True

    @property
    def has_attention(self):
        return self.attention is not None

    # ---- the two halves ----
    def encode(self, src_ids, pad_id=0, training=False):
        """``src_ids (B, S)`` -> ``((outputs (B, S, units), state), padding_mask (B, S) float, 1.0 = padding)``:
        the encoder's outputs and final state (:class:`RNNEncoder`)."""
        padding_mask = tf.cast(tf.equal(src_ids, pad_id), tf.float32)
        return self.encoder(src_ids, padding_mask=padding_mask, training=training), padding_mask

    def cross_attention_kv(self, encoded):
        """What every decoder step reads, computed once per source: ``{"keys": the keys projected by the attention
        (:meth:`AdditiveAttention.project_keys`), "values": the encoder outputs, "state": the encoder's final
        state}``; without attention ``{"context": h_S^(L) (B, units), "state": ...}``. Every tensor's leading
        dimension is the batch (the engine repeats them for beam search)."""
        outputs, state = encoded
        if self.attention is None:
            return {"context": state[-1][0], "state": state}
        return {"keys": self.attention.project_keys(outputs), "values": outputs, "state": state}

    def initial_cache(self, memory):
        """The decoder's initial state: the encoder's final state, every layer's (the seed's ``init_state``)."""
        return memory["state"]

    def decoder_step(self, embedded, state, memory, padding_mask=None, training=None):
        """One decoder step (module docstring): ``embedded (B, E)`` = embed(y_{t-1}), ``state`` s_{t-1} (a tuple per
        layer), ``memory`` (:meth:`cross_attention_kv`), ``padding_mask (B, S)`` -> ``(top output s_t^(L) (B, units),
        new state, α_t (B, S) float32 or None)``."""
        if self.attention is not None:
            query = state[-1][0][:, tf.newaxis, :]
            context, weights = self.attention.attend(query, memory["keys"], memory["values"],
                                                     padding_mask=padding_mask, training=training)
            x, weights = tf.concat([context[:, 0], embedded], axis=-1), weights[:, 0]
        else:
            x, weights = tf.concat([embedded, memory["context"]], axis=-1), None
        new_state = []
        for cell, layer_state in zip(self.decoder_cells, state):
            x, layer_state = cell(x, list(layer_state), training=training)
            new_state.append(tuple(layer_state))
        return x, tuple(new_state), weights

    def decode_sequence(self, tgt_in, memory, padding_mask, training=None):
        """Teacher forcing: the decoder over every target position, ``tgt_in (B, T)`` -> ``(top outputs (B, T,
        units), α (B, T, S) float32 or None, final state)``: a ``tf.scan`` of :meth:`decoder_step`."""
        embedded = self.dropout(self.target_embedding(tgt_in), training=training)
        batch = tf.shape(tgt_in)[0]
        # tf.scan's outputs need one structure every step: without attention, an empty (B, 0) stand-in.
        weights0 = tf.zeros([batch, 0]) if self.attention is None else tf.zeros_like(padding_mask)

        def step(carry, x_t):
            out, new_state, weights = self.decoder_step(x_t, carry[0], memory, padding_mask, training)
            return new_state, out, (weights0 if weights is None else weights)

        initializer = (memory["state"], tf.zeros([batch, self.config.units], self.compute_dtype), weights0)
        states, outputs, weights = tf.scan(step, tf.transpose(embedded, [1, 0, 2]), initializer=initializer)
        outputs = tf.transpose(outputs, [1, 0, 2])
        final_state = tf.nest.map_structure(lambda s: s[-1], states)
        return outputs, (None if self.attention is None else tf.transpose(weights, [1, 0, 2])), final_state

    def call(self, inputs, training=None):
        hidden, attention_weights = self.output_hidden(inputs, training=training)
        return tf.cast(self.final_layer(hidden), tf.float32), attention_weights

    def output_hidden(self, inputs, training=None):
        """The call up to the output layer: ``(top decoder outputs after dropout (B, T, units), attention weights
        {"decoder_layer1_block2": α (B, 1, T, S)}, or {} without attention)``."""
        src_ids, tgt_in = inputs
        encoded, padding_mask = self.encode(src_ids, training=training)
        memory = self.cross_attention_kv(encoded)
        outputs, weights, _ = self.decode_sequence(tgt_in, memory, padding_mask, training=training)
        hidden = self.dropout(outputs, training=training)
        return hidden, ({} if weights is None else {"decoder_layer1_block2": weights[:, tf.newaxis]})

    # ---- incremental decoding (kerasplm.generation) ----
    def call_with_cache(self, ids, cache, cache_index, memory, padding_mask=None):
        """The decoder at ``n`` new tokens ``ids (B, n)`` from state ``cache`` -> ``(float32 logits (B, n, V),
        hidden (B, n, units), new cache)``. ``cache_index`` (the position) is unused: the state is the whole
        history."""
        del cache_index
        embedded = self.target_embedding(ids)
        outputs = []
        for t in range(ids.shape[1]):
            out, cache, _ = self.decoder_step(embedded[:, t], cache, memory, padding_mask, training=False)
            outputs.append(out)
        hidden = tf.stack(outputs, axis=1)
        return tf.cast(self.final_layer(hidden), tf.float32), hidden, cache

    # The translator's loss and vocabulary check are the Transformer's (they read only output_hidden, final_layer and
    # the config's vocabulary sizes): masked cross-entropy sums, padding (0) excluded; a vocabulary file of the wrong size named.
    compute_loss_sums = Transformer.compute_loss_sums
    check_preprocessor = Transformer.check_preprocessor

    @property
    def max_source_length(self):
        return self.config.max_source_length

    @property
    def max_target_length(self):
        return self.config.max_target_length

    @property
    def vocab_size(self):
        """Target vocabulary size (the output layer's width)."""
        return self.config.target_vocab_size


register_presets("rnn_seq2seq", RNNSeq2Seq, PRESETS, num_parameters=num_parameters,
                 listing_overrides={"input_vocab_size": 8000, "target_vocab_size": 8000},
                 description="the seeds' RNN encoder-decoder, with or without Bahdanau attention")
