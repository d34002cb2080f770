"""What every exported model shares: the ``tf.Module`` base and the atomic, versioned save.

A family's exporter subclasses :class:`ExportModule`, declares its signatures in :meth:`ExportModule.signatures`
and calls :func:`save_version`; everything else is here:

* variable tracking that TF1-style loaders (TF Serving, ``saved_model_cli run``) can restore;
* the ``metadata`` signature and ``assets.extra/kerasplm.json`` (the same JSON): common fields
  (``family``, ``version``, ``signatures``, ``export_time``, kerasplm / TensorFlow / tensorflow-text
  versions) plus the family's own;
* TF Serving's warmup records, ``assets.extra/tf_serving_warmup_requests`` (:mod:`kerasplm.export.warmup`):
  :meth:`ExportModule.warmup_requests`, every signature by default;
* signature method names: ``tf.saved_model.save`` marks every signature ``tensorflow/serving/predict``; a module
  whose :meth:`ExportModule.signature_methods` declares a TF Serving classification or regression signature
  gets that ``method_name`` written into ``saved_model.pb`` (checked against TF Serving's rules for the method,
  :func:`check_signature_method`) before the version is published;
* TF Serving's ``<model_base_path>/<version>/`` layout, written atomically (:mod:`kerasplm.export.atomic`):
  next free version by default, an existing version refused unless ``overwrite=True``.
"""
import datetime
import json
import os
import shutil

import tensorflow as tf
import tensorflow_text
from tensorflow.core.protobuf import saved_model_pb2

import kerasplm

from kerasplm.export import atomic, warmup

METADATA_FILE = "kerasplm.json"
METADATA_SIGNATURE = "metadata"
SAVED_MODEL_FILE = "saved_model.pb"
PREDICT_METHOD, CLASSIFY_METHOD, REGRESS_METHOD = warmup.PREDICT_METHOD, warmup.CLASSIFY_METHOD, warmup.REGRESS_METHOD


def tf_variable(variable):
    """The ``tf.Variable`` behind a Keras 3 variable (or the variable itself)."""
    if isinstance(variable, tf.Variable):
        return variable
    value = getattr(variable, "_value", None)
    if isinstance(value, tf.Variable):
        return value
    raise TypeError(f"cannot export variable {variable!r}: no tf.Variable behind it")


class ExportModule(tf.Module):
    """Base of every exported model: holds a Keras model so that any SavedModel loader restores it.

    The Keras model is NOT tracked as a child: a Keras 3 variable exports as a *copy* ("Variable_N") that the
    checkpoint restores, while the traced functions read the ``tf.Variable`` inside it. TF2's loader copes,
    but TF1-style loaders (TF Serving, ``saved_model_cli run``) then leave those ``tf.Variable``\\ s
    uninitialized ("Could not find variable ..."). So the module tracks the underlying ``tf.Variable``\\ s
    directly (as ``keras.export.ExportArchive`` does) and keeps the model as an untracked attribute
    ``self.model``. Tokenizers and preprocessors assigned as attributes are tracked as usual (their
    vocabularies become ``assets/``).

    Subclasses set ``family`` and override :meth:`signatures` (``{name: tf.function with an
    input_signature}``, ``serving_default`` included) and, for TF Serving's Classify / Regress APIs,
    :meth:`signature_methods`; :func:`save_version` adds the ``metadata`` signature.
    """

    family = None

    def __init__(self, model, family=None, name=None):
        super().__init__(name=name)
        self.__dict__["model"] = model
        self.model_variables = [tf_variable(v) for v in model.variables]
        if family is not None:
            self.family = family
        if not self.family:
            raise ValueError(f"{type(self).__name__} needs a family name (class attribute or family=)")

    def signatures(self):
        """``{signature name: tf.function}`` for TF Serving; must contain ``serving_default``."""
        raise NotImplementedError(f"{type(self).__name__} must define its signatures()")

    def signature_methods(self):
        """``{signature name: TF Serving method name}`` for the signatures that are not predict signatures:
        ``CLASSIFY_METHOD`` (one input ``inputs``: serialized ``tf.Example``\\ s, string [B]; outputs ``classes``
        string [B, C] and/or ``scores`` float32 [B, C]) or ``REGRESS_METHOD`` (input ``inputs``; output
        ``outputs`` float32 [B]). Signatures not named here stay ``tensorflow/serving/predict``."""
        return {}

    def warmup_requests(self):
        """The requests written to ``assets.extra/tf_serving_warmup_requests`` (a list of
        :class:`kerasplm.export.warmup.WarmupRequest`), replayed by TF Serving and ``kerasplm serve`` before the
        version is served. Default: every signature with one sentence and with a batch of several lengths; a
        family extends it with the inputs its graph branches on (beam sizes, prompt widths...)."""
        return warmup.default_requests(self.signatures(), self.signature_methods())


