"""ELECTRA's discriminator (Clark et al. 2020): replaced-token detection on a BERT-shaped backbone.

    h = Backbone(x)                                        (B, T, H)   a :class:`BertBackbone` (E -> H projection
                                                                       when the embedding size differs)
    rtd_logits = gelu(h W_d + b_d) w_p + b_p               (B, T)      logit of "this token was replaced"

The head is HuggingFace's ``ElectraDiscriminatorPredictions`` (``dense``, ``dense_prediction``). ELECTRA's
generator is a small masked LM: :class:`kerasplm.models.bert_pretraining.BertPretrainer` with
``sentence_task="none"`` (its MLM head is ELECTRA's ``generator_predictions`` + tied ``generator_lm_head``).
A run holding either keeps the backbone as ``model.backbone``, so every BERT fine-tuning job's ``--init`` and the
BERT exports read it as they read a ``train bert`` run.
"""
import keras
import tensorflow as tf

from kerasplm.models.base import Task
from kerasplm.models.bert import BertBackbone, ChecksBackboneVocabulary, UntrackedPreprocessor

# config.json's task of a converted ELECTRA discriminator run (family ``bert``).
DISCRIMINATOR_TASK = "electra_discriminator"


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
        self.rtd_prediction = keras.layers.Dense(1, kernel_initializer=init, name="rtd_prediction")
        self.build()

    def build(self, input_shape=None):
        self.rtd_dense.build((None, None, self.backbone.config.hidden_size))
        self.rtd_prediction.build((None, None, self.backbone.config.hidden_size))
        self.built = True

    def call(self, inputs, training=None):
        hidden = self.backbone(inputs, training=training)["sequence_output"]
        logits = self.rtd_prediction(self.rtd_dense(hidden))[..., 0]
        return {"rtd_logits": tf.cast(logits, tf.float32), "sequence_output": hidden}
