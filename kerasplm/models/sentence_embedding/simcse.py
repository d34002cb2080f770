"""Unsupervised SimCSE (Gao, Yao & Chen 2021): sentence embeddings by contrasting a sentence with itself.

Each sentence x_i of a batch is encoded twice; the two passes differ only by their dropout masks (the only
"augmentation"). With h_i, h_i⁺ the two representations and τ the temperature (0.05), the loss of x_i is
the cross-entropy of picking its own second view among the batch's (equation (4) of the paper, in-batch
negatives):

    ℓ_i = -log  exp(sim(h_i, h_i⁺) / τ) / Σ_j exp(sim(h_i, h_j⁺) / τ),      sim(a, b) = aᵀb / (‖a‖ ‖b‖)

The representation is the ``[CLS]`` hidden state with an MLP (dense + tanh) on top during training only, as
the paper's unsupervised setting (section 3 and appendix: "we take the [CLS] representation with an MLP layer
on top of it during training, and remove it during testing"), or the mean over the real tokens
(Sentence-BERT's pooling). Test-time embeddings (:meth:`BertSimCSE.call`, a
:class:`~kerasplm.models.bert.classifier.SentenceEncoder`'s) never use the MLP, so the embedder export
(:mod:`kerasplm.models.sentence_embedding.embedder_export`, the same pooling of the backbone) reproduces them.

:func:`alignment_uniformity` gives Wang & Isola's (2020) two measures that the paper uses (section 5).
"""
import keras
import numpy as np
import tensorflow as tf

from kerasplm.models.bert.classifier import SentenceEncoder

__all__ = ["BertSimCSE", "simcse_loss", "alignment_uniformity"]

INPUT_KEYS = ("token_ids", "segment_ids", "padding_mask")


def simcse_loss(first, second, temperature=0.05):
    """In-batch contrastive loss: ``first``, ``second`` ``(B, H)`` two views of the same B sentences.

    Returns ``(losses (B,), logits (B, B))``: ``logits[i, j] = cos(first_i, second_j) / temperature`` and
    ``losses[i]`` the cross-entropy of the true pair ``j = i`` (the diagonal).
    """
    first = tf.math.l2_normalize(tf.cast(first, tf.float32), axis=-1)
    second = tf.math.l2_normalize(tf.cast(second, tf.float32), axis=-1)
    logits = tf.matmul(first, second, transpose_b=True) / temperature
    labels = tf.range(tf.shape(logits)[0])
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), logits


@keras.saving.register_keras_serializable(package="kerasplm")
class BertSimCSE(SentenceEncoder):
    """Unsupervised SimCSE over a :class:`BertBackbone` (see the module docstring).

    Args:
      backbone: the BERT encoder (its dropout rates are SimCSE's noise: 0.1 in the paper).
      pooling: ``"cls"`` (the paper's), ``"mean"`` or ``"max"`` (:class:`SentenceEncoder`).
      temperature: τ of the softmax over cosine similarities (0.05).
      mlp: a dense + tanh layer on the pooled output during training only (default: with ``"cls"`` pooling).
      preprocessor: optional :class:`kerasplm.text.BertPreprocessor`.
    Call: the backbone's input dict -> float32 sentence embeddings ``(B, H)`` (pooled, no MLP, not normalized).
    Loss (``compute_loss_sums``): ``batch`` is the input dict of B sentences; both views come from one
    backbone pass over the batch stacked twice (``2B`` rows, independent dropout masks).
    """

    def __init__(self, backbone, pooling="cls", temperature=0.05, mlp=None, preprocessor=None, **kwargs):
        super().__init__(backbone, pooling=pooling, preprocessor=preprocessor, **kwargs)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
            raise ValueError(f"temperature must be a number > 0, got {temperature!r}")
        self.temperature = float(temperature)
        self.use_mlp = pooling == "cls" if mlp is None else bool(mlp)
        self.mlp = None
        if self.use_mlp:
            self.mlp = keras.layers.Dense(
                backbone.config.hidden_size, activation="tanh", name="simcse_mlp",
                kernel_initializer=keras.initializers.TruncatedNormal(stddev=backbone.config.initializer_range))
            self.mlp.build((None, backbone.config.hidden_size))
        self.built = True

    def training_representation(self, inputs, training=None):
        """``h`` of the loss: the pooled output, then the MLP when it is used."""
        pooled = self(inputs, training=training)
        return tf.cast(self.mlp(pooled), tf.float32) if self.mlp is not None else pooled

    @tf.autograph.experimental.do_not_convert
    def compute_loss_sums(self, batch, training):
        """``batch`` (input dict, B rows) -> ``{"loss": Σ ℓ_i, "weight": B, "accuracy": rows whose own view wins}``."""
        inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
        doubled = {k: tf.concat([inputs[k], inputs[k]], axis=0) for k in INPUT_KEYS if k in inputs}
        first, second = tf.split(self.training_representation(doubled, training=training), 2, axis=0)
        losses, logits = simcse_loss(first, second, self.temperature)
        wins = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), tf.range(tf.shape(logits)[0]))
        return {"loss": tf.reduce_sum(losses), "weight": tf.cast(tf.shape(losses)[0], tf.float32),
                "accuracy": tf.reduce_sum(tf.cast(wins, tf.float32))}

    def get_config(self):
        return {**super().get_config(), "temperature": self.temperature, "mlp": self.use_mlp}


def alignment_uniformity(first, second=None):
    """Wang & Isola (2020) on L2-normalized embeddings (NumPy in, floats out; lower is better for both).

    ``alignment`` = mean_i ‖f(x_i) − f(x_i⁺)‖² over positive pairs (``first[i]``, ``second[i]``);
    ``uniformity`` = log mean_{i<j} exp(−2 ‖f(x_i) − f(x_j)‖²) over the rows of ``first``.
    Returns ``{"uniformity"[, "alignment"]}``.
    """
    def normalized(x):
        x = np.asarray(x, np.float64)
        return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)

    first = normalized(first)
    distances = ((first[:, None, :] - first[None, :, :]) ** 2).sum(-1)
    upper = distances[np.triu_indices(len(first), k=1)]
    out = {"uniformity": float(np.log(np.mean(np.exp(-2.0 * upper))))}
    if second is not None:
        out["alignment"] = float(np.mean(((first - normalized(second)) ** 2).sum(-1)))
    return out
