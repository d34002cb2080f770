"""AWD-LSTM (Merity, Keskar & Socher 2018) and ULMFiT's classifier on it (Howard & Ruder 2018; seed ``002_*``,
"语言模型和迁移学习 → 3. ULMFiT").

The language model, with x_t the token ids of a window and L layers::

    E' = EmbeddingDropout(E)                                   (whole words dropped, p = embedding_dropout)
    h^0_t = LockedDropout(E'[x_t])                             (one mask per sequence, p = input_dropout)
    h^l_t = LSTM_l(h^{l-1}_t, h^l_{t-1}; U_l ⊙ M_l)            (DropConnect on U_l, p = weight_dropout)
    h^l   = LockedDropout(h^l)   between layers                (p = hidden_dropout)
    P(x_{t+1} | x_≤t) = softmax(LockedDropout(h^L_t) Eᵀ + b)   (tied: the output layer is the embedding, p =
                                                               output_dropout; the last LSTM is embedding_dim wide)

No attention, no shortcut: three plain LSTMs (``hidden_dim``, ``hidden_dim``, ``embedding_dim`` units). The
dropout layers are :mod:`kerasplm.layers.rnn_dropout`'s; the LSTM is :class:`WeightDropLSTM` (gates i, f, g, o,
PyTorch's order and initialization; one bias per gate).

The classifier (:class:`ULMFiTClassifier`, ULMFiT §3.3) reads the text with the same backbone and pools its last
layer over the real (unpadded) positions, concat pooling ``h_c = [h_T; maxpool(H); meanpool(H)]``, then two blocks
``BatchNorm → Dropout → Dense`` (ReLU after the first, 50 units, as fastai's). A long text is read in ``bptt``-sized
chunks (BPT3C): the state is carried from chunk to chunk (gradients stop at chunk boundaries) and the pooling is
over every chunk. The forward values equal one pass over the whole text; only the gradients are truncated.

Layer groups (discriminative fine-tuning, gradual unfreezing; :meth:`layer_groups`): the language model's are
``LSTM_1 .. LSTM_L`` (0 .. L-1) and the embedding with the output bias (L, the top: the embedding is the output
layer); the classifier's are the embedding (0), ``LSTM_1 .. LSTM_L`` (1 .. L) and the head (L + 1), fastai's split.

Presets (``kerasplm presets``; counts with WikiText-2's 33,278-word vocabulary): ``awd_lstm_tiny`` (tests) and
``awd_lstm`` (the paper's: embedding 400, 3 layers of 1150, 400 units; dropouts of the AWD-LSTM code's defaults).
"""
import dataclasses

import keras
import tensorflow as tf

from kerasplm.layers.dropout import Dropout
from kerasplm.layers.rnn_dropout import EmbeddingDropout, LockedDropout, WeightDropLSTM
from kerasplm.models.base import Backbone, Task
from kerasplm.models.presets import register_presets
from kerasplm.runs import serializable
from kerasplm.training.losses import classification_loss_sums, masked_accuracy_counts, masked_sparse_cross_entropy

__all__ = ["AWDLSTMConfig", "AWDLSTMBackbone", "AWDLSTMLanguageModel", "ULMFiTClassifier", "PRESETS", "PRESET_NAMES",
           "concat_pooling", "num_parameters"]

WIKITEXT2_VOCAB_SIZE = 33278


@dataclasses.dataclass(frozen=True)
class AWDLSTMConfig:
    """Hyper-parameters of an AWD-LSTM; the dropout rates as the AWD-LSTM code names them: ``embedding_dropout``
    (dropoute), ``input_dropout`` (dropouti), ``weight_dropout`` (wdrop), ``hidden_dropout`` (dropouth),
    ``output_dropout`` (dropout)."""

    vocab_size: int
    embedding_dim: int = 400
    hidden_dim: int = 1150
    num_layers: int = 3
    embedding_dropout: float = 0.1
    input_dropout: float = 0.65
    weight_dropout: float = 0.5
    hidden_dropout: float = 0.3
    output_dropout: float = 0.4
    tie_weights: bool = True

    DROPOUTS = ("embedding_dropout", "input_dropout", "weight_dropout", "hidden_dropout", "output_dropout")

    def validate(self):
        for name in ("vocab_size", "embedding_dim", "hidden_dim", "num_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"AWDLSTMConfig.{name} must be a positive integer, got {value!r}")
        for name in self.DROPOUTS:
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"AWDLSTMConfig.{name} must be in [0, 1), got {getattr(self, name)}")
        return self

    def layer_units(self):
        """Each LSTM's width: ``hidden_dim``, and the last ``embedding_dim`` when the output layer is tied."""
        last = self.embedding_dim if self.tie_weights else self.hidden_dim
        return [self.hidden_dim] * (self.num_layers - 1) + [last]

    def scaled_dropout(self, factor, base=None):
        """The config with every dropout rate set to ``base``'s (default: its own) times ``factor`` (fastai's
        ``drop_mult``). A fine-tuning stage passes its preset as ``base``: fastai multiplies the architecture's rates
        at every stage, so the stages' factors do not compound (0.3 then 0.5 would otherwise leave 0.15)."""
        base = self if base is None else base
        return dataclasses.replace(self, **{n: min(getattr(base, n) * factor, 0.99) for n in self.DROPOUTS})


