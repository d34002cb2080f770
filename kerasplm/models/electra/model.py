"""ELECTRA (Clark et al. 2020): replaced-token detection on a BERT-shaped backbone, and its pretraining.

The discriminator::

    h = Backbone(x)                                        (B, T, H)   a :class:`BertBackbone` (E -> H projection
                                                                       when the embedding size differs)
    rtd_logits = gelu(h W_d + b_d) w_p + b_p               (B, T)      logit of "this token was replaced"

The head is HuggingFace's ``ElectraDiscriminatorPredictions`` (``dense``, ``dense_prediction``). A fresh head's
``b_p`` starts at the log-odds of the replaced share BERT's 15% masking gives (``RTD_PRIOR_LOGIT``), not at 0
(the prior-probability initialisation of Lin et al. 2017): started at 0, the first steps' largest gradient is
"lower every logit", and Adam, which moves every weight by about the learning rate whatever its gradient's size,
moved the whole encoder that way; under a short warmup its last hidden states became one vector for every token
(mean cosine 0.99999 after 300 steps of ``electra_bert_tiny`` at 1e-3) and the detector predicted the prior
everywhere, a state fine-tuning did not leave. ELECTRA's
generator is a small masked LM: :class:`kerasplm.models.bert.pretrainer.BertPretrainer` with
``sentence_task="none"`` (its MLM head is ELECTRA's ``generator_predictions`` + tied ``generator_lm_head``).
A run holding either keeps the backbone as ``model.backbone``, so every BERT fine-tuning job's ``--init`` and the
BERT exports read it as they read a ``train bert`` run.

Pretraining (:class:`ElectraPretrainer`, section 2 of the paper), on a batch of
:func:`kerasplm.data.pretraining.make_pretraining_dataset` (``x^masked`` = ``token_ids``, masked positions ``m``
with their original ids and weights)::

    x      = x^masked with x[m_p] = masked_ids_p                        the original text         (B, T)
    ℓ_G    = Generator(x^masked)[m]                                     MLM logits                (B, P, V)
    x̂_p   ~ softmax(ℓ_G[p])   (Gumbel-max, stateless seed; no gradient)  the replacements          (B, P)
    x^corr = x^masked with x^corr[m_p] = x̂_p                            the corrupted text        (B, T)
    y_t    = [x^corr_t != x_t] · padding_mask_t                          RTD labels: a sample equal to the
                                                                         original counts as original
    ℓ_D    = Discriminator(x^corr)                                       RTD logits                (B, T)
    L      = mean_{masked} CE(ℓ_G, x[m]) + λ · mean_{real tokens} BCE(ℓ_D, y)        λ = 50 (``rtd_weight``)

The generator is the discriminator's configuration with hidden size, FFN size and heads scaled by
``generator_size`` (the paper's Table 6: 1/4 for Small, 1/3 for Base; :func:`generator_config`), and the two
share the token, position and segment embeddings and their LayerNorm (section 3.2: one variable each, read by
the generator through its own E -> H_G projection, :class:`kerasplm.layers.embedding.SharedEmbedding`). The
sampled ids are integers, so no gradient flows from the discriminator's loss into the generator (the paper
trains the generator by maximum likelihood only). Replacements are drawn by :func:`sample_replacements` from a
stateless seed: in training the model's ``replacement_seed`` generator (checkpointed with the run, so a resume
draws what an uninterrupted run draws), in evaluation a fingerprint of the batch (held-out metrics do not depend
on when they are computed).
"""
import dataclasses
import math

import keras
import tensorflow as tf

from kerasplm.layers.embedding import SharedEmbedding
from kerasplm.models.bert import backbone as bert
from kerasplm.models.base import Task
from kerasplm.models.bert.backbone import BertBackbone, BertConfig, ChecksBackboneVocabulary, UntrackedPreprocessor
from kerasplm.models.bert.pretrainer import BertPretrainer, cross_entropy_sums
from kerasplm.models.presets import get_preset, register_presets

