"""Served models: version directories, loading, polling and version policies.

Each :class:`ServedModel` follows one :class:`~kerasplm.serving.config.ModelConfig` the way TensorFlow
Serving follows a ``base_path``:

* a version is an integer-named directory holding ``saved_model.pb`` (or ``.pbtxt``); anything else
  (``.tmp-3-xxxx`` siblings written by an export in progress, ``latest``, a directory whose
  ``saved_model.pb`` is not there yet) is ignored;
* the version policy picks which of the loadable versions to serve (``latest {num_versions}``,
  ``all``, ``specific {versions}``); :meth:`ServedModel.refresh` loads the missing ones completely
  before requests can reach them, then unloads the versions the policy no longer wants;
* a version that fails to load is logged, reported in the model status (state ``END`` with the
  error) and skipped until its files change (any file added, removed, resized or rewritten: a copy still
  in progress is retried once it completes, as TF Serving retries loads); the policy then falls back
  on the next loadable versions, so a broken export never replaces a working one;
* if the base path holds no loadable version at all any more (deleted, being rsynced), the loaded
  versions keep serving rather than leaving the model with none;
* a version's warmup records (``assets.extra/tf_serving_warmup_requests``, TF Serving's format: a TFRecord of
  ``PredictionLog`` protos, at most 1,000) are replayed when it loads, before requests can reach it
  (:func:`replay_warmup`), so the first request does not pay for a fresh graph's one-time work; a record that
  fails fails the load, as in TF Serving.

A request without a version gets the largest loaded version ("latest"), as in TF Serving.
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tensorflow-text ops the exported graphs use)
from google.protobuf import text_format
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import prediction_log_pb2

from kerasplm.export.atomic import list_version_numbers
from kerasplm.serving.api import PREDICT_METHOD, RequestError, op_error_summary, serialized_examples_from_input
from kerasplm.serving.config import ModelConfig

logger = logging.getLogger(__name__)

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
MAX_WARMUP_RECORDS = 1000  # TF Serving's limit: a version with more fails to load
MAX_WARMUP_ROWS = 2**31 - 1  # a warmup record is the export's own: its rows are not capped like a client's

@dataclass
class LoadedVersion:
    """One loaded SavedModel version, its signatures and their TF Serving method names."""

    version: int
    path: str
    model: object  # the object returned by tf.saved_model.load; keeps the functions alive
    signatures: dict  # name -> ConcreteFunction
    methods: dict = field(default_factory=dict)  # name -> method_name, as saved_model.pb records it

    def method_name(self, signature_name: str) -> str:
        """The signature's ``method_name`` (``tensorflow/serving/predict``, ``.../classify``, ``.../regress``)."""
        return self.methods.get(signature_name) or PREDICT_METHOD

    def input_specs(self, signature_name: str) -> dict:
        """``{input name: tf.TensorSpec}`` of a signature."""
        return dict(self.signatures[signature_name].structured_input_signature[1])

    def output_specs(self, signature_name: str) -> dict:
        """``{output name: tf.TensorSpec}`` of a signature."""
        return dict(self.signatures[signature_name].structured_outputs)


def list_versions(model_base_path: str) -> list[int]:
    """Complete version directories under ``model_base_path``, newest first (see
    :func:`kerasplm.export.atomic.list_version_numbers`)."""
    return list_version_numbers(model_base_path, complete=True)[::-1]


def signature_methods(path: str) -> dict:
    """``{signature name: method_name}`` of the serving MetaGraphDef (tag ``serve``, else the first) of the
    SavedModel in ``path``: what TF Serving dispatches Classify / Regress on, which ``tf.saved_model.load``
    does not expose."""
    saved_model = saved_model_pb2.SavedModel()
    binary = os.path.join(path, "saved_model.pb")
    if os.path.exists(binary):
        with open(binary, "rb") as f:
            saved_model.ParseFromString(f.read())
    else:
        with open(os.path.join(path, "saved_model.pbtxt"), encoding="utf-8") as f:
            text_format.Parse(f.read(), saved_model)
    graphs = list(saved_model.meta_graphs)
    serving = [g for g in graphs if "serve" in g.meta_info_def.tags] or graphs[:1]
    return {name: sig.method_name for name, sig in serving[0].signature_def.items()} if serving else {}


