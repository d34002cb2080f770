"""TF Serving's warmup records: ``assets.extra/tf_serving_warmup_requests`` in every export.

TensorFlow Serving reads this file (a TFRecord of ``tensorflow.serving.PredictionLog`` protos, at most
:data:`MAX_RECORDS`) when it loads a version and replays each request before it marks the version AVAILABLE, so
the first client request does not pay for the one-time work of a fresh graph: kernel construction, Grappler's
rewrites, the instantiation of each branch of a ``tf.switch_case`` (a beam size, a prompt width) and, in exports
made with ``jit_compile=True``, XLA compilations for the shapes replayed. ``kerasplm serve`` replays the same file
(:mod:`kerasplm.serving.models`).

A record is ``(signature name, {input name: value})`` (:class:`WarmupRequest`), written as a ``PredictLog`` whose
request names the signature (TF Serving ignores the model name and version of warmup requests). Every export gets
:func:`default_requests` (each signature once with one sentence and once with a batch of sentences of several
lengths; option inputs 0, the "default" of every kerasplm option); a family adds what its graph branches on
(:meth:`kerasplm.export.base.ExportModule.warmup_requests`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf
from tensorflow.core.example import example_pb2
from tensorflow_serving.apis import classification_pb2, input_pb2, predict_pb2, prediction_log_pb2, regression_pb2

WARMUP_FILE = "tf_serving_warmup_requests"
MAX_RECORDS = 1000  # TF Serving refuses to load a version whose warmup file holds more
PREDICT_METHOD = tf.saved_model.PREDICT_METHOD_NAME      # "tensorflow/serving/predict"
CLASSIFY_METHOD = tf.saved_model.CLASSIFY_METHOD_NAME    # "tensorflow/serving/classify"
REGRESS_METHOD = tf.saved_model.REGRESS_METHOD_NAME      # "tensorflow/serving/regress"
# Sentences of several lengths (in words: 1, 9, 40): short and long rows, and a batch mixing them.
WARMUP_SENTENCES = (
    "Hello.",
    "This short sentence warms the model up before the first request.",
    " ".join(["A longer sentence, so that longer inputs are also seen once before any client sends one."] * 2
             + ["It ends here."]),
)


@dataclass
class WarmupRequest:
    """One warmup call: ``signature`` with ``inputs`` ({input name: value convertible to the input's dtype});
    ``method`` is the signature's TF Serving method (predict; classify / regress take ``inputs`` = serialized
    tf.Example protos)."""

    signature: str
    inputs: dict = field(default_factory=dict)
    method: str = PREDICT_METHOD


def input_specs(function) -> dict:
    """``{input name: tf.TensorSpec}`` of a signature's ``tf.function`` (declared with an ``input_signature``)."""
    signature = function.input_signature or ()
    return {spec.name: spec for spec in signature}


def sample_value(spec: tf.TensorSpec, texts) -> np.ndarray:
    """A value for ``spec`` with one row per text: the texts themselves for a string input, 0 for a number (the
    default of every kerasplm option); a scalar input gets one value."""
    rows = len(texts)
    if spec.shape.rank == 0:
        return np.array(b"" if spec.dtype == tf.string else 0, dtype=object if spec.dtype == tf.string else
                        spec.dtype.as_numpy_dtype)
    shape = [rows] + [1 if d is None else d for d in spec.shape.as_list()[1:]]
    if spec.dtype == tf.string:
        column = np.array([t.encode("utf-8") for t in texts], dtype=object)
        return np.broadcast_to(column.reshape([rows] + [1] * (len(shape) - 1)), shape).copy()
    return np.zeros(shape, spec.dtype.as_numpy_dtype)


def default_requests(signatures: dict, methods: dict | None = None) -> list:
    """Each predict signature with one sentence, then with a batch of :data:`WARMUP_SENTENCES` (every input sampled
    by :func:`sample_value`). Signatures without inputs (``metadata``) are skipped, and so are those ``methods``
    names as classification or regression signatures (their inputs are serialized ``tf.Example``\\ s whose features
    only the family knows: :func:`example_requests`)."""
    requests = []
    for name, function in sorted(signatures.items()):
        specs = input_specs(function)
        if not specs or (methods or {}).get(name, PREDICT_METHOD) != PREDICT_METHOD:
            continue
        for texts in (WARMUP_SENTENCES[1:2], WARMUP_SENTENCES):
            requests.append(WarmupRequest(name, {k: sample_value(s, texts) for k, s in specs.items()}))
    return requests


def example_requests(signature: str, method: str, features: tuple) -> list:
    """Warmup requests for a classification or regression ``signature``: one example, then a batch, of
    :data:`WARMUP_SENTENCES` in each of the bytes ``features`` (e.g. ``("text", "text_pair")``)."""
    def example(text):
        value = text.encode("utf-8")
        return example_pb2.Example(features={"feature": {
            name: {"bytes_list": {"value": [value]}} for name in features}}).SerializeToString()

    return [WarmupRequest(signature, {"inputs": [example(t) for t in texts]}, method)
            for texts in (WARMUP_SENTENCES[1:2], WARMUP_SENTENCES)]


def _tensor_proto(value, dtype=None):
    return tf.make_tensor_proto(np.asarray(value) if not isinstance(value, np.ndarray) else value, dtype=dtype)


def _input_proto(serialized_examples):
    """A ``tensorflow.serving.Input`` holding ``serialized_examples`` (bytes of tf.Example protos)."""
    request_input = input_pb2.Input()
    for serialized in serialized_examples:
        request_input.example_list.examples.add().CopyFrom(example_pb2.Example.FromString(serialized))
    return request_input


def to_prediction_log(request: WarmupRequest, specs: dict | None = None):
    """A ``PredictionLog`` for ``request`` (a predict, classify or regress log, by its method)."""
    log = prediction_log_pb2.PredictionLog()
    if request.method == PREDICT_METHOD:
        predict = predict_pb2.PredictRequest()
        predict.model_spec.signature_name = request.signature
        for name, value in request.inputs.items():
            dtype = specs[name].dtype if specs and name in specs else None
            predict.inputs[name].CopyFrom(_tensor_proto(value, dtype))
        log.predict_log.request.CopyFrom(predict)
        return log
    examples = [bytes(x) for x in np.asarray(request.inputs["inputs"], dtype=object).reshape([-1])]
    if request.method == CLASSIFY_METHOD:
        classify = classification_pb2.ClassificationRequest(input=_input_proto(examples))
        classify.model_spec.signature_name = request.signature
        log.classify_log.request.CopyFrom(classify)
    elif request.method == REGRESS_METHOD:
        regress = regression_pb2.RegressionRequest(input=_input_proto(examples))
        regress.model_spec.signature_name = request.signature
        log.regress_log.request.CopyFrom(regress)
    else:
        raise ValueError(f"warmup request for {request.signature!r}: unknown method {request.method!r}")
    return log


def write_warmup_file(version_dir: str, requests: list, signatures: dict) -> str:
    """Write ``requests`` to ``version_dir/assets.extra/tf_serving_warmup_requests``; returns its path.

    Raises ValueError for more than :data:`MAX_RECORDS` requests, or one naming a signature or input the export
    does not have (a warmup file TF Serving would fail to replay fails the export instead).
    """
    if len(requests) > MAX_RECORDS:
        raise ValueError(f"{len(requests)} warmup requests; TF Serving replays at most {MAX_RECORDS}")
    for request in requests:
        if request.signature not in signatures:
            raise ValueError(f"warmup request for unknown signature {request.signature!r}")
        specs = input_specs(signatures[request.signature])
        if set(request.inputs) != set(specs):
            raise ValueError(f"warmup request for {request.signature!r} gives inputs {sorted(request.inputs)}; "
                             f"the signature takes {sorted(specs)}")
    extra = os.path.join(version_dir, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    path = os.path.join(extra, WARMUP_FILE)
    with tf.io.TFRecordWriter(path) as writer:
        for request in requests:
            writer.write(to_prediction_log(request, input_specs(signatures[request.signature])).SerializeToString())
    return path
