"""ELMo (Peters et al., 2018, "Deep contextualized word representations"), as AllenNLP's bilm-tf builds it.

The biLM (paper §3.1, eq. of the objective)::

    maximise  Σ_k [ log p(t_k | t_1..t_{k-1}; Θ_x, Θ→_LSTM, Θ_s)
                  + log p(t_k | t_{k+1}..t_N; Θ_x, Θ←_LSTM, Θ_s) ]

* token representation x_k (Θ_x, shared by both directions): the character CNN of Kim et al. (2016) —
  character embedding (dim 16) of the token's UTF-8 bytes (:mod:`kerasplm.text.characters`), one
  convolution per filter width (1..7 in ``elmo_original``), max-pool over the characters, activation,
  ``n_highway`` highway layers, linear projection to the LSTM projection size;
* forward and backward LSTMs, ``n_layers`` each (2 × cell 4096, projection 512 in ``elmo_original``), kept
  separate; the backward one reads the sentence right to left (``tf.reverse_sequence`` with each row's
  length, so padding stays at the end); a residual connection from layer 1's output into layer 2's;
* one softmax (Θ_s) over a word vocabulary shared by both directions (:class:`ElmoLanguageModel`).

ELMo (§3.2, eq. (1)): the 2L+1 representations R_k = {x_k, →h_kj, ←h_kj} are used as L+1 vectors
h_k0 = [x_k; x_k], h_kj = [→h_kj; ←h_kj], mixed by a task-specific :class:`ScalarMix`
``ELMo_k = γ Σ_j s_j h_kj``; :class:`ElmoEmbedder` runs a frozen biLM and owns that mix.

bilm-tf details kept here (their file/variable names are in :mod:`kerasplm.models.elmo.convert`):

* sentences are fed as ``<S> tokens </S>``; ELMo's outputs drop those two positions;
* the LSTM is TF1's ``LSTMCell(num_units, num_proj, cell_clip, proj_clip)`` (:class:`ProjectedLSTMCell`):
  one kernel over ``[x; m_prev]``, gates in the order i, j, f, o, forget bias +1, cell clipped to
  ±cell_clip, output m projected (no bias) and clipped to ±proj_clip;
* dropout on the input of every LSTM layer and on the top layer's output (their ``DropoutWrapper(
  input_keep_prob)`` and the dropout before the softmax); the residual adds the dropped-out input;
* the highway layer: g = σ(W_carry x + b_carry), y = g ⊙ relu(W_transform x + b_transform) + (1 − g) ⊙ x
  (bilm-tf calls g the "carry gate" although it gates the transform; the names are kept for conversion).

Training differs from bilm-tf in one respect: bilm-tf carries the LSTM state from one 20-token window of its
sentence stream to the next; here each window starts from a zero state (windows are independent examples,
which keeps batches shuffleable and resume exact).
"""
import dataclasses

import keras
import numpy as np
import tensorflow as tf

from kerasplm.layers.dropout import Dropout
from kerasplm.layers.embedding import table_logits
from kerasplm.layers.tracking import TracksLayerLists
from kerasplm.models.base import Backbone, Task
from kerasplm.models.presets import register_presets
from kerasplm.text.characters import MAX_CHARACTERS, NUM_CHARACTERS, add_sentence_boundaries

ORIGINAL_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))
ACTIVATIONS = {"relu": tf.nn.relu, "tanh": tf.tanh}


def _as_filters(filters):
    return tuple((int(w), int(n)) for w, n in filters)


