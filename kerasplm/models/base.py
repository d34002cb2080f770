"""Base classes of a model family: backbone, task model, preprocessor.

A family (``kerasplm/models/<family>.py``) is:

* a frozen **config dataclass** with ``validate()``, and presets registered with
  :func:`kerasplm.models.presets.register_presets` (with a ``num_parameters(config)`` formula);
* a **backbone** (:class:`Backbone`): ``call(inputs) -> dict`` of named outputs, e.g.
  ``{"sequence_output": (batch, seq, hidden), "pooled_output": (batch, hidden)}``; it sets
  ``config_class`` and its constructor takes the config's fields (:class:`ConfigMixin` maps them onto
  the dataclass by name, so the dataclass is their one declaration), so ``get_config``/``from_config``
  round-trip;
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

from kerasplm.layers.tracking import TracksLayerLists
from kerasplm.text.preprocessing import Preprocessor  # noqa: F401  (re-exported: the base of every preprocessor)
from kerasplm.models import presets as preset_registry


def config_arguments(config_class, args, kwargs, owner=None):
    """Split a constructor's ``args``/``kwargs`` into a ``config_class`` dataclass and the other keyword
    arguments (Keras' ``name``, ``trainable``, ``dtype``...).

    Positional arguments are mapped by name in the order of ``dataclasses.fields(config_class)``: the
    dataclass is the one declaration of the fields, never re-listed by hand. The config is not validated
    here. Raises TypeError, as Python would, for too many positional arguments or a field given twice
    (``owner`` names the callee in the message; default the dataclass).
    """
    owner = owner or config_class.__name__
    names = [field.name for field in dataclasses.fields(config_class) if field.init]
    if len(args) > len(names):
        raise TypeError(f"{owner}() takes at most {len(names)} positional arguments (the fields of "
                        f"{config_class.__name__}: {', '.join(names)}), got {len(args)}")
    values = dict(zip(names, args))
    rest = {}
    for key, value in kwargs.items():
        if key in values:
            raise TypeError(f"{owner}() got multiple values for argument {key!r}")
        (values if key in names else rest)[key] = value
    return config_class(**values), rest


class ConfigMixin:
    """Config dataclass <-> Keras config, and presets, for a ``keras.Model`` that stores ``self.config``.

    Subclasses set ``config_class`` (the frozen config dataclass) and ``preset_family`` (the family name
    used with ``register_presets``). The constructor takes the config's fields, by keyword or by position
    in the dataclass' field order (:func:`config_arguments`), plus Keras' keyword arguments; it stores
    the validated dataclass as ``self.config`` before the subclass builds its layers from it::

        class MyBackbone(Backbone):
            config_class = MyConfig

            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)   # sets self.config
                self.dense = keras.layers.Dense(self.config.hidden_size)
    """

    config_class = None
    preset_family = None

    def __init__(self, *args, **kwargs):
        if self.config_class is None:
            raise TypeError(f"{type(self).__name__} sets no config_class (its config dataclass)")
        config, kwargs = config_arguments(self.config_class, args, kwargs, owner=type(self).__name__)
        super().__init__(**kwargs)
        self.config = config.validate()

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
