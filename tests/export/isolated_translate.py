"""Run with ``python -I isolated_translate.py VERSION_DIR INPUTS_JSON``: loads an exported translator with
only tensorflow and tensorflow_text importable (kerasplm is blocked) and prints one JSON line:

    {"kerasplm_importable": false, "greedy": [...], "beam": {"2": [...]}, "unregistered_ops": [...],
     "op_types": N}

Used by tests/export/test_translator_export.py; standalone on purpose (imports nothing from the repo).
"""
import importlib.abc
import json
import sys


class _BlockKerasplm(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "kerasplm" or fullname.startswith("kerasplm."):
            raise ImportError(f"{fullname} is blocked in this process")
        return None


sys.meta_path.insert(0, _BlockKerasplm())
try:
    import kerasplm  # noqa: F401
    KERASPLM_IMPORTABLE = True
except ImportError:
    KERASPLM_IMPORTABLE = False

import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (registers the tensorflow-text ops)
from tensorflow.core.protobuf import saved_model_pb2  # noqa: E402
from tensorflow.python.framework import op_def_registry  # noqa: E402


def op_types(version_dir):
    """Every op type in the SavedModel's graphs (nodes and function library; function calls excluded)."""
    sm = saved_model_pb2.SavedModel()
    with open(f"{version_dir}/saved_model.pb", "rb") as f:
        sm.ParseFromString(f.read())
    types = set()
    for meta_graph in sm.meta_graphs:
        graph = meta_graph.graph_def
        functions = {f.signature.name for f in graph.library.function}
        types.update(n.op for n in graph.node)
        for function in graph.library.function:
            types.update(n.op for n in function.node_def)
        types -= functions
    return sorted(types)


def main():
    version_dir, sentences = sys.argv[1], json.loads(sys.argv[2])
    loaded = tf.saved_model.load(version_dir)
    inputs = tf.constant(sentences, tf.string, shape=[len(sentences)])
    greedy = loaded.signatures["serving_default"](inputs=inputs)["translation"].numpy()
    beam = loaded.signatures["translate"](inputs=inputs, beam_size=tf.constant(2), max_length=tf.constant(0))
    ops = op_types(version_dir)
    print(json.dumps({
        "kerasplm_importable": KERASPLM_IMPORTABLE,
        "kerasplm_in_modules": any(m == "kerasplm" or m.startswith("kerasplm.") for m in sys.modules),
        "greedy": [s.decode("utf-8") for s in greedy],
        "beam": {"2": [s.decode("utf-8") for s in beam["translation"].numpy()]},
        "op_types": len(ops),
        "unregistered_ops": [op for op in ops if op_def_registry.get(op) is None],
    }))


if __name__ == "__main__":
    main()