@dataclasses.dataclass(frozen=True)
class ElmoConfig:
    """Hyper-parameters of the biLM (names follow bilm-tf's options.json where they exist).

    ``projection_dim=None``: no LSTM projection (outputs are ``lstm_dim`` wide); with no clipping either,
    the layers are Keras' fused ``keras.layers.LSTM`` (see :class:`ElmoBiLM`).
    """

    filters: tuple = ORIGINAL_FILTERS          # char_cnn.filters: (width, number of filters)
    char_embedding_dim: int = 16               # char_cnn.embedding.dim
    n_characters: int = NUM_CHARACTERS         # char_cnn.n_characters (262: bilm-tf's 261 + the 0 "no token")
    max_characters_per_token: int = MAX_CHARACTERS
    activation: str = "relu"                   # char_cnn.activation
    n_highway: int = 2                         # char_cnn.n_highway
    lstm_dim: int = 4096                       # lstm.dim (cell size)
    projection_dim: int = 512                  # lstm.projection_dim
    n_layers: int = 2                          # lstm.n_layers
    cell_clip: float = 3.0                     # lstm.cell_clip
    proj_clip: float = 3.0                     # lstm.proj_clip
    use_skip_connections: bool = True          # lstm.use_skip_connections (residual between layers)
    dropout: float = 0.1                       # 1 - keep_prob

    def __post_init__(self):
        object.__setattr__(self, "filters", _as_filters(self.filters))

    @property
    def n_filters(self):
        return sum(n for _, n in self.filters)

    @property
    def output_dim(self):
        """Width of one direction's LSTM outputs and of the token representation (P)."""
        return self.projection_dim or self.lstm_dim

    @property
    def fused(self):
        """True when every LSTM can be Keras' fused ``keras.layers.LSTM`` (no projection, no clipping)."""
        return self.projection_dim is None and self.cell_clip is None and self.proj_clip is None

    def validate(self):
        for name in ("char_embedding_dim", "n_characters", "lstm_dim", "n_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"ElmoConfig.{name} must be a positive integer, got {value!r}")
        if not self.filters or any(w <= 0 or n <= 0 for w, n in self.filters):
            raise ValueError(f"ElmoConfig.filters must be (width, count) pairs of positive integers, "
                             f"got {self.filters}")
        if self.max_characters_per_token < max(3, max(w for w, _ in self.filters)):
            raise ValueError(f"max_characters_per_token={self.max_characters_per_token} is shorter than the widest "
                             f"filter or than bow + one byte + eow")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; expected one of {sorted(ACTIVATIONS)}")
        if self.projection_dim is not None and self.projection_dim <= 0:
            raise ValueError(f"projection_dim must be positive or None, got {self.projection_dim}")
        if self.projection_dim is None and self.proj_clip is not None:
            raise ValueError("proj_clip needs a projection (projection_dim)")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        return self


PRESETS = {
    # AllenNLP's published biLMs ("Original" 93.6M, "Medium" 28.0M, "Small" 13.6M parameters).
    "elmo_original": ElmoConfig(),
    "elmo_medium": ElmoConfig(n_highway=1, lstm_dim=2048, projection_dim=256),
    "elmo_small": ElmoConfig(n_highway=1, lstm_dim=1024, projection_dim=128),
    # A CPU-sized biLM for the downstream experiments and notebook 04 (ELMo vectors 2P = 128 wide).
    "elmo_mini": ElmoConfig(filters=((1, 16), (2, 16), (3, 32), (4, 64), (5, 64)), n_highway=1, lstm_dim=256,
                            projection_dim=64),
    "elmo_tiny": ElmoConfig(filters=((1, 8), (2, 8), (3, 16)), char_embedding_dim=8, lstm_dim=32,
                            projection_dim=16),
}


def num_parameters(config):
    """Exact weight count of :class:`ElmoBiLM` (the word softmax is the task's: ``vocab_size · (P + 1)``)."""
    c, f, p, u = config.char_embedding_dim, config.n_filters, config.output_dim, config.lstm_dim
    chars = config.n_characters * c
    cnn = sum(w * c * n + n for w, n in config.filters)
    highway = config.n_highway * 2 * (f * f + f)
    projection = f * p + p if f != p else 0
    per_lstm = 4 * u * (p + p) + 4 * u + (u * p if config.projection_dim else 0)
    return chars + cnn + highway + projection + 2 * config.n_layers * per_lstm


@keras.saving.register_keras_serializable(package="kerasplm")
class Highway(keras.layers.Layer):
    """One highway layer (Srivastava et al., 2015) in bilm-tf's form:
    g = σ(x W_carry + b_carry); y = g ⊙ relu(x W_transform + b_transform) + (1 − g) ⊙ x.  Shape ``(..., d)``."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.carry = self.transform = None

    def build(self, input_shape):
        d = input_shape[-1]
        init = keras.initializers.RandomNormal(stddev=float(np.sqrt(1.0 / d)))
        self.carry = keras.layers.Dense(d, kernel_initializer=init, bias_initializer=keras.initializers.Constant(-2.0),
                                        name="carry")
        self.transform = keras.layers.Dense(d, kernel_initializer=init, name="transform")
        self.carry.build(input_shape)
        self.transform.build(input_shape)
        self.built = True

    def call(self, x):
        gate = tf.sigmoid(self.carry(x))
        return gate * tf.nn.relu(self.transform(x)) + (1.0 - gate) * x


@keras.saving.register_keras_serializable(package="kerasplm")
class CharacterEncoder(TracksLayerLists, keras.layers.Layer):
    """x_k from token k's characters: ``char_ids (batch, T, C)`` int -> ``(batch, T, P)``.

    embedding (n_characters, dim) -> per width w: Conv1D(w) 'valid' -> max over the C - w + 1 positions
    -> activation; concatenated (n_filters) -> ``n_highway`` × :class:`Highway` -> Dense(P) (omitted when
    n_filters == P, as bilm-tf does).
    """

    def __init__(self, filters, char_embedding_dim, n_characters, activation, n_highway, output_dim, **kwargs):
        super().__init__(**kwargs)
        self.activation = ACTIVATIONS[activation]
        self.char_embedding = keras.layers.Embedding(
            n_characters, char_embedding_dim, embeddings_initializer=keras.initializers.RandomUniform(-1.0, 1.0),
            name="char_embed")
        self.convolutions = [keras.layers.Conv1D(n, w, padding="valid", name=f"cnn_{i}",
                                                 kernel_initializer=keras.initializers.RandomUniform(-0.05, 0.05))
                             for i, (w, n) in enumerate(filters)]
        self.highways = [Highway(name=f"highway_{i}") for i in range(n_highway)]
        n_filters = sum(n for _, n in filters)
        self.projection = None
        if n_filters != output_dim:
            self.projection = keras.layers.Dense(
                output_dim, name="projection",
                kernel_initializer=keras.initializers.RandomNormal(stddev=float(np.sqrt(1.0 / n_filters))))
        self._dims = (char_embedding_dim, n_filters)

    def build(self, input_shape):
        char_dim, n_filters = self._dims
        self.char_embedding.build(None)
        for conv in self.convolutions:
            conv.build((None, input_shape[-1], char_dim))
        for highway in self.highways:
            highway.build((None, n_filters))
        if self.projection is not None:
            self.projection.build((None, n_filters))
        self.built = True

    def call(self, char_ids):
        shape = tf.shape(char_ids)
        flat = tf.reshape(char_ids, [-1, shape[-1]])                            # (batch·T, C)
        # One padding-only token is appended and dropped again at the end: with no token at all, TF 2.21's
        # oneDNN convolution (the default on AVX-512 CPUs) returns its input's shape instead of
        # (0, C', filters), and the concatenation below then has the wrong width.
        chars = self.char_embedding(tf.pad(flat, [[0, 1], [0, 0]]))            # (batch·T + 1, C, dim)
        # max-pool over character positions, then the activation (bilm-tf's order; equal for monotone ones)
        pooled = [self.activation(tf.reduce_max(conv(chars), axis=1)) for conv in self.convolutions]
        x = tf.concat(pooled, axis=-1)                                          # (batch·T + 1, n_filters)
        for highway in self.highways:
            x = highway(x)
        if self.projection is not None:
            x = self.projection(x)
        return tf.reshape(x[:-1], tf.concat([shape[:-1], tf.shape(x)[-1:]], axis=0))


@keras.saving.register_keras_serializable(package="kerasplm")
class ProjectedLSTMCell(keras.layers.Layer):
    """TF1's ``tf.nn.rnn_cell.LSTMCell(units, num_proj, cell_clip, proj_clip)`` (no peepholes), as bilm-tf uses it.

        [i, j, f, o] = [x; m_prev] W + b                     (W: (input + P, 4·units), gate order i, j, f, o)
        c = σ(f + 1) ⊙ c_prev + σ(i) ⊙ tanh(j)               (forget bias 1.0, added at run time)
        c = clip(c, ±cell_clip)
        m = (σ(o) ⊙ tanh(c)) W_P                             (W_P: (units, P), no bias; absent if P is None)
        m = clip(m, ±proj_clip)

    State ``[c (units), m (P)]``; output m. Keras' fused LSTM cannot express the projection or the clipping.
    """

    def __init__(self, units, projection_dim=None, cell_clip=None, proj_clip=None, **kwargs):
        super().__init__(**kwargs)
        self.units, self.projection_dim = units, projection_dim
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.output_size = projection_dim or units
        self.state_size = [units, self.output_size]

    def build(self, input_shape):
        init = keras.initializers.RandomUniform(-0.05, 0.05)
        self.kernel = self.add_weight(name="kernel", shape=(input_shape[-1] + self.output_size, 4 * self.units),
                                      initializer=init)
        self.bias = self.add_weight(name="bias", shape=(4 * self.units,), initializer="zeros")
        self.projection = None
        if self.projection_dim:
            self.projection = self.add_weight(name="projection", shape=(self.units, self.projection_dim),
                                              initializer=init)
        self.built = True

    @tf.autograph.experimental.do_not_convert  # plain TensorFlow ops: no need to convert (faster tracing)
    def call(self, inputs, states, training=None):
        c_prev, m_prev = states[0], states[1]
        gates = tf.matmul(tf.concat([inputs, m_prev], axis=-1), tf.cast(self.kernel, inputs.dtype))
        i, j, f, o = tf.split(gates + tf.cast(self.bias, inputs.dtype), 4, axis=-1)
        c = tf.sigmoid(f + 1.0) * c_prev + tf.sigmoid(i) * tf.tanh(j)
        if self.cell_clip is not None:
            c = tf.clip_by_value(c, -self.cell_clip, self.cell_clip)
        m = tf.sigmoid(o) * tf.tanh(c)
        if self.projection is not None:
            m = tf.matmul(m, tf.cast(self.projection, m.dtype))
        if self.proj_clip is not None:
            m = tf.clip_by_value(m, -self.proj_clip, self.proj_clip)
        return m, [c, m]

    def get_config(self):
        return {**super().get_config(), "units": self.units, "projection_dim": self.projection_dim,
                "cell_clip": self.cell_clip, "proj_clip": self.proj_clip}


def _lstm_layer(config, name):
    """One direction's LSTM layer over a whole sequence: ``(batch, T, P) -> (batch, T, P)``."""
    if config.fused:
        # Keras' LSTM: the cuDNN kernel on GPU (default activations, no mask); a generic loop on CPU.
        return keras.layers.LSTM(config.lstm_dim, return_sequences=True, name=name,
                                 kernel_initializer=keras.initializers.RandomUniform(-0.05, 0.05),
                                 recurrent_initializer=keras.initializers.RandomUniform(-0.05, 0.05))
    cell = ProjectedLSTMCell(units=config.lstm_dim, projection_dim=config.projection_dim,
                             cell_clip=config.cell_clip, proj_clip=config.proj_clip, name="cell")
    return keras.layers.RNN(cell, return_sequences=True, name=name)


def reverse_rows(x, lengths):
    """Reverse each row's first ``lengths[b]`` positions (padding stays at the end): ``(batch, T, ...)``."""
    return tf.reverse_sequence(x, lengths, seq_axis=1, batch_axis=0)


@keras.saving.register_keras_serializable(package="kerasplm")
class ElmoBiLM(Backbone):
    """The biLM: shared character encoder, separate forward and backward ``n_layers``-layer LSTMs.

    Args: the fields of :class:`ElmoConfig` (by keyword, or by position in its field order), plus Keras'
    ``name`` etc.
    Call: ``char_ids (batch, T, C)`` int32 — sentences as ``<S> tokens </S>`` (see
    :mod:`kerasplm.text.characters`), rows of 0 after each sentence — ->
    ``{"token_embedding": (batch, T, P), "forward": [n_layers × (batch, T, P)], "backward": [same],
    "layers": (batch, n_layers + 1, T, 2P)`` (ELMo's h_k0 = [x; x], h_kj = [→h; ←h]), ``"mask": (batch, T) bool}``.
    Outputs are 0 at padding positions. The forward output at k depends on tokens ≤ k only, the backward
    output on tokens ≥ k only.

    LSTM kernels: with a projection or clipping (every published ELMo) each layer is a ``keras.layers.RNN``
    over :class:`ProjectedLSTMCell`; with ``projection_dim=None`` and no clipping they are Keras' fused
    ``keras.layers.LSTM`` (cuDNN on GPU). The fused layer's gate order is i, f, c, o with no added forget
    bias, so :func:`fused_lstm_weights` maps cell weights onto it.
    """

    config_class = ElmoConfig
    preset_family = "elmo"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)   # ConfigMixin: self.config, mapped by field name
        cfg = self.config
        self.char_encoder = CharacterEncoder(filters=cfg.filters, char_embedding_dim=cfg.char_embedding_dim,
                                             n_characters=cfg.n_characters, activation=cfg.activation,
                                             n_highway=cfg.n_highway, output_dim=cfg.output_dim,
                                             name="char_encoder")
        self.forward_layers = [_lstm_layer(cfg, f"forward_{i}") for i in range(cfg.n_layers)]
        self.backward_layers = [_lstm_layer(cfg, f"backward_{i}") for i in range(cfg.n_layers)]
        self.dropouts = [Dropout(cfg.dropout, name=f"dropout_{i}") for i in range(cfg.n_layers)]
        self.build()

    @staticmethod
    def num_parameters(config):
        return num_parameters(config)

    def build(self, input_shape=None):
        cfg = self.config
        self.char_encoder.build((None, None, cfg.max_characters_per_token))
        for layer in self.forward_layers + self.backward_layers:
            layer.build((None, None, cfg.output_dim))
        self.built = True

    def _direction(self, layers, x, training):
        """One direction's stack: dropout on each layer's input; residual from layer 2 on (bilm-tf's
        ``DropoutWrapper(ResidualWrapper(cell))``: the dropped-out input is what gets added)."""
        outputs = []
        for i, (layer, dropout) in enumerate(zip(layers, self.dropouts)):
            x_in = dropout(x, training=training)
            x = layer(x_in, training=training)
            if i > 0 and self.config.use_skip_connections:
                x = x + x_in
            outputs.append(x)
        return outputs

    def call(self, char_ids, training=None):
        char_ids = tf.cast(char_ids, tf.int32)
        mask = tf.reduce_any(char_ids > 0, axis=-1)
        keep = tf.cast(mask, self.compute_dtype)[..., None]
        lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
        x = self.char_encoder(char_ids) * keep
        forward = [h * keep for h in self._direction(self.forward_layers, x, training)]
        backward = [reverse_rows(h, lengths) * keep
                    for h in self._direction(self.backward_layers, reverse_rows(x, lengths), training)]
        layers = [tf.concat([x, x], axis=-1)] + [tf.concat([f, b], axis=-1) for f, b in zip(forward, backward)]
        return {"token_embedding": x, "forward": forward, "backward": backward,
                "layers": tf.stack(layers, axis=1), "mask": mask}


