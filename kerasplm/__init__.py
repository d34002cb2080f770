"""kerasplm: a TensorFlow/Keras model zoo for the pretrained language models of the classic papers.

Importing kerasplm pins Keras 3 to the TensorFlow backend (the only backend kerasplm supports:
tokenization, export and TF Serving are TensorFlow features).
"""
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
if os.environ["KERAS_BACKEND"] != "tensorflow":
    raise ImportError(
        f"kerasplm needs KERAS_BACKEND=tensorflow, found KERAS_BACKEND={os.environ['KERAS_BACKEND']!r}"
    )

__version__ = "0.1.0"
