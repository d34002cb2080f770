"""The toy family's config, presets, model, job and exporter, on kerasplm's rails (the preset registry, runs, the
Trainer, jobs.job, export.base)."""
import dataclasses

import keras
import numpy as np
import tensorflow as tf

from kerasplm.export.base import ExportModule, save_version
from kerasplm.jobs.job import Job
from kerasplm.models.presets import get_preset, register_presets
from kerasplm.runs import load_run

from .manifest import FAMILY, ToyOptions


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    """``outputs`` scores per text (the first is the one trained)."""
    outputs: int = 1


def num_parameters(config):
    return 2 * config.outputs      # one weight and one bias per output


def make_model(config):
    """text length (bytes, scaled by 1/10) -> scores: a single Dense layer."""
    return keras.Sequential([keras.Input((1,)), keras.layers.Dense(config.outputs)], name="toy")


PRESETS = {"toy_linear": ToyConfig(), "toy_wide": ToyConfig(outputs=3)}
register_presets(FAMILY, make_model, PRESETS, num_parameters=num_parameters)


def features(texts):
    return tf.cast(tf.strings.length(texts), tf.float32)[:, None] / 10.0


def dataset(options):
    rng = np.random.default_rng(options.seed)
    texts = ["x" * n for n in rng.integers(1, options.max_chars + 1, size=256)]
    targets = np.array([[2 * len(t) + 1] for t in texts], np.float32) / 10.0
    ds = tf.data.Dataset.from_tensor_slices((features(tf.constant(texts)), targets))
    return ds.shuffle(256, seed=options.seed).batch(options.batch_size, drop_remainder=True).repeat()


def loss_sums(model, batch, training):
    x, y = batch
    error = model(x, training=training)[:, :1] - y
    return {"loss": tf.reduce_sum(tf.square(error)), "weight": tf.cast(tf.shape(x)[0], tf.float32)}


class ToyJob(Job):
    family, task, options_class, what = FAMILY, "regression", ToyOptions, "toy"

    def build_data(self):
        if not self.resumed:
            self.write_config(self.options.preset)
        self.train_dataset = dataset(self.options)

    def build_model(self):
        return make_model(get_preset(self.options.preset))

    def build_optimizer(self):
        return keras.optimizers.Adam(self.options.learning_rate)

    def compute_loss(self, model, batch, training):
        return loss_sums(model, batch, training)

    def describe(self, summary):
        self.log(f"toy: step {summary['step']}, loss {summary['final_loss']:.4f}")


def train_toy(out, options=None, log=print, **overrides):
    return ToyJob(out, options, log, **overrides).run()


class ToyModule(ExportModule):
    family = FAMILY

    def signatures(self):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def serving_default(text):
            return {"score": self.model(features(text))[:, 0] * 10.0}

        return {"serving_default": serving_default}


def export_toy_run(run, to, version=None, overwrite=False):
    path = save_version(ToyModule(load_run(run, family=FAMILY, what="a toy run")), to, version=version,
                        overwrite=overwrite, metadata={"note": "the toy family"})
    print(path)
    return path