def fused_lstm_weights(kernel, bias, input_dim):
    """:class:`ProjectedLSTMCell` weights without projection (kernel over [x; h], gates i, j, f, o, forget
    bias +1 at run time) -> ``keras.layers.LSTM``'s ``[kernel, recurrent_kernel, bias]`` (gates i, f, c, o)."""
    def reorder(w):
        i, j, f, o = np.split(np.asarray(w), 4, axis=-1)
        return np.concatenate([i, f, j, o], axis=-1)

    kernel, bias = reorder(kernel), reorder(bias)
    units = bias.shape[0] // 4
    bias[units:2 * units] += 1.0
    return [kernel[:input_dim], kernel[input_dim:], bias]


# ---------------------------------------------------------------------------------------------- the LM task
@keras.saving.register_keras_serializable(package="kerasplm")
class ElmoLanguageModel(Task):
    """The biLM's training objective: a word softmax (W (vocab, P), b (vocab)) shared by both directions.

    Call: ``char_ids (batch, T, C)`` -> ``{"forward_logits", "backward_logits"}`` float32 ``(batch, T, vocab)``
    (forward at k scores token k+1, backward at k scores token k−1).
    Loss (``compute_loss_sums``): ``batch = {"char_ids": (batch, T, C), "token_ids": (batch, T)}`` (word ids
    of the same tokens, −1 at padding) -> ``{"losses": {"forward": (S, C), "backward": (S, C)}}``: the summed
    negative log-likelihoods of each direction and their token counts, so exp(forward_loss) and
    exp(backward_loss) are exact perplexities. With ``num_sampled`` > 0 (and < vocab) training uses
    ``tf.nn.sampled_softmax_loss`` with log-uniform negatives (the vocabulary must be sorted by frequency, as
    bilm-tf's is; drawn with replacement by :meth:`_sample_candidates`, where bilm-tf's default sampler draws
    unique ones); evaluation always uses the full softmax. ``tf.nn.sampled_softmax_loss`` removes accidental
    hits with ``ComputeAccidentalHits``, which has no XLA kernel: sampled-softmax steps run without XLA.

    ``vocab_size=None``: no softmax (a biLM converted from bilm-tf, whose weight files have none): the model holds
    the :class:`ElmoBiLM` alone (its checkpoint is ``backbone`` only) and is used through it.
    """

    backbone_class = ElmoBiLM

    def __init__(self, backbone, vocab_size, num_sampled=0, preprocessor=None, **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        if vocab_size is not None and (isinstance(vocab_size, bool) or int(vocab_size) <= 0):
            raise ValueError(f"vocab_size must be positive (or None: no softmax), got {vocab_size}")
        self.vocab_size = None if vocab_size is None else int(vocab_size)
        self.num_sampled = int(num_sampled)
        if self.vocab_size is not None:
            self.output_dropout = Dropout(backbone.config.dropout, name="output_dropout")
            self.sampler_seed = keras.random.SeedGenerator(0, name="softmax_sampler")
        self.build()

    def build(self, input_shape=None):
        if self.vocab_size is not None:   # without a softmax the model holds the biLM alone
            p = self.backbone.config.output_dim
            self.softmax_weights = self.add_weight(name="softmax_W", shape=(self.vocab_size, p),
                                                   initializer=keras.initializers.RandomNormal(stddev=1.0 / np.sqrt(p)))
            self.softmax_bias = self.add_weight(name="softmax_b", shape=(self.vocab_size,), initializer="zeros")
        self.built = True

    @classmethod
    def from_preset(cls, preset, vocab_size, num_sampled=0, preprocessor=None, **overrides):
        return cls(backbone=ElmoBiLM.from_preset(preset, **overrides), vocab_size=vocab_size, num_sampled=num_sampled,
                   preprocessor=preprocessor, name=preset)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "num_sampled": self.num_sampled}

    def check_preprocessor(self, preprocessor):
        """ValueError naming the vocabulary file when ``preprocessor`` (an
        :class:`kerasplm.text.characters.ElmoPreprocessor`) does not fit: a vocabulary of another size than the
        softmax's, or another number of characters per token than the biLM's."""
        where = getattr(preprocessor, "vocabulary_file", None) or "the word vocabulary"
        if self.vocab_size is not None and preprocessor.vocab_size != self.vocab_size:
            raise ValueError(f"{where}: {preprocessor.vocab_size} tokens, but the model's softmax has "
                             f"{self.vocab_size}; the file is damaged or from another run")
        chars = self.backbone.config.max_characters_per_token
        if preprocessor.max_characters != chars:
            raise ValueError(f"the preprocessor of {where} makes {preprocessor.max_characters} characters per "
                             f"token, the biLM reads {chars}")

    def _check_softmax(self):
        if self.vocab_size is None:
            raise ValueError("this biLM has no word softmax (vocab_size None: a converted biLM); use its backbone")

    def logits(self, hidden):
        """``hidden (..., P)`` -> float32 ``(..., vocab)``."""
        self._check_softmax()
        return table_logits(tf.cast(hidden, tf.float32), self.softmax_weights) + self.softmax_bias

    def call(self, char_ids, training=None):
        out = self.backbone(char_ids, training=training)
        return {"forward_logits": self.logits(out["forward"][-1]), "backward_logits": self.logits(out["backward"][-1])}

    def _sample_candidates(self, labels):
        """Log-uniform (Zipfian) negatives, P(k) = log((k+2)/(k+1)) / log(V+1), drawn with replacement from a
        stateless generator seeded by a checkpointed SeedGenerator (so a resumed run draws what an
        uninterrupted one would). Returns ``sampled_values`` for ``tf.nn.sampled_softmax_loss``."""
        seed = tf.cast(tf.math.floormod(self.sampler_seed.next(), tf.int32.max - 1), tf.int32)
        log_range = tf.math.log(float(self.vocab_size + 1))
        u = tf.random.stateless_uniform([self.num_sampled], seed=seed)
        sampled = tf.minimum(tf.cast(tf.floor(tf.exp(u * log_range)), tf.int64) - 1, self.vocab_size - 1)

        def expected(k):
            k = tf.cast(k, tf.float32)
            return self.num_sampled * tf.math.log((k + 2.0) / (k + 1.0)) / log_range

        return sampled, expected(labels), expected(sampled)

    def _nll_sum(self, hidden, sources, targets, training):
        """Σ −log p(target | hidden) over positions whose token and target are real (ids ≥ 0), and their count."""
        valid = (sources >= 0) & (targets >= 0)
        labels = tf.maximum(targets, 0)
        hidden = tf.cast(self.output_dropout(hidden, training=training), tf.float32)
        if training and 0 < self.num_sampled < self.vocab_size:
            flat_h = tf.reshape(hidden, [-1, hidden.shape[-1]])
            flat_labels = tf.reshape(tf.cast(labels, tf.int64), [-1, 1])
            nll = tf.nn.sampled_softmax_loss(self.softmax_weights, self.softmax_bias, flat_labels, flat_h,
                                             self.num_sampled, self.vocab_size,
                                             sampled_values=self._sample_candidates(flat_labels))
            nll = tf.reshape(nll, tf.shape(labels))
        else:
            nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=self.logits(hidden))
        weight = tf.cast(valid, tf.float32)
        return tf.reduce_sum(nll * weight), tf.reduce_sum(weight)

    def compute_loss_sums(self, batch, training):
        self._check_softmax()
        token_ids = tf.cast(batch["token_ids"], tf.int32)
        out = self.backbone(batch["char_ids"], training=training)
        before, after = token_ids[:, :-1], token_ids[:, 1:]
        forward = self._nll_sum(out["forward"][-1][:, :-1], before, after, training)     # h_k predicts t_{k+1}
        backward = self._nll_sum(out["backward"][-1][:, 1:], after, before, training)    # h_k predicts t_{k-1}
        return {"losses": {"forward": forward, "backward": backward}}


