"""Test helpers for `kerasplm serve`'s gRPC API through TF Serving's official stubs (tensorflow-serving-api): a model's
status, and a Predict response's outputs as REST's JSON writes them (the gRPC tests compare the two APIs' answers).
Apart from tests/serving/client.py, which needs nothing beyond the standard library."""
import tensorflow as tf
from tensorflow_serving.apis import get_model_status_pb2

from kerasplm.serving import api


def model_status(stub, name, **spec):
    """GetModelStatus of model ``name`` (``spec``: ``version={"value": n}`` or ``version_label=...``)."""
    request = get_model_status_pb2.GetModelStatusRequest(model_spec={"name": name, **spec})
    return stub.GetModelStatus(request, timeout=30)


def json_outputs(response):
    """The outputs as REST's columnar JSON writes them (``*_bytes`` as base64, other bytes as text)."""
    return {name: api.to_json(tf.make_ndarray(proto), name) for name, proto in response.outputs.items()}