def _metadata_signature(metadata_json):
    @tf.function(input_signature=[])
    def metadata():
        """``{"metadata": string []}``: the export metadata as JSON (same as assets.extra/kerasplm.json)."""
        return {"metadata": tf.constant(metadata_json)}
    return metadata


def _tensor_rank(info):
    return None if info.tensor_shape.unknown_rank else len(info.tensor_shape.dim)


def check_signature_method(name, signature_def):
    """Raise ``ValueError`` unless ``signature_def`` (a ``SignatureDef`` proto) satisfies what TF Serving's
    classifier / regressor (servables/tensorflow/classifier.cc, regressor.cc) require of its method:

    * classify: exactly one input, keyed ``inputs``, DT_STRING of rank 1 (the serialized ``tf.Example``\\ s); one
      or two outputs, at least one of ``classes`` (DT_STRING, rank 2) and ``scores`` (DT_FLOAT, rank 2), no other;
    * regress: exactly one input ``inputs`` (DT_STRING, rank 1); exactly one output ``outputs`` (DT_FLOAT, shape
      [B] or [B, 1]).

    TF Serving checks the key names when a request arrives and the dtypes and ranks on the computed tensors;
    here both are checked on the declared signature, so an export that breaks them is refused when written.
    A predict signature has no such rules.
    """
    method = signature_def.method_name
    if method == PREDICT_METHOD:
        return
    if method not in (CLASSIFY_METHOD, REGRESS_METHOD):
        raise ValueError(f"signature {name!r}: unknown method_name {method!r}")
    string, floating = tf.string.as_datatype_enum, tf.float32.as_datatype_enum
    problems = []
    inputs, outputs = signature_def.inputs, signature_def.outputs
    if list(inputs) != ["inputs"]:
        problems.append(f"needs exactly one input 'inputs', has {sorted(inputs)}")
    elif inputs["inputs"].dtype != string or _tensor_rank(inputs["inputs"]) != 1:
        problems.append("input 'inputs' must be DT_STRING of shape [batch] (serialized tf.Examples)")
    if method == CLASSIFY_METHOD:
        wanted = {"classes": string, "scores": floating}
        if not outputs or set(outputs) - set(wanted):
            problems.append(f"outputs must be 'classes' and/or 'scores', has {sorted(outputs)}")
        for key in set(outputs) & set(wanted):
            if outputs[key].dtype != wanted[key] or _tensor_rank(outputs[key]) != 2:
                problems.append(f"output {key!r} must be {'DT_STRING' if key == 'classes' else 'DT_FLOAT'} of "
                                "shape [batch, classes]")
    else:
        if list(outputs) != ["outputs"]:
            problems.append(f"needs exactly one output 'outputs', has {sorted(outputs)}")
        else:
            dims = outputs["outputs"].tensor_shape.dim
            if outputs["outputs"].dtype != floating or not (
                    len(dims) == 1 or (len(dims) == 2 and dims[1].size == 1)):
                problems.append("output 'outputs' must be DT_FLOAT of shape [batch] or [batch, 1]")
    if problems:
        raise ValueError(f"signature {name!r} ({method}): " + "; ".join(problems))


