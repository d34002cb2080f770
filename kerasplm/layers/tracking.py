"""Keras 3 / tf.train.Checkpoint interplay."""


def track_layer_list(parent, layers):
    """Also attach each layer of a list as its own attribute.

    Keras 3 tracks list attributes for ``model.weights`` and ``.keras`` files, but ``tf.train.Checkpoint``
    does not follow them: without this, checkpoints (and so resume and reload) would silently miss
    every block's weights. The weights are not duplicated: Keras de-duplicates tracked layers.
    """
    for layer in layers:
        setattr(parent, layer.name, layer)
