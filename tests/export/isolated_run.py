"""Run with ``python -I isolated_run.py VERSION_DIR REQUEST_JSON``: loads a SavedModel in a process where
``import kerasplm`` raises (only tensorflow and tensorflow_text importable), runs the requested signatures and
prints one JSON line::

    {"kerasplm_importable": false, "kerasplm_in_modules": false, "op_types": [...], "unregistered_ops": [...],
     "outputs": [{"translation": {"b64": ...}}, ...]}

``REQUEST_JSON`` is ``{"calls": [{"signature": NAME, "inputs": {INPUT: VALUE}}, ...]}``; string leaves are
``{"b64": base64}`` on both ways (so invalid UTF-8 travels too), numbers are plain JSON; each input is converted
to the dtype the signature declares.

``python -I isolated_run.py --serve`` answers many requests in one process (importing TensorFlow costs seconds
per process): each stdin line is ``{"version_dir": DIR, "calls": [...]}`` and gets one stdout line,
``REPLY_PREFIX`` followed by the object above, or by ``{"error": "..."}`` when the request fails (the prefix
tells replies from anything a loaded graph might print). Standalone on purpose: it imports nothing from the repository. Used through
:func:`tests.export.contract.run_isolated`.
"""
import base64
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


def decode(value):
    if isinstance(value, dict):
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def encode(value):
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, list):
        return [encode(v) for v in value]
    return value


def run(fn, inputs):
    specs = fn.structured_input_signature[1]
    unknown = set(inputs) - set(specs)
    if unknown:
        raise SystemExit(f"unknown inputs {sorted(unknown)}; the signature takes {sorted(specs)}")
    tensors = {}
    for name, spec in specs.items():
        value = decode(inputs[name])
        shape = [len(value)] if isinstance(value, list) and not value else None   # an empty batch keeps rank 1
        tensors[name] = tf.constant(value, spec.dtype, shape=shape)
    return {name: encode(tensor.numpy().tolist() if tensor.shape.rank else tensor.numpy())
            for name, tensor in fn(**tensors).items()}


def answer(version_dir, request):
    loaded = tf.saved_model.load(version_dir)
    outputs = [run(loaded.signatures[call["signature"]], call.get("inputs", {})) for call in request["calls"]]
    ops = op_types(version_dir)
    return {
        "kerasplm_importable": KERASPLM_IMPORTABLE,
        "kerasplm_in_modules": any(m == "kerasplm" or m.startswith("kerasplm.") for m in sys.modules),
        "op_types": ops,
        "unregistered_ops": [op for op in ops if op_def_registry.get(op) is None],
        "outputs": outputs,
    }


REPLY_PREFIX = "@@isolated-reply "


def serve():
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = answer(request["version_dir"], request)
        except BaseException as error:  # noqa: B036  (SystemExit included: the reply names it)
            reply = {"error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(REPLY_PREFIX + json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        print(json.dumps(answer(sys.argv[1], json.loads(sys.argv[2]))))