PRESETS = {
    "awd_lstm_tiny": AWDLSTMConfig(vocab_size=WIKITEXT2_VOCAB_SIZE, embedding_dim=16, hidden_dim=24, num_layers=3),
    "awd_lstm": AWDLSTMConfig(vocab_size=WIKITEXT2_VOCAB_SIZE),
}
PRESET_NAMES = sorted(PRESETS)


def num_parameters(config):
    """Exact weight count of an :class:`AWDLSTMLanguageModel`: the embedding V·E, per LSTM 4·(in·H + H·H + H), and
    the output layer's bias V (its weights are the embedding; untied: H_L·V more)."""
    c = config
    total, width = c.vocab_size * c.embedding_dim, c.embedding_dim
    for units in c.layer_units():
        total += 4 * (width * units + units * units + units)
        width = units
    return total + c.vocab_size + (0 if c.tie_weights else width * c.vocab_size)


def _inputs(inputs):
    """``(token_ids, padding_mask float32)`` of a dict or of bare ids (0 = padding)."""
    if isinstance(inputs, dict):
        token_ids = inputs["token_ids"]
        mask = inputs.get("padding_mask")
    else:
        token_ids, mask = inputs, None
    if mask is None:
        mask = tf.cast(tf.not_equal(token_ids, 0), tf.float32)
    return token_ids, tf.cast(mask, tf.float32)


