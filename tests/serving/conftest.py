"""Fixtures shared by the serving tests: tiny SavedModels built with plain TensorFlow ops."""
import os
import shutil

import pytest
import tensorflow as tf
import tensorflow_text as tf_text


TOY_SIGNATURES = ("repeat", "analyze", "scale", "add", "split", "total", "slow")


class _ToyModule(tf.Module):
    """A toy servable: ``reverse=False`` upper-cases, ``reverse=True`` also reverses the text."""

    def __init__(self, reverse: bool):
        super().__init__()
        self.reverse = reverse

    def _transform(self, inputs):
        upper = tf.strings.upper(inputs)
        if not self.reverse:
            return upper
        chars = tf.strings.unicode_split(upper, "UTF-8").to_tensor("")
        return tf.strings.reduce_join(tf.reverse(chars, axis=[1]), axis=1)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def default(self, inputs):
        return {"outputs": self._transform(inputs)}

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="inputs"),
        tf.TensorSpec([], tf.int32, name="times"),
    ])
    def repeat(self, inputs, times):
        check = tf.debugging.assert_non_negative(times, message="times must be >= 0")
        with tf.control_dependencies([check]):
            tiled = tf.repeat(inputs[:, None], times, axis=1)
        return {"outputs": tf.strings.reduce_join(tiled, axis=1, separator=" ")}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def analyze(self, inputs):
        # A tensorflow-text op, so loading needs tensorflow_text imported.
        words = tf_text.WhitespaceTokenizer().tokenize(inputs)
        return {
            "upper": tf.strings.upper(inputs),
            "num_words": words.row_lengths(),
            "echo_bytes": inputs,  # TF Serving answers *_bytes outputs as {"b64": ...}
        }

    @tf.function(input_signature=[
        tf.TensorSpec([None, 2], tf.float32, name="values"),
        tf.TensorSpec([], tf.float32, name="factor"),
    ])
    def scale(self, values, factor):
        return {"scaled": values * factor}

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.int64, name="values"),
        tf.TensorSpec([], tf.int8, name="delta"),
    ])
    def add(self, values, delta):
        return {"sums": values + tf.cast(delta, tf.int64)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def split(self, inputs):
        # A ragged result padded with "" to the longest row of the call (as the translator pads tokens):
        # chunked calls must pad to the longest row of the whole request.
        words = tf_text.WhitespaceTokenizer().tokenize(inputs)
        return {"words": words.to_tensor(""), "lengths": words.row_lengths()}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def total(self, inputs):
        # A scalar output: a request cannot be split into chunks for this signature.
        return {"rows": tf.size(inputs), "outputs": tf.strings.upper(inputs)}

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="inputs"),
        tf.TensorSpec([], tf.int64, name="milliseconds"),
    ])
    def slow(self, inputs, milliseconds):
        # Sleeps in the graph (tf.data's SleepDataset; no Python in the SavedModel), then upper-cases.
        dataset = tf.data.Dataset.from_tensors(inputs)
        sleeping = tf.raw_ops.SleepDataset(
            input_dataset=dataset._variant_tensor, sleep_microseconds=milliseconds * 1000,
            output_types=[tf.string], output_shapes=[[None]])
        delayed = tf.data.experimental.from_variant(sleeping, dataset.element_spec).get_single_element()
        return {"outputs": self._transform(delayed)}


def save_toy_model(path: str, reverse: bool = False) -> str:
    """Write a toy SavedModel to ``path`` (signatures: serving_default and TOY_SIGNATURES)."""
    module = _ToyModule(reverse)
    signatures = {name: getattr(module, name) for name in TOY_SIGNATURES}
    signatures["serving_default"] = module.default
    tf.saved_model.save(module, path, signatures=signatures)
    return path


@pytest.fixture(scope="session")
def toy_saved_models(tmp_path_factory):
    """Two toy SavedModels built once per session: ``{"upper": path, "reverse": path}``."""
    root = tmp_path_factory.mktemp("toy_saved_models")
    return {
        "upper": save_toy_model(str(root / "upper"), reverse=False),
        "reverse": save_toy_model(str(root / "reverse"), reverse=True),
    }


def install_toy_version(base_path: str, version: int, source: str) -> str:
    """Copy a SavedModel into ``base_path/<version>`` atomically (tmp sibling, then rename)."""
    os.makedirs(base_path, exist_ok=True)
    tmp = os.path.join(base_path, f".tmp-{version}-copy")
    shutil.copytree(source, tmp)
    final = os.path.join(base_path, str(version))
    os.rename(tmp, final)
    return final


@pytest.fixture
def toy_export_dir(tmp_path, toy_saved_models):
    """``export/toy`` layout with version 1 (the upper-casing toy model)."""
    base = str(tmp_path / "export" / "toy")
    install_toy_version(base, 1, toy_saved_models["upper"])
    return base