def load_version(model_base_path: str, version: int, warmup: bool = True) -> LoadedVersion:
    """Load one version directory with ``tf.saved_model.load`` (and its signatures' method names) and replay its
    warmup records (``warmup``)."""
    path = os.path.join(model_base_path, str(version))
    model = tf.saved_model.load(path)
    signatures = dict(model.signatures)
    if not signatures:
        raise ValueError(f"SavedModel at {path} has no signatures")
    loaded = LoadedVersion(version=version, path=path, model=model, signatures=signatures,
                           methods=signature_methods(path))
    if warmup:
        replay_warmup(loaded)
    return loaded


def _warmup_call(loaded: LoadedVersion, log, what: str):
    """Run one ``PredictionLog``'s request (predict, classify or regress) on ``loaded``."""
    kind = log.WhichOneof("log_type")
    if kind == "predict_log":
        request = log.predict_log.request
        tensors = {name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()}
    elif kind in ("classify_log", "regress_log"):
        request = getattr(log, kind).request
        try:
            serialized = serialized_examples_from_input(request.input, MAX_WARMUP_ROWS)
        except RequestError as e:
            raise ValueError(f"{what}: {e.message}") from None
        tensors = {"inputs": tf.constant(serialized, tf.string, shape=[len(serialized)])}
    else:
        raise ValueError(f"{what}: unsupported warmup log type {kind!r} (predict, classify and regress are replayed)")
    name = request.model_spec.signature_name or "serving_default"
    if name not in loaded.signatures:
        raise ValueError(f"{what}: unknown signature {name!r}")
    specs = loaded.input_specs(name)
    if set(tensors) != set(specs):
        raise ValueError(f"{what}: inputs {sorted(tensors)} for signature {name!r}, which takes {sorted(specs)}")
    try:
        loaded.signatures[name](**{k: tf.cast(t, specs[k].dtype) if t.dtype != specs[k].dtype else t
                                   for k, t in tensors.items()})
    except tf.errors.OpError as e:
        raise ValueError(f"{what}: signature {name!r} failed: {op_error_summary(e)}") from None


def replay_warmup(loaded: LoadedVersion) -> int:
    """Replay the version's ``assets.extra/tf_serving_warmup_requests`` (if any); returns the records replayed.

    ValueError (naming the file and record) for a file of more than 1,000 records, a record that is not a
    ``PredictionLog``, or a request naming an unknown signature or inputs; a TensorFlow error of the model
    propagates. Either fails the load of the version.
    """
    path = os.path.join(loaded.path, WARMUP_FILE)
    if not os.path.exists(path):
        return 0
    try:
        records = [bytes(r.numpy()) for r in tf.data.TFRecordDataset(path).take(MAX_WARMUP_RECORDS + 1)]
    except tf.errors.OpError as e:
        raise ValueError(f"{path}: not a TFRecord file ({e.message.splitlines()[0]})") from None
    if len(records) > MAX_WARMUP_RECORDS:
        raise ValueError(f"{path}: more than {MAX_WARMUP_RECORDS} warmup records (TF Serving's limit)")
    for index, record in enumerate(records):
        what = f"{path}, record {index}"
        log = prediction_log_pb2.PredictionLog()
        try:
            log.ParseFromString(record)
        except Exception:  # protobuf's DecodeError
            raise ValueError(f"{what}: not a tensorflow.serving.PredictionLog") from None
        _warmup_call(loaded, log, what)
    if records:
        logger.info("Replayed %d warmup record(s) of %s", len(records), loaded.path)
    return len(records)


def _version_files(version_path: str) -> tuple:
    """What a version directory holds, as ``(file count, total bytes, latest mtime_ns)``: a version that failed to
    load is tried again when this changes (a deploy by ``cp -r`` lands ``saved_model.pb`` before ``variables/``)."""
    count = size = latest = 0
    for root, _, files in os.walk(version_path):
        for name in files:
            try:
                info = os.stat(os.path.join(root, name))
            except OSError:  # removed while being listed
                continue
            count, size, latest = count + 1, size + info.st_size, max(latest, info.st_mtime_ns)
    return count, size, latest