# ---------------------------------------------------------------------------------------------- ELMo
@keras.saving.register_keras_serializable(package="kerasplm")
class ScalarMix(keras.layers.Layer):
    """ELMo's task-specific combination of the L+1 layers (Peters et al. 2018, eq. (1))::

        ELMo_k = γ Σ_{j=0..L} s_j h_kj,      s = softmax(w)   (w: L+1 scalars, init 0; γ init 1)

    with, if ``layer_norm``, each h_j first normalised as bilm-tf does: one mean and variance over all
    unmasked positions and features of the batch (ε = 1e-12).
    Call: ``layers (batch, L+1, T, D)``, optional ``mask (batch, T)`` -> ``(batch, T, D)``.
    """

    def __init__(self, num_layers, layer_norm=False, initial_weights=None, initial_gamma=1.0, **kwargs):
        super().__init__(**kwargs)
        self.num_layers, self.layer_norm = int(num_layers), bool(layer_norm)
        self.initial_weights = list(initial_weights) if initial_weights is not None else [0.0] * self.num_layers
        self.initial_gamma = float(initial_gamma)
        self.supports_masking = True  # the (batch, T) mask of the layers is the output's mask too
        if len(self.initial_weights) != self.num_layers:
            raise ValueError(f"initial_weights has {len(self.initial_weights)} values for {num_layers} layers")

    def build(self, input_shape=None):
        self.scalars = self.add_weight(name="scalars", shape=(self.num_layers,),
                                       initializer=keras.initializers.Constant(self.initial_weights))
        self.gamma = self.add_weight(name="gamma", shape=(),
                                     initializer=keras.initializers.Constant(self.initial_gamma))
        self.built = True

    @property
    def layer_weights(self):
        """s = softmax(w): the normalised layer weights, shape (L+1,)."""
        return tf.nn.softmax(self.scalars)

    def _normalise(self, h, mask):
        keep = tf.cast(mask, h.dtype)[:, :, None]
        count = tf.maximum(tf.reduce_sum(keep) * tf.cast(tf.shape(h)[-1], h.dtype), 1.0)
        mean = tf.reduce_sum(h * keep) / count
        variance = tf.reduce_sum(((h - mean) * keep) ** 2) / count
        return (h - mean) / tf.sqrt(variance + 1e-12)

    def call(self, layers, mask=None):
        layers = tf.convert_to_tensor(layers)
        if layers.shape[1] != self.num_layers:
            raise ValueError(f"ScalarMix of {self.num_layers} layers got {layers.shape[1]}")
        if self.layer_norm:
            if mask is None:
                mask = tf.ones(tf.stack([tf.shape(layers)[0], tf.shape(layers)[2]]), tf.bool)
            layers = tf.stack([self._normalise(layers[:, j], mask) for j in range(self.num_layers)], axis=1)
        s = tf.cast(self.layer_weights, layers.dtype)
        return tf.cast(self.gamma, layers.dtype) * tf.einsum("j,bjtd->btd", s, layers)

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers, "layer_norm": self.layer_norm,
                "initial_weights": self.initial_weights, "initial_gamma": self.initial_gamma}


