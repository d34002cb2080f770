"""BERT pretraining heads (Devlin et al. 2019, section 3.1, appendix A.1) and the pretraining task.

Masked LM, computed only at the ``P`` masked positions, so the ``V``-wide matmul costs ``B·P`` rows instead
of ``B·L``; the backbone's last block, too, runs only at ``[CLS]`` and those positions (its
``output_positions``: same values, ~13% less work per bert_mini step)::

    h_m   = h_L[b, masked_positions[b, m]]                         (B, P, H)
    t_m   = LN(gelu(h_m W_t + b_t))                                (B, P, E)   E = H, or ALBERT's embedding size
    logits_m = t_m E_tokᵀ + b_out                                  (B, P, V)   decoder tied to the word embeddings

Next-sentence (NSP) or sentence-order (SOP, ALBERT) prediction on the pooled ``[CLS]`` output::

    logits_s = pooled W_s + b_s                                    (B, 2)

Loss = mean MLM cross-entropy over the real masked positions + mean NSP/SOP cross-entropy over the batch,
each with its own denominator (the Trainer's multi-term contract). Metrics: MLM accuracy and NSP/SOP
accuracy; perplexity = exp(mean MLM loss).

Weights and HuggingFace ``BertForPreTraining`` names (see :func:`kerasplm.models.bert.convert.load_hf_bert_pretrainer`):
``mlm_head.dense`` = ``cls.predictions.transform.dense``, ``mlm_head.layer_norm`` =
``cls.predictions.transform.LayerNorm``, ``mlm_head.bias`` = ``cls.predictions.bias``, ``sentence_head`` =
``cls.seq_relationship``; the decoder weight is the backbone's word embedding (tied).
"""
import keras
import tensorflow as tf

from kerasplm.layers.embedding import table_logits
from kerasplm.models.base import Task
from kerasplm.models.bert.backbone import BertBackbone, ChecksBackboneVocabulary, UntrackedPreprocessor

SENTENCE_TASKS = ("nsp", "sop", "none")
# config.json's task of a ``kerasplm train bert`` run (family ``bert``): its checkpoint's ``model`` is the pretrainer.
PRETRAINING_TASK = "pretraining"


@keras.saving.register_keras_serializable(package="kerasplm")
class BertMaskedLMHead(keras.layers.Layer):
    """BERT's MLM head: dense + exact GELU + LayerNorm, then the tied decoder plus an output bias.

    Args: ``output_size`` (E: the word-embedding width), ``vocab_size``, ``layer_norm_epsilon``,
    ``initializer_range``, ``activation`` (``"gelu"``, exact; ``"gelu_tanh"``: ALBERT's ``gelu_new``).
    Call: ``hidden (B, L, H)``, ``positions int (B, P)``, ``embeddings (V, E)`` -> float32 logits ``(B, P, V)``;
    ``positions=None`` when ``hidden`` is already ``(B, P, H)`` at the positions (the backbone's
    ``output_positions``).
    """

    def __init__(self, output_size, vocab_size, layer_norm_epsilon=1e-12, initializer_range=0.02, activation="gelu",
                 **kwargs):
        super().__init__(**kwargs)
        if activation not in ("gelu", "gelu_tanh"):
            raise ValueError(f"activation must be 'gelu' or 'gelu_tanh', got {activation!r}")
        self.output_size, self.vocab_size = int(output_size), int(vocab_size)
        self.layer_norm_epsilon, self.initializer_range = layer_norm_epsilon, initializer_range
        self.activation = activation
        init = keras.initializers.TruncatedNormal(stddev=initializer_range)
        # The tanh form is applied in call(): a Dense's activation string names the exact GELU only.
        self.dense = keras.layers.Dense(self.output_size, activation="gelu" if activation == "gelu" else None,
                                        kernel_initializer=init, name="dense")
        self.layer_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="layer_norm")

    def build(self, hidden_shape=None, *args):
        self.dense.build((None, None, hidden_shape[-1] if hidden_shape else None))
        self.layer_norm.build((None, None, self.output_size))
        self.bias = self.add_weight(shape=(self.vocab_size,), initializer="zeros", name="bias")
        self.built = True

    def call(self, hidden, positions, embeddings):
        picked = hidden if positions is None else tf.gather(hidden, tf.cast(positions, tf.int32), batch_dims=1)
        x = self.dense(picked)
        if self.activation == "gelu_tanh":
            x = keras.activations.gelu(x, approximate=True)
        x = self.layer_norm(x)
        logits = table_logits(x, embeddings)                                           # (B, P, V)
        return tf.cast(logits, tf.float32) + tf.cast(self.bias, tf.float32)

    def get_config(self):
        return {**super().get_config(), "output_size": self.output_size, "vocab_size": self.vocab_size,
                "layer_norm_epsilon": self.layer_norm_epsilon, "initializer_range": self.initializer_range,
                **({"activation": self.activation} if self.activation != "gelu" else {})}