@serializable
class AWDLSTMBackbone(Backbone):
    """The embedding and the L weight-dropped LSTMs (see the module docstring).

    Call: ``inputs`` = ``token_ids (batch, time)`` or ``{"token_ids", "padding_mask"}`` (1.0 real; default ids != 0),
    ``initial_state`` (a list of ``(h, c)`` per layer; default zeros), ``chunk_length`` (read the sequence in
    chunks of this many positions, gradients stopped between them: BPT3C) ->
    ``{"sequence_output": (batch, time, H_L) the last LSTM's outputs (before the output dropout),
    "final_state": [(h, c)] per layer (after each row's last real position), "padding_mask": (batch, time)}``.
    """

    config_class = AWDLSTMConfig
    preset_family = "awd_lstm"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        c = self.config
        self.embedding_dropout = EmbeddingDropout(c.embedding_dropout, name="embedding_dropout")
        self.input_dropout = LockedDropout(c.input_dropout, name="input_dropout")
        self.lstms = [WeightDropLSTM(units, c.weight_dropout, name=f"lstm{i + 1}")
                      for i, units in enumerate(c.layer_units())]
        self.hidden_dropouts = [LockedDropout(c.hidden_dropout, name=f"hidden_dropout{i + 1}")
                                for i in range(c.num_layers - 1)]
        self.build()

    @staticmethod
    def num_parameters(config):
        return num_parameters(config) - config.vocab_size   # the output bias is the language model's

    def build(self, input_shape=None):
        if getattr(self, "embeddings", None) is None:
            self.embeddings = self.add_weight(shape=(self.config.vocab_size, self.config.embedding_dim),
                                              initializer=keras.initializers.RandomUniform(-0.1, 0.1),
                                              name="embeddings")
        width = self.config.embedding_dim
        for lstm in self.lstms:
            lstm.build((None, None, width))
            width = lstm.units
        self.built = True

    def zero_state(self, batch):
        return [lstm.zero_state(batch) for lstm in self.lstms]

    @tf.autograph.experimental.do_not_convert
    def _run_layers(self, x, mask, state, kernels, hidden_masks):
        """Every LSTM over ``x`` from ``state`` -> (last outputs, new state)."""
        new_state = []
        for i, (lstm, kernel, layer_state) in enumerate(zip(self.lstms, kernels, state)):
            x, s = lstm.run(x, mask, layer_state, kernel)
            new_state.append(s)
            if i < len(self.lstms) - 1 and hidden_masks is not None:
                x = x * hidden_masks[i]
        return x, new_state

    @tf.autograph.experimental.do_not_convert
    def call(self, inputs, initial_state=None, chunk_length=None, training=None):
        token_ids, mask = _inputs(inputs)
        batch = tf.shape(token_ids)[0]
        table = self.embedding_dropout(self.embeddings, training=training)
        x = tf.gather(table, tf.cast(token_ids, tf.int32))
        x = self.input_dropout(x, training=training)
        # Masks drawn once per call and shared by every chunk: the DropConnect'ed U and the locked dropouts.
        kernels = [lstm.recurrent_weights(training) for lstm in self.lstms]
        hidden_masks = None
        if training and self.config.hidden_dropout > 0:
            hidden_masks = [d.mask(batch, lstm.units, x.dtype) for d, lstm in zip(self.hidden_dropouts, self.lstms)]
        state = self.zero_state(batch) if initial_state is None else [tuple(s) for s in initial_state]
        if chunk_length is None:
            outputs, state = self._run_layers(x, mask, state, kernels, hidden_masks)
        else:
            outputs, state = self._chunked(x, mask, state, kernels, hidden_masks, int(chunk_length))
        return {"sequence_output": outputs, "final_state": state, "padding_mask": mask}

    @tf.autograph.experimental.do_not_convert
    def _chunked(self, x, mask, state, kernels, hidden_masks, chunk):
        """BPT3C: the sequence in chunks of ``chunk`` positions (the last one padded), the state carried through them
        with its gradient stopped; -> the same (outputs, state) as one pass. A batch no longer than ``chunk`` is one
        chunk of its own width: the recurrence runs over the batch's positions only, never ``chunk`` of them."""
        batch, time = tf.shape(x)[0], tf.shape(x)[1]
        chunk = tf.maximum(tf.minimum(chunk, time), 1)
        chunks = (time + chunk - 1) // chunk
        pad = chunks * chunk - time
        x = tf.pad(x, [[0, 0], [0, pad], [0, 0]])
        mask = tf.pad(mask, [[0, 0], [0, pad]])
        xs = tf.transpose(tf.reshape(x, tf.stack([batch, chunks, chunk, tf.shape(x)[2]])), [1, 0, 2, 3])
        masks = tf.transpose(tf.reshape(mask, tf.stack([batch, chunks, chunk])), [1, 0, 2])
        flat = tuple(t for s in state for t in s)
        units = self.lstms[-1].units

        def read_chunk(carry, elements):
            chunk_x, chunk_mask = elements
            layer_state = [(tf.stop_gradient(carry[1 + 2 * i]), tf.stop_gradient(carry[2 + 2 * i]))
                           for i in range(len(self.lstms))]
            out, new_state = self._run_layers(chunk_x, chunk_mask, layer_state, kernels, hidden_masks)
            return (out,) + tuple(t for s in new_state for t in s)

        initial = (tf.zeros(tf.stack([batch, chunk, units]), x.dtype),) + flat
        scanned = tf.scan(read_chunk, (xs, masks), initializer=initial)
        outputs = tf.reshape(tf.transpose(scanned[0], [1, 0, 2, 3]), tf.stack([batch, chunks * chunk, units]))
        final = [(scanned[1 + 2 * i][-1], scanned[2 + 2 * i][-1]) for i in range(len(self.lstms))]
        return outputs[:, :time], final