# config.json's task of a converted ELECTRA discriminator run (family ``bert``).
DISCRIMINATOR_TASK = "electra_discriminator"
# config.json's task of a ``kerasplm train electra`` run (family ``bert``): its model is the ElectraPretrainer.
PRETRAINING_TASK = "electra_pretraining"
# λ of the paper (section 3.1): the RTD loss is much smaller per token than the MLM loss.
RTD_WEIGHT = 50.0
# The initial bias of the RTD logit: log-odds of 15% of the tokens replaced (BERT's masking rate; a sample equal
# to the original makes the share a little smaller).
RTD_PRIOR_LOGIT = math.log(0.15 / 0.85)


@keras.saving.register_keras_serializable(package="kerasplm")
class ElectraDiscriminator(UntrackedPreprocessor, ChecksBackboneVocabulary, Task):
    """Replaced-token detection over a :class:`BertBackbone` (see the module docstring).

    Call: the backbone's input dict -> ``{"rtd_logits": float32 (B, T), "sequence_output": (B, T, H)}``.
    """

    backbone_class = BertBackbone

    def __init__(self, backbone, preprocessor=None, **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        c = backbone.config
        init = keras.initializers.TruncatedNormal(stddev=c.initializer_range)
        self.rtd_dense = keras.layers.Dense(c.hidden_size, activation="gelu", kernel_initializer=init,
                                            name="rtd_dense")
        self.rtd_prediction = keras.layers.Dense(1, kernel_initializer=init, name="rtd_prediction",
                                                 bias_initializer=keras.initializers.Constant(RTD_PRIOR_LOGIT))
        self.build()

    def build(self, input_shape=None):
        self.rtd_dense.build((None, None, self.backbone.config.hidden_size))
        self.rtd_prediction.build((None, None, self.backbone.config.hidden_size))
        self.built = True

    def call(self, inputs, training=None):
        hidden = self.backbone(inputs, training=training)["sequence_output"]
        logits = self.rtd_prediction(self.rtd_dense(hidden))[..., 0]
        return {"rtd_logits": tf.cast(logits, tf.float32), "sequence_output": hidden}


# ------------------------------------------------------------------------------------------------ sizes
@dataclasses.dataclass(frozen=True)
class ElectraConfig(BertConfig):
    """An ELECTRA preset: the discriminator's :class:`BertConfig` fields plus ``generator_size``, the fraction of
    the discriminator's hidden size, FFN size and heads the generator has (its layers, embedding size and
    vocabulary are the discriminator's)."""

    generator_size: float = 0.25

    def validate(self):
        super().validate()
        self.generator_config().validate()
        return self

    def discriminator_config(self):
        """The discriminator backbone's :class:`BertConfig`."""
        return BertConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(BertConfig)})

    def generator_config(self):
        """The generator backbone's :class:`BertConfig` (:func:`generator_config`)."""
        return generator_config(self.discriminator_config(), self.generator_size)


def generator_config(discriminator, generator_size):
    """The generator's :class:`BertConfig` for a discriminator config: hidden size, FFN size and heads times
    ``generator_size`` (rounded; at least one head), the discriminator's layers, vocabulary, positions and
    embedding size E (the shared tables' width: the generator projects E -> its hidden size)."""
    if isinstance(generator_size, bool) or not 0.0 < float(generator_size) <= 1.0:
        raise ValueError(f"generator_size must be in (0, 1] (a fraction of the discriminator's width), got "
                         f"{generator_size!r}")
    hidden = int(round(discriminator.hidden_size * generator_size))
    heads = max(1, int(round(discriminator.num_heads * generator_size)))
    if hidden < 1 or hidden % heads:
        raise ValueError(f"generator_size={generator_size} gives the generator hidden size {hidden} and {heads} "
                         f"head(s) (of the discriminator's {discriminator.hidden_size} and "
                         f"{discriminator.num_heads}): the hidden size must be a positive multiple of the heads")
    return dataclasses.replace(discriminator, hidden_size=hidden, num_heads=heads,
                               intermediate_size=max(1, int(round(discriminator.intermediate_size * generator_size))),
                               embedding_size=discriminator.embedding_size or discriminator.hidden_size)