def cross_entropy_sums(labels, logits, weights):
    """(Σ w·CE, Σ w, Σ w·[argmax = label]) over every position, float32."""
    labels = tf.cast(labels, tf.int32)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
    return tf.reduce_sum(ce * weights), tf.reduce_sum(weights), tf.reduce_sum(correct * weights)


@keras.saving.register_keras_serializable(package="kerasplm")
class BertPretrainer(UntrackedPreprocessor, ChecksBackboneVocabulary, Task):
    """MLM + NSP / SOP pretraining over a :class:`BertBackbone` (see the module docstring).

    Args:
      backbone: a :class:`BertBackbone` (ALBERT options included).
      sentence_task: ``"nsp"`` (BERT), ``"sop"`` (ALBERT) or ``"none"`` (RoBERTa: MLM only).
      preprocessor: optional :class:`kerasplm.text.BertPreprocessor` over the tokenizer the corpus was tokenized
        with (not part of the checkpoint).
    Call: dict with ``token_ids``, ``segment_ids``, ``padding_mask`` (each ``(B, L)``) and ``masked_positions``
    ``(B, P)`` -> ``{"mlm_logits": (B, P, V)}`` plus ``"sentence_logits": (B, 2)`` unless ``sentence_task="none"``
    (float32).
    Loss (``compute_loss_sums``): the batch of :func:`kerasplm.data.pretraining.make_pretraining_dataset`.
    """

    backbone_class = BertBackbone

    def __init__(self, backbone, preprocessor=None, sentence_task="nsp", **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        if sentence_task not in SENTENCE_TASKS:
            raise ValueError(f"sentence_task must be one of {SENTENCE_TASKS}, got {sentence_task!r}")
        self.sentence_task = sentence_task
        c = backbone.config
        init = keras.initializers.TruncatedNormal(stddev=c.initializer_range)
        self.mlm_head = BertMaskedLMHead(c.embedding_size or c.hidden_size, c.vocab_size, c.layer_norm_epsilon,
                                         c.initializer_range, activation=c.activation, name="mlm_head")
        self.sentence_head = None
        if sentence_task != "none":
            self.sentence_head = keras.layers.Dense(2, kernel_initializer=init, name="sentence_head")
        self.build()

    def build(self, input_shape=None):
        self.mlm_head.build((None, None, self.backbone.config.hidden_size))
        if self.sentence_head is not None:
            self.sentence_head.build((None, self.backbone.config.hidden_size))
        self.built = True

    @property
    def word_embeddings(self):
        """The (V, E) word-embedding table the MLM decoder is tied to."""
        return self.backbone.embeddings.embedding.embeddings

    def call(self, inputs, training=None):
        # The last block runs only at [CLS] and the masked positions: nothing else reaches the losses.
        outputs = self.backbone(inputs, training=training, output_positions=inputs["masked_positions"])
        result = {"mlm_logits": self.mlm_head(outputs["sequence_output"], None, self.word_embeddings)}
        if self.sentence_head is not None:
            result["sentence_logits"] = tf.cast(self.sentence_head(outputs["pooled_output"]), tf.float32)
        return result

    def compute_loss_sums(self, batch, training):
        """``{"losses": {"mlm": (S, C), "nsp"|"sop": (S, C)}, "mlm_accuracy": (s, c), "nsp_accuracy": ...}``."""
        outputs = self(batch, training=training)
        weights = tf.cast(batch["masked_weights"], tf.float32)
        mlm_loss, mlm_count, mlm_correct = cross_entropy_sums(batch["masked_ids"], outputs["mlm_logits"], weights)
        results = {"losses": {"mlm": (mlm_loss, mlm_count)}, "mlm_accuracy": (mlm_correct, mlm_count)}
        if self.sentence_head is not None:
            labels = batch["next_sentence_label"]
            ones = tf.ones(tf.shape(labels), tf.float32)
            loss, count, correct = cross_entropy_sums(labels, outputs["sentence_logits"], ones)
            results["losses"][self.sentence_task] = (loss, count)
            results[f"{self.sentence_task}_accuracy"] = (correct, count)
        return results

    def get_config(self):
        return {**super().get_config(), "sentence_task": self.sentence_task}
