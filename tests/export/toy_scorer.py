"""The export base's toy model (tests/export/test_base.py), in a module of its own: the test that kills an export
midway saves it from a subprocess (``python -c``), which imports it from here."""
import keras
import tensorflow as tf

from kerasplm.export import ExportModule


class Scorer(ExportModule):
    """Strings -> two scores from a Dense layer over (byte length, word count): a Keras model behind a string
    signature. ``leaky=True`` normalizes by the batch's longest input, breaking per-row independence."""

    family = "toy_scorer"

    def __init__(self, leaky=False):
        tf.keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input([2]), keras.layers.Dense(2)])
        super().__init__(model)
        self.leaky = leaky

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def score(self, inputs):
        features = tf.stack([tf.cast(tf.strings.length(inputs), tf.float32),
                             tf.cast(tf.strings.split(inputs).row_lengths(), tf.float32)], axis=1)
        if self.leaky:
            features = features / tf.maximum(1.0, tf.reduce_max(features))
        return {"scores": self.model(features), "length": tf.strings.length(inputs)}

    def signatures(self):
        return {"serving_default": self.score}