PRESETS = {
    # For tests: 2 layers of width 32 over 16-wide embeddings; a generator of width 8.
    "electra_tiny": ElectraConfig(vocab_size=30522, num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64,
                                  max_positions=128, embedding_size=16, generator_size=0.25),
    # BERT-Tiny's and BERT-Mini's encoders (bert_tiny: 2 layers of 128; bert_mini: 4 layers of 256; Turc et al.
    # 2019) as the discriminator: ELECTRA against BERT at the same size on a CPU (benchmarks/electra_vs_bert.py).
    "electra_bert_tiny": ElectraConfig(vocab_size=30522, num_layers=2, hidden_size=128, num_heads=2,
                                       intermediate_size=512, generator_size=0.25),
    "electra_mini": ElectraConfig(vocab_size=30522, num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024,
                                  generator_size=0.25),
    # The paper's Table 6 (and google-research/electra's released models).
    "electra_small": ElectraConfig(vocab_size=30522, num_layers=12, hidden_size=256, num_heads=4,
                                   intermediate_size=1024, embedding_size=128, generator_size=0.25),
    "electra_base": ElectraConfig(vocab_size=30522, num_layers=12, hidden_size=768, num_heads=12,
                                  intermediate_size=3072, generator_size=1 / 3),
}


def _pooler(hidden):
    return hidden * hidden + hidden


def discriminator_parameters(config):
    """The discriminator's weights: its :class:`BertBackbone` (the shared embeddings and BERT's ``[CLS]`` pooler,
    which fine-tuning reads, included) + the RTD head (dense H -> H, dense H -> 1)."""
    h = config.hidden_size
    return bert.num_parameters(config.discriminator_config()) + (h * h + h) + (h + 1)


def generator_parameters(config):
    """The generator's weights as a model of its own: the shared embeddings, its projection, blocks and MLM head
    (dense H_G -> E, LayerNorm, output bias; the decoder is the tied word table). No pooler."""
    g = config.generator_config()
    e = g.embedding_size
    return bert.num_parameters(g) - _pooler(g.hidden_size) + (g.hidden_size * e + e) + 2 * e + g.vocab_size


def shared_parameters(config):
    """The embedding tables and LayerNorm the generator and discriminator share."""
    e = config.embedding_size or config.hidden_size
    return (config.vocab_size + config.max_positions + config.num_segments) * e + 2 * e


def num_parameters(config):
    """Every weight of an :class:`ElectraPretrainer` (the shared embeddings once)."""
    return discriminator_parameters(config) + generator_parameters(config) - shared_parameters(config)


def parameter_parts(config):
    """``kerasplm presets``' parts of an ELECTRA preset: discriminator and generator, each with the shared
    embeddings, and the discriminator without BERT's pooler (HuggingFace's ``ElectraForPreTraining``)."""
    disc = discriminator_parameters(config)
    return {"discriminator": disc, "discriminator without pooler": disc - _pooler(config.hidden_size),
            "generator": generator_parameters(config)}


# ------------------------------------------------------------------------------------------------ pretraining
def sample_replacements(logits, seed):
    """One draw from ``softmax(logits)`` per row by the Gumbel-max trick: ``argmax(logits + g)``,
    ``g = -log(-log u)``, ``u = (k + 1/2) / 2^24`` with ``k`` the top 24 bits of a stateless Philox word.

    ``logits``: float ``(..., V)`` (no gradient flows through the draw); ``seed``: int32 ``[2]``. Returns int32
    ``(...)``. The same seed gives the same ids eagerly, in a ``tf.function`` and under XLA: the words are drawn as
    uint32 and made floats here, because XLA's float Philox stream differs from the CPU kernel's (tested).
    """
    logits = tf.stop_gradient(tf.cast(logits, tf.float32))
    words = tf.random.stateless_uniform(tf.shape(logits), seed=seed, minval=None, maxval=None, dtype=tf.uint32,
                                        alg="philox")
    u = (tf.cast(tf.bitwise.right_shift(words, 8), tf.float32) + 0.5) * (1.0 / (1 << 24))   # in (0, 1)
    return tf.argmax(logits - tf.math.log(-tf.math.log(u)), axis=-1, output_type=tf.int32)


