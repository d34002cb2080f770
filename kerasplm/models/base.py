"""Base classes of a model family: backbone, task model, preprocessor.

A family (``kerasplm/models/<family>.py``) is:

* a frozen **config dataclass** with ``validate()``, and presets registered with
  :func:`kerasplm.models.presets.register_presets` (with a ``num_parameters(config)`` formula);
* a **backbone** (:class:`Backbone`): ``call(inputs) -> dict`` of named outputs, e.g.
  ``{"sequence_output": (batch, seq, hidden), "pooled_output": (batch, hidden)}``; its constructor
  takes the config's fields as keyword arguments, so ``get_config``/``from_config`` round-trip;
* **task models** (:class:`Task`): ``Task(backbone=..., preprocessor=None, ...)`` adding a head; a task
  owns its loss and metrics through ``compute_loss_sums(batch, training)``, the contract of
  :class:`kerasplm.training.Trainer` (use ``Trainer(..., compute_loss=Task.trainer_loss)``);
* **preprocessors** (:class:`Preprocessor`): in-graph ``tf.Module``s that own the special tokens,
  packing, truncation and padding, turning strings into the backbone's input dict.

Every list of layers assigned to an attribute is checkpointed (:class:`TracksLayerLists`).

Keras' own ``Model.compute_loss(x, y, y_pred, sample_weight, training)`` is untouched, so
``compile`` + ``fit`` keep working; ``compute_loss_sums`` is a different, Trainer-facing method.
"""
import dataclasses

import keras
import tensorflow as tf

from kerasplm.layers.tracking import TracksLayerLists
from kerasplm.models import presets as preset_registry


class ConfigMixin:
    """Config dataclass <-> Keras config, and presets, for a ``keras.Model`` that stores ``self.config``.

    Subclasses set ``preset_family`` (the family name used with ``register_presets``) and take the
    config's fields as constructor keyword arguments.
    """

    preset_family = None

    def get_config(self):
        return {**dataclasses.asdict(self.config), "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config_object(cls, config, **kwargs):
        """A model of the given config dataclass (``kwargs``: Keras arguments such as ``name``)."""
        return cls(**dataclasses.asdict(config), **kwargs)

    @classmethod
    def presets(cls):
        """Names of this family's presets."""
        return sorted(preset_registry.get_family(cls.preset_family).presets)

    @classmethod
    def from_preset(cls, preset, **overrides):
        """A model of preset ``preset`` with config fields replaced by ``overrides`` (random weights)."""
        family = preset_registry.preset_family(preset)
        if family.name != cls.preset_family:
            raise ValueError(f"preset {preset!r} belongs to family {family.name!r}, not to "
                             f"{cls.__name__} (family {cls.preset_family!r}); expected one of {cls.presets()}")
        return cls.from_config_object(preset_registry.get_preset(preset, **overrides), name=preset)


class Backbone(ConfigMixin, TracksLayerLists, keras.Model):
    """Base of backbones: ``call(inputs, training=None) -> dict`` of named output tensors.

    Subclasses store ``self.config`` (validated config dataclass), build their layers in
    ``__init__`` and return a dict from ``call``.
    """

    @classmethod
    def num_parameters(cls, config):
        """The exact weight count of a model of ``config`` (a formula; subclasses implement it)."""
        raise NotImplementedError(f"{cls.__name__}.num_parameters")


class Task(TracksLayerLists, keras.Model):
    """Base of task models: a backbone plus a head, owning the loss and metrics.

    Args:
      backbone: a :class:`Backbone` (serialized into this model's config).
      preprocessor: optional :class:`Preprocessor`; not part of the Keras config (export it with the
        model, or pass it again after loading).
    Subclasses set ``backbone_class`` and implement ``call`` and ``compute_loss_sums``.
    """

    backbone_class = None

    def __init__(self, backbone, preprocessor=None, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.preprocessor = preprocessor

    def compute_loss_sums(self, batch, training):
        """``batch -> {"loss": sum over examples/tokens, "weight": their count, <metric>: sum, ...}``:
        sums (not means) so that :class:`kerasplm.training.Trainer` averages correctly across replicas."""
        raise NotImplementedError(f"{type(self).__name__}.compute_loss_sums")

    @staticmethod
    def trainer_loss(model, batch, training):
        """The Trainer's ``compute_loss(model, batch, training)`` for any task: ``model.compute_loss_sums``."""
        return model.compute_loss_sums(batch, training=training)

    @classmethod
    def from_preset(cls, preset, preprocessor=None, **overrides):
        """A task over ``backbone_class.from_preset(preset, **overrides)`` (random weights)."""
        return cls(backbone=cls.backbone_class.from_preset(preset, **overrides), preprocessor=preprocessor,
                   name=preset)

    def get_config(self):
        return {"backbone": keras.saving.serialize_keras_object(self.backbone), "name": self.name,
                "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)


class Preprocessor(tf.Module):
    """Base of in-graph preprocessors: strings -> the backbone's input dict, all TensorFlow ops.

    Subclasses own a tokenizer and the special token ids, and implement ``__call__``. The helper
    ``pad_and_truncate`` is the shared last step.
    """

    def __init__(self, sequence_length, pad_id=0, name=None):
        super().__init__(name=name)
        if not isinstance(sequence_length, int) or sequence_length <= 0:
            raise ValueError(f"sequence_length must be a positive integer, got {sequence_length!r}")
        self.sequence_length = sequence_length
        self.pad_id = pad_id

    @property
    def special_token_ids(self):
        """Dict name -> id of the special tokens this preprocessor inserts (at least ``pad``)."""
        return {"pad": self.pad_id}

    def pad_and_truncate(self, ids, keep_last=None):
        """Ragged ``ids (batch, None)`` -> dense int ``(batch, sequence_length)``, right-padded with
        ``pad_id``; rows longer than ``sequence_length`` are cut, and if ``keep_last`` is an id (e.g.
        [END]/[SEP]) a cut row still ends with it."""
        ids = tf.RaggedTensor.from_tensor(ids) if isinstance(ids, tf.Tensor) else ids
        width = self.sequence_length
        dense = ids[:, :width].to_tensor(default_value=tf.cast(self.pad_id, ids.dtype), shape=[None, width])
        if keep_last is None:
            return dense
        last_column = tf.range(width, dtype=tf.int64)[tf.newaxis, :] == width - 1
        cut_end = tf.logical_and(ids.row_lengths()[:, tf.newaxis] > width, last_column)
        return tf.where(cut_end, tf.cast(keep_last, ids.dtype), dense)

    def __call__(self, inputs):
        raise NotImplementedError(f"{type(self).__name__}.__call__")