def set_signature_methods(saved_model_dir, methods):
    """Rewrite ``saved_model_dir/saved_model.pb`` so that each signature of ``methods`` (``{name: method_name}``)
    carries its method name, each checked by :func:`check_signature_method`; refreshes ``fingerprint.pb``.

    ``tf.saved_model.save`` has no way to say it (every signature is written as a predict signature) and
    ``tf.saved_model.load`` ignores the field, so this is the one place where it is set.
    """
    if not methods:
        return
    path = os.path.join(saved_model_dir, SAVED_MODEL_FILE)
    saved_model = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        saved_model.ParseFromString(f.read())
    for meta_graph in saved_model.meta_graphs:
        for name, method in methods.items():
            if name not in meta_graph.signature_def:
                raise ValueError(f"signature_methods() names {name!r}, which is not a signature of the export")
            meta_graph.signature_def[name].method_name = method
            check_signature_method(name, meta_graph.signature_def[name])
    with open(path, "wb") as f:
        f.write(saved_model.SerializeToString())
    if os.path.exists(os.path.join(saved_model_dir, "fingerprint.pb")):
        # The fingerprint holds a checksum of saved_model.pb; recompute it the way tf.saved_model.save does.
        from tensorflow.python.saved_model import fingerprinting_utils
        fingerprinting_utils.write_fingerprint(saved_model_dir)


def _check_version(version):
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise ValueError(f"version must be a positive integer, got {version!r}")


def common_metadata(module, version, signature_names):
    """The fields every export's metadata has."""
    return {
        "family": module.family,
        "version": version,
        "signatures": sorted(signature_names),
        "kerasplm_version": kerasplm.__version__,
        "tensorflow_version": tf.__version__,
        "tensorflow_text_version": tensorflow_text.__version__,
        "export_time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def save_version(module, model_base_path, version=None, overwrite=False, metadata=None):
    """Writes ``module`` as ``model_base_path/<version>/`` (SavedModel, ``assets.extra/kerasplm.json`` and TF Serving's
    ``assets.extra/tf_serving_warmup_requests``) atomically.

    Args:
      module: an :class:`ExportModule`.
      model_base_path: TF Serving's model base path (created if missing).
      version: positive int; default the next free one (1 + the largest, 1 if none).
      overwrite: replace an existing ``version`` (atomically swapped in); else ``FileExistsError``.
      metadata: the family's metadata fields (a JSON-serializable dict), merged over the common ones.
    Returns the version directory's path (str).
    """
    _check_version(version)
    base = os.path.abspath(os.fspath(model_base_path))
    if os.path.exists(base) and not os.path.isdir(base):
        raise NotADirectoryError(f"model base path {base} is not a directory")
    signatures = dict(module.signatures())
    if "serving_default" not in signatures or METADATA_SIGNATURE in signatures:
        raise ValueError(f"{type(module).__name__}.signatures() must contain 'serving_default' and not "
                         f"{METADATA_SIGNATURE!r} (added by save_version), got {sorted(signatures)}")
    os.makedirs(base, exist_ok=True)
    atomic.clean_stale_tmp_dirs(base)
    auto = version is None
    version = atomic.next_version(base) if auto else version
    final = os.path.join(base, str(version))
    if os.path.exists(final) and not overwrite:
        raise FileExistsError(f"{final}: version {version} exists; pass overwrite=True / --overwrite")

    methods = dict(module.signature_methods())
    unknown = sorted(set(methods) - set(signatures))
    if unknown:
        raise ValueError(f"{type(module).__name__}.signature_methods() names {unknown}, which signatures() lacks")

    info = {**common_metadata(module, version, [*signatures, METADATA_SIGNATURE]), **(metadata or {})}
    metadata_json = json.dumps(info, ensure_ascii=False, sort_keys=True)
    signatures[METADATA_SIGNATURE] = _metadata_signature(metadata_json)

    tmp = atomic.make_tmp_dir(base, version)
    try:
        tf.saved_model.save(module, tmp, signatures=signatures,
                            options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
        warmup.write_warmup_file(tmp, module.warmup_requests(), signatures)
        set_signature_methods(tmp, methods)
        extra = os.path.join(tmp, "assets.extra")
        with open(os.path.join(extra, METADATA_FILE), "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2, ensure_ascii=False, sort_keys=True)
        atomic.fsync_tree(tmp)
        return atomic.publish(tmp, base, version, overwrite=overwrite, auto_version=auto)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def read_metadata(path):
    """The ``assets.extra/kerasplm.json`` of a version directory, as a dict."""
    with open(os.path.join(path, "assets.extra", METADATA_FILE), encoding="utf-8") as f:
        return json.load(f)