@serializable
class AWDLSTMLanguageModel(Task):
    """Next-word model: an :class:`AWDLSTMBackbone`, the output dropout and the tied output layer.

    Call: ``token_ids (batch, time)`` (or the backbone's dict) -> float32 logits ``(batch, time, vocab_size)``;
    :meth:`forward` also takes and returns the recurrent state (a language model reading a stream carries it from
    window to window). Loss (``compute_loss_sums``): ``batch`` = windows ``(batch, time + 1)`` (inputs ``[:, :-1]``,
    labels ``[:, 1:]``) or ``(inputs, labels)``, label 0 ignored: summed cross-entropy in nats per word.
    """

    backbone_class = AWDLSTMBackbone

    def __init__(self, backbone, preprocessor=None, **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        c = backbone.config
        self.output_dropout = LockedDropout(c.output_dropout, name="output_dropout")
        self.decoder_bias = self.add_weight(shape=(c.vocab_size,), initializer="zeros", name="decoder_bias")
        if not c.tie_weights:
            self.decoder = keras.layers.Dense(c.vocab_size, use_bias=False, name="decoder")
            self.decoder.build((None, None, c.layer_units()[-1]))
        self.built = True

    @tf.autograph.experimental.do_not_convert
    def forward(self, inputs, initial_state=None, training=None):
        """-> ``(float32 logits (batch, time, vocab), final state)``."""
        out = self.backbone(inputs, initial_state=initial_state, training=training)
        hidden = self.output_dropout(out["sequence_output"], training=training)
        if self.backbone.config.tie_weights:
            logits = tf.einsum("bth,vh->btv", hidden, self.backbone.embeddings)
        else:
            logits = self.decoder(hidden)
        return tf.cast(logits + self.decoder_bias, tf.float32), out["final_state"]

    @tf.autograph.experimental.do_not_convert
    def call(self, inputs, training=None):
        return self.forward(inputs, training=training)[0]

    @tf.autograph.experimental.do_not_convert
    def loss_sums(self, batch, initial_state=None, training=None):
        """The next-word loss sums of ``batch`` from ``initial_state`` -> ``(sums, final state)``."""
        if isinstance(batch, (tuple, list)):
            token_ids, labels = batch
        else:
            token_ids, labels = batch[:, :-1], batch[:, 1:]
        logits, state = self.forward(token_ids, initial_state, training=training)
        # Not the XLA-fused loss of the fixed-width LMs: it compiles once per window length, and these vary.
        loss, count = masked_sparse_cross_entropy(labels, logits)
        correct, _ = masked_accuracy_counts(labels, logits)
        return {"loss": loss, "weight": count, "accuracy": correct}, state

    @tf.autograph.experimental.do_not_convert
    def compute_loss_sums(self, batch, training):
        return self.loss_sums(batch, training=training)[0]

    @property
    def vocab_size(self):
        return self.backbone.config.vocab_size

    def layer_groups(self):
        """``(layer_group(variable) -> group, top group)``: LSTM_l is group l - 1, the embedding and the output
        layer the top, L (see the module docstring)."""
        groups = {}
        for i, lstm in enumerate(self.backbone.lstms):
            groups.update({v.path: i for v in lstm.trainable_variables})
        top = len(self.backbone.lstms)
        return (lambda variable: groups.get(variable.path, top)), top

    def check_preprocessor(self, tokenizer):
        """ValueError naming the file when the tokenizer's vocabulary is not the embedding's size."""
        _check_vocabulary(tokenizer, self.vocab_size)


def _check_vocabulary(preprocessor, vocab_size):
    tokenizer = getattr(preprocessor, "tokenizer", preprocessor)
    size = getattr(tokenizer, "vocab_size", None)
    if size is not None and size != vocab_size:
        where = getattr(tokenizer, "vocabulary_file", None) or "the tokenizer"
        raise ValueError(f"{where}: {size} words, but the model's embedding has vocab_size={vocab_size}; the file is "
                         f"damaged or from another run")


@tf.autograph.experimental.do_not_convert
def concat_pooling(outputs, final_h, mask):
    """ULMFiT's concat pooling over the real positions: ``outputs (batch, time, H)``, ``final_h (batch, H)`` (the
    state after each row's last real position), ``mask (batch, time)`` -> ``[h_T; max_t h_t; mean_t h_t]``
    ``(batch, 3H)``; padding counts in neither the max nor the mean."""
    m = tf.cast(mask, outputs.dtype)[:, :, tf.newaxis]
    lowest = tf.constant(outputs.dtype.min, outputs.dtype)
    pooled_max = tf.reduce_max(tf.where(m > 0, outputs, lowest), axis=1)
    pooled_mean = tf.reduce_sum(outputs * m, axis=1) / tf.maximum(tf.reduce_sum(m, axis=1), 1.0)
    return tf.concat([final_h, pooled_max, pooled_mean], axis=-1)


@serializable
class ULMFiTClassifier(Task):
    """ULMFiT's classifier (§3.3) on an :class:`AWDLSTMBackbone` (see the module docstring).

    Args:
      backbone: the (fine-tuned) language model's backbone.
      num_labels: classes; ``labels`` their names (stored in the config, what an export answers).
      bptt: chunk length of BPT3C (a text longer than this is read in chunks; None: in one pass).
      head_units: width of the hidden dense layer (fastai: 50).
      pool_dropout, head_dropout: dropout before the first and the second dense layer (fastai: 0.4, 0.1).
      pair_input: always False (a single text per example); kept for the classifier export's contract.

    Call: ``{"token_ids", "padding_mask"}`` (:class:`kerasplm.text.word_vocab.WordSequencePreprocessor`) -> float32
    logits ``(batch, num_labels)``. Loss: ``batch = (inputs, labels)``, cross-entropy sums and accuracy.
    """

    backbone_class = AWDLSTMBackbone

    def __init__(self, backbone, num_labels, preprocessor=None, labels=None, bptt=70, head_units=50,
                 pool_dropout=0.4, head_dropout=0.1, pair_input=False, **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        if pair_input:
            raise ValueError("the ULMFiT classifier reads one text per example (no text pairs)")
        self.num_labels = int(num_labels)
        self.labels = list(labels or [])
        self.pair_input = False
        self.bptt = None if bptt is None else int(bptt)
        self.head_units, self.pool_dropout_rate, self.head_dropout_rate = int(head_units), pool_dropout, head_dropout
        width = 3 * backbone.config.layer_units()[-1]
        self.pool_norm = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name="pool_norm")
        self.pool_dropout = Dropout(pool_dropout, name="pool_dropout")
        self.hidden = keras.layers.Dense(head_units, activation="relu", name="hidden")
        self.hidden_norm = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name="hidden_norm")
        self.head_dropout = Dropout(head_dropout, name="head_dropout")
        self.classifier = keras.layers.Dense(self.num_labels, name="classifier")
        self.pool_norm.build((None, width))
        self.hidden.build((None, width))
        self.hidden_norm.build((None, head_units))
        self.classifier.build((None, head_units))
        self.built = True

    @tf.autograph.experimental.do_not_convert
    def pooled(self, inputs, training=None):
        """The concat-pooled features ``(batch, 3·H_L)`` of the text (BPT3C chunks in training when it is longer
        than ``bptt``; inference reads it in one pass, the same values)."""
        token_ids, _ = _inputs(inputs)
        chunk = None
        if training and self.bptt is not None:
            static = token_ids.shape[1]
            if static is None or static > self.bptt:
                chunk = self.bptt
        out = self.backbone(inputs, chunk_length=chunk, training=training)
        return concat_pooling(out["sequence_output"], out["final_state"][-1][0], out["padding_mask"])

    @tf.autograph.experimental.do_not_convert
    def call(self, inputs, training=None):
        x = self.pool_dropout(self.pool_norm(self.pooled(inputs, training), training=training), training=training)
        x = self.head_dropout(self.hidden_norm(self.hidden(x), training=training), training=training)
        return tf.cast(self.classifier(x), tf.float32)

    @tf.autograph.experimental.do_not_convert
    def compute_loss_sums(self, batch, training):
        inputs, labels = batch
        return classification_loss_sums(labels, self(inputs, training=training))

    def layer_groups(self):
        """``(layer_group(variable) -> group, top group)``: the embedding 0, LSTM_l l, the head L + 1."""
        groups = {self.backbone.embeddings.path: 0}
        for i, lstm in enumerate(self.backbone.lstms):
            groups.update({v.path: i + 1 for v in lstm.trainable_variables})
        top = len(self.backbone.lstms) + 1
        return (lambda variable: groups.get(variable.path, top)), top

    def predict_texts(self, texts, batch_size=64):
        """Float32 logits ``(n, num_labels)`` of strings, through the attached preprocessor."""
        rows = []
        for i in range(0, len(texts), batch_size):
            rows.append(self(self.preprocessor(tf.constant(texts[i:i + batch_size], tf.string)), training=False))
        return tf.concat(rows, axis=0).numpy()

    def check_preprocessor(self, preprocessor):
        _check_vocabulary(preprocessor, self.backbone.config.vocab_size)

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels, "labels": self.labels, "bptt": self.bptt,
                "head_units": self.head_units, "pool_dropout": self.pool_dropout_rate,
                "head_dropout": self.head_dropout_rate}


register_presets("awd_lstm", AWDLSTMBackbone, PRESETS, num_parameters=num_parameters,
                 listing_overrides={"vocab_size": WIKITEXT2_VOCAB_SIZE},
                 description="AWD-LSTM language model (Merity et al. 2018), ULMFiT's encoder")