def replace_at_positions(token_ids, positions, values, weights):
    """``token_ids (B, T)`` with ``token_ids[b, positions[b, p]] = values[b, p]`` wherever ``weights[b, p] > 0``
    (the padded predictions, position 0 weight 0, change nothing). One-hot blend: static shapes, XLA-friendly."""
    token_ids = tf.cast(token_ids, tf.int32)
    hits = tf.one_hot(tf.cast(positions, tf.int32), tf.shape(token_ids)[1], dtype=tf.int32)     # (B, P, T)
    hits *= tf.cast(weights > 0, tf.int32)[..., tf.newaxis]
    written = tf.reduce_sum(hits * tf.cast(values, tf.int32)[..., tf.newaxis], axis=1)
    return tf.where(tf.reduce_max(hits, axis=1) > 0, written, token_ids)


def corrupt(batch, sampled):
    """``(corrupted token_ids (B, T), rtd_labels float32 (B, T))`` of a pretraining batch and the generator's
    samples at its masked positions: the labels are 1 where the corrupted token differs from the ORIGINAL one
    (a sample equal to it, or a masked position the masker left unchanged and the generator reproduced, is 0),
    over the real tokens."""
    weights = batch["masked_weights"]
    original = replace_at_positions(batch["token_ids"], batch["masked_positions"], batch["masked_ids"], weights)
    corrupted = replace_at_positions(batch["token_ids"], batch["masked_positions"], sampled, weights)
    real = tf.cast(batch["padding_mask"], tf.float32)
    return corrupted, tf.cast(tf.not_equal(corrupted, original), tf.float32) * real


def rtd_sums(logits, labels, weights):
    """Replaced-token detection sums over tokens of weight 1: ``{"loss": (Σ w·BCE, Σ w), "accuracy": ...,
    "precision": (true positives, predicted positives), "recall": (true positives, positives)}``; a token is
    predicted replaced when its logit is > 0."""
    labels, weights = tf.cast(labels, tf.float32), tf.cast(weights, tf.float32)
    logits = tf.cast(logits, tf.float32)
    bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    predicted = tf.cast(logits > 0, tf.float32)
    hits = predicted * labels * weights
    total = tf.reduce_sum(weights)
    return {"loss": (tf.reduce_sum(bce * weights), total),
            "accuracy": (tf.reduce_sum(tf.cast(tf.equal(predicted, labels), tf.float32) * weights), total),
            "precision": (tf.reduce_sum(hits), tf.reduce_sum(predicted * weights)),
            "recall": (tf.reduce_sum(hits), tf.reduce_sum(labels * weights))}


def _batch_seed(batch):
    """A stateless seed that is a function of the batch's content (evaluation's draws)."""
    ids = tf.cast(batch["token_ids"], tf.int64)
    length = tf.shape(ids, out_type=tf.int64)[1]
    mixed = tf.reduce_sum(ids * (tf.range(length) * 7919 + 1)[tf.newaxis] + tf.cast(batch["masked_positions"][:, :1],
                                                                                    tf.int64))
    return tf.cast(tf.stack([tf.math.floormod(mixed, 2 ** 31 - 1), tf.constant(0xE1EC, tf.int64)]), tf.int32)