@keras.saving.register_keras_serializable(package="kerasplm")
class ElmoEmbedder(TracksLayerLists, keras.layers.Layer):
    """ELMo for a downstream Keras model: a frozen :class:`ElmoBiLM` plus ``num_mixes`` trainable :class:`ScalarMix`.

    Call: ``char_ids (batch, n, C)`` of the sentence's tokens only (``word_char_ids`` rows, 0 rows after each
    sentence; ``<S>``/``</S>`` are added here and dropped again, as bilm-tf does) ->
    ``{"elmo": (batch, n, 2P), "elmo_representations": [num_mixes × (batch, n, 2P)],
    "layers": (batch, L+1, n, 2P), "mask": (batch, n) bool}``.
    The paper uses one mix at the task RNN's input ``[x_k; ELMo_k]`` and optionally a second at its
    output ``[h_k; ELMo_k]``: ``num_mixes=2``. The biLM is never trained (``trainable=False``, run with
    ``training=False``); only the mixes are.
    """

    def __init__(self, bilm, num_mixes=1, layer_norm=False, **kwargs):
        super().__init__(**kwargs)
        self.bilm = bilm
        self._freeze_bilm()
        self.num_mixes, self.layer_norm = int(num_mixes), bool(layer_norm)
        n = bilm.config.n_layers + 1
        self.mixes = [ScalarMix(n, layer_norm=layer_norm, name=f"scalar_mix_{i}") for i in range(self.num_mixes)]

    def _freeze_bilm(self):
        # Setting trainable on the biLM alone did not reach its sub-layers' variables in a model reloaded from
        # a .keras file (they came back trainable), so every variable is frozen explicitly.
        self.bilm.trainable = False
        for weight in self.bilm.weights:
            weight.trainable = False

    def build(self, input_shape=None):
        for mix in self.mixes:
            mix.build()
        self._freeze_bilm()
        self.built = True

    def call(self, char_ids):
        char_ids = tf.cast(char_ids, tf.int32)
        n = tf.shape(char_ids)[1]
        out = self.bilm(add_sentence_boundaries(char_ids), training=False)
        mask = tf.reduce_any(char_ids > 0, axis=-1)
        keep = tf.cast(mask, self.compute_dtype)[:, None, :, None]
        layers = tf.stop_gradient(out["layers"][:, :, 1:n + 1]) * keep          # drop <S>, </S> (and rows past it)
        mixed = [mix(layers, mask=mask) for mix in self.mixes]
        return {"elmo": mixed[0], "elmo_representations": mixed, "layers": layers, "mask": mask}

    def get_config(self):
        return {**super().get_config(), "bilm": keras.saving.serialize_keras_object(self.bilm),
                "num_mixes": self.num_mixes, "layer_norm": self.layer_norm}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["bilm"] = keras.saving.deserialize_keras_object(config["bilm"])
        return cls(**config)


register_presets("elmo", ElmoBiLM, PRESETS, num_parameters=num_parameters,
                 description="ELMo character-CNN biLM (Peters et al. 2018; AllenNLP bilm-tf)")
