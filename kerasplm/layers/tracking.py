"""Keras 3 / tf.train.Checkpoint interplay.

Keras 3 tracks list attributes for ``model.weights`` and ``.keras`` files, but ``tf.train.Checkpoint``
does not follow them: a block list stored as ``self.blocks = [...]`` would silently be missing from
checkpoints (and so from resume and reload). ``TracksLayerLists`` fixes that for every list attribute
of a layer or model; ``track_layer_list`` is the explicit form the seed's models used first.
"""
import keras


def track_layer_list(parent, layers):
    """Also attach each layer of a list as its own attribute (named by ``layer.name``).

    The weights are not duplicated: Keras de-duplicates tracked layers. Refuses to overwrite an
    existing attribute that is another object (a block named like an attribute would hide it).
    """
    for layer in layers:
        existing = getattr(parent, layer.name, None)
        if existing is not None and existing is not layer:
            raise ValueError(f"cannot track layer {layer.name!r} of a list on {type(parent).__name__}: the "
                             f"attribute {layer.name!r} already holds {type(existing).__name__}; rename the layer")
        if existing is None:
            setattr(parent, layer.name, layer)


class TracksLayerLists:
    """Mixin for ``keras.layers.Layer`` / ``keras.Model`` subclasses: every public attribute assigned a
    non-empty list or tuple of layers is tracked for ``tf.train.Checkpoint`` (``track_layer_list``).

    >>> class Stack(TracksLayerLists, keras.layers.Layer):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.blocks = [keras.layers.Dense(4, name=f"block{i}") for i in range(3)]  # checkpointed
    """

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if (not name.startswith("_") and isinstance(value, (list, tuple)) and value
                and all(isinstance(v, keras.layers.Layer) for v in value)):
            track_layer_list(self, value)