@keras.saving.register_keras_serializable(package="kerasplm")
class ElectraPretrainer(UntrackedPreprocessor, ChecksBackboneVocabulary, Task):
    """ELECTRA's generator + discriminator trained jointly (see the module docstring).

    Args:
      backbone: the discriminator's :class:`BertBackbone` (``model.backbone``: what ``--init`` and the BERT exports
        read; its ``[CLS]`` pooler is not trained here, as a converted ELECTRA's is drawn fresh).
      generator_size: the generator's width as a fraction of the discriminator's (:func:`generator_config`).
      rtd_weight: λ of the loss.
      preprocessor: optional :class:`kerasplm.text.BertPreprocessor` (not part of the checkpoint).
    Call: a pretraining batch -> ``{"mlm_logits": (B, P, V), "replaced_ids": int32 (B, T) (the discriminator's
    input), "rtd_labels": (B, T), "rtd_logits": (B, T)}`` (float32).
    Attributes: ``discriminator`` (an :class:`ElectraDiscriminator` over ``backbone``), ``generator`` (a
    :class:`BertPretrainer`, ``sentence_task="none"``, reading the discriminator's embedding tables).
    """

    backbone_class = BertBackbone

    def __init__(self, backbone, preprocessor=None, generator_size=0.25, rtd_weight=RTD_WEIGHT, **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        if isinstance(rtd_weight, bool) or not float(rtd_weight) >= 0.0:
            raise ValueError(f"rtd_weight must be a number >= 0, got {rtd_weight!r}")
        self.generator_size, self.rtd_weight = float(generator_size), float(rtd_weight)
        c = backbone.config
        g = generator_config(c, self.generator_size)
        init = keras.initializers.TruncatedNormal(stddev=c.initializer_range)
        self.discriminator = ElectraDiscriminator(backbone, name="discriminator")
        shared = SharedEmbedding(backbone.embeddings, g.hidden_size, kernel_initializer=init, name="embeddings")
        self.generator = BertPretrainer(
            BertBackbone.from_config_object(g, embeddings=shared, pooler=False, name="generator_backbone"),
            sentence_task="none", name="generator")
        self.replacement_seed = keras.random.SeedGenerator(name="replacement_seed")
        self.build()

    def build(self, input_shape=None):
        self.built = True

    @classmethod
    def from_preset(cls, preset, preprocessor=None, **overrides):
        """A pretrainer of ELECTRA preset ``preset`` (random weights)."""
        return cls.from_config_object(get_preset(preset, **overrides), preprocessor=preprocessor, name=preset)

    @classmethod
    def from_config_object(cls, config, **kwargs):
        """A pretrainer of an :class:`ElectraConfig` (``kwargs``: ``preprocessor``, ``rtd_weight``, Keras')."""
        return cls(BertBackbone.from_config_object(config.discriminator_config()),
                   generator_size=config.generator_size, **kwargs)

    def draw_seed(self, batch, training):
        """The replacements' stateless seed: the next of ``replacement_seed`` in training, else the batch's."""
        if not training:
            return _batch_seed(batch)
        seed = self.replacement_seed.next()
        return tf.cast(tf.math.floormod(tf.cast(seed, tf.int64), tf.int32.max - 1), tf.int32)

    def call(self, inputs, training=None, seed=None):
        """``seed``: int32 ``[2]`` for the replacements (default :meth:`draw_seed`)."""
        mlm_logits = self.generator(inputs, training=training)["mlm_logits"]
        sampled = sample_replacements(mlm_logits, self.draw_seed(inputs, training) if seed is None else seed)
        replaced, labels = corrupt(inputs, sampled)
        rtd_logits = self.discriminator({**inputs, "token_ids": replaced}, training=training)["rtd_logits"]
        return {"mlm_logits": mlm_logits, "replaced_ids": replaced, "rtd_labels": labels, "rtd_logits": rtd_logits}

    def compute_loss_sums(self, batch, training):
        """``{"losses": {"mlm": (S, C), "rtd": (S, C, λ)}, "mlm_accuracy", "rtd_accuracy", "rtd_precision",
        "rtd_recall", "replaced_fraction"}``, each ``(sum, count)``: MLM over the masked positions, RTD over every
        real token."""
        outputs = self(batch, training=training)
        weights = tf.cast(batch["masked_weights"], tf.float32)
        mlm_loss, mlm_count, mlm_correct = cross_entropy_sums(batch["masked_ids"], outputs["mlm_logits"], weights)
        rtd = rtd_sums(outputs["rtd_logits"], outputs["rtd_labels"], batch["padding_mask"])
        return {"losses": {"mlm": (mlm_loss, mlm_count), "rtd": (*rtd["loss"], self.rtd_weight)},
                "mlm_accuracy": (mlm_correct, mlm_count), "rtd_accuracy": rtd["accuracy"],
                "rtd_precision": rtd["precision"], "rtd_recall": rtd["recall"],
                "replaced_fraction": (tf.reduce_sum(outputs["rtd_labels"]), rtd["loss"][1])}

    def get_config(self):
        return {**super().get_config(), "generator_size": self.generator_size, "rtd_weight": self.rtd_weight}


register_presets("electra", ElectraPretrainer, PRESETS, num_parameters=num_parameters,
                 parameter_parts=parameter_parts,
                 description="ELECTRA generator + discriminator (replaced-token detection) on BERT backbones")