class ServedModel:
    """The loaded versions of one configured model, kept in line with its base path by :meth:`refresh`."""

    def __init__(self, config: ModelConfig):
        if not os.path.isdir(config.base_path):
            where = f"{config.source}: " if config.source else ""
            raise FileNotFoundError(f"{where}model base path {config.base_path} is not a directory")
        self.config = config
        self._lock = threading.Lock()
        self._loaded: dict[int, LoadedVersion] = {}
        self._failed: dict[int, tuple] = {}  # version -> (_version_files of the directory that failed, error)

    def reconfigured(self, config: ModelConfig) -> "ServedModel":
        """A new ServedModel for this model's changed ``config`` (a config reload), not yet refreshed.

        With the same base path it starts from this model's loaded versions (and known failures), so its
        :meth:`refresh` loads only the versions the new policy adds; this model is left as it is and keeps
        answering until the server switches to the new one.
        """
        model = ServedModel(config)
        if config.base_path == self.config.base_path:
            with self._lock:
                model._loaded, model._failed = dict(self._loaded), dict(self._failed)
        return model

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def versions(self) -> list[int]:
        """Loaded versions, newest first."""
        with self._lock:
            return sorted(self._loaded, reverse=True)

    @property
    def failed_versions(self) -> dict:
        """``{version: error message}`` of versions that failed to load (and are still on disk)."""
        with self._lock:
            return {v: err for v, (_, err) in self._failed.items()}

    def refresh(self) -> list[int]:
        """Load the versions the policy wants and unload the others; returns the loaded versions.

        Versions are loaded newest first; one that fails is recorded and the policy is applied again
        without it (so ``latest {1}`` falls back on the previous loadable version).
        """
        base = self.config.base_path
        on_disk = list_versions(base)
        with self._lock:  # forget failures whose directory is gone or whose saved_model.pb changed
            self._failed = {v: f for v, f in self._failed.items()
                            if v in on_disk and _version_files(os.path.join(base, str(v))) == f[0]}
        while True:
            loadable = [v for v in on_disk if v not in self._failed]
            wanted = self.config.version_policy.select(loadable)
            missing = [v for v in wanted if v not in self._loaded]
            if not missing:
                break
            version = missing[0]
            files = _version_files(os.path.join(base, str(version)))
            try:
                loaded = load_version(base, version)
            except Exception as e:  # a broken export must not take the server down
                message = f"{type(e).__name__}: {e}".splitlines()[0][:500]
                with self._lock:
                    self._failed[version] = (files, message)
                logger.error("Failed to load %s version %d: %s", self.name, version, message)
                continue
            with self._lock:
                self._loaded[version] = loaded
            logger.info("Loaded %s version %d from %s", self.name, version, loaded.path)
        if not loadable:
            return self.versions  # nothing loadable on disk: keep serving what is loaded
        with self._lock:
            for version in [v for v in self._loaded if v not in wanted]:
                del self._loaded[version]  # requests in flight keep their own reference
                logger.info("Unloaded %s version %d (%s policy)", self.name, version,
                            self.config.version_policy.describe())
        return self.versions

    def find(self, version: int | None = None, label: str | None = None) -> LoadedVersion:
        """The loaded version a request addresses (latest when neither is given), or a 404."""
        if label is not None:
            if label not in self.config.version_labels:
                raise RequestError(404, f"Unrecognized servable version label: {label}")
            version = self.config.version_labels[label]
        with self._lock:
            if version is None:
                if not self._loaded:
                    raise RequestError(404, f"Could not find any versions of model {self.name}")
                return self._loaded[max(self._loaded)]
            loaded = self._loaded.get(version)
        if loaded is None:
            raise RequestError(404, f"Servable not found for request: Specific({self.name}, {version})")
        return loaded

    def status(self, version: int | None = None, label: str | None = None) -> list[dict]:
        """TF Serving's ``model_version_status`` entries: loaded versions and failed loads, newest first."""
        if label is not None:
            version = self.find(label=label).version
        with self._lock:
            states = {v: ("AVAILABLE", "OK", "") for v in self._loaded}
            for v, (_, error) in self._failed.items():
                states.setdefault(v, ("END", "UNKNOWN", error))
        if version is not None:
            if version not in states:
                raise RequestError(404, f"Servable not found for request: Specific({self.name}, {version})")
            states = {version: states[version]}
        elif not states:
            raise RequestError(404, f"Could not find any versions of model {self.name}")
        return [{"version": str(v), "state": state, "status": {"error_code": code, "error_message": message}}
                for v, (state, code, message) in sorted(states.items(), reverse=True)]
