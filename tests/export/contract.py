"""The export contract (DESIGN.md, "Export contract") as helpers every family's export test calls.

* :func:`run_isolated`: run signatures of a SavedModel in a ``python -I`` process where ``import kerasplm``
  raises; asserts that kerasplm was neither importable nor imported and that every op in the graph is
  registered by tensorflow + tensorflow_text alone (what TF Serving links); returns the outputs.
* :func:`check_batch_safe`: TF Serving's batching rule (every input and output shares the 0th dimension) for every
  signature; :func:`check_warmup`: ``assets.extra/tf_serving_warmup_requests`` in TF Serving's format, covering every
  signature, replayed as ``kerasplm serve`` does at load;
* :func:`check_bad_inputs`: the bad-input battery (empty string, whitespace only, 5,000 words, invalid UTF-8,
  a mixed batch of all of them with a normal sentence, an empty batch): no exception, one output row per
  input row, and per-row independence (a row's output is the same alone and inside the mixed batch).

Usage (a family's test)::

    from tests.export.contract import check_bad_inputs, run_isolated

    outputs = run_isolated(path, [("serving_default", {"inputs": SENTENCES})])
    check_bad_inputs(path, "serving_default", "inputs", output_check=my_check)
"""
import atexit
import base64
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from kerasplm.serving.models import load_version, replay_warmup

HERE = os.path.dirname(os.path.abspath(__file__))
ISOLATED_RUNNER = os.path.join(HERE, "isolated_run.py")
REPLY_PREFIX = "@@isolated-reply "   # as in isolated_run.py, which imports nothing from the repository
NORMAL = "This is a normal sentence."
LONG = " ".join(["word"] * 5000)
# label -> input (str or raw bytes); the order of the mixed batch.
BAD_INPUTS = {"empty": "", "whitespace": "   \t\n ", "long": LONG, "invalid_utf8": b"ab\xff\xfe cd \xc3"}


def _encode(value):
    if isinstance(value, str):
        value = value.encode("utf-8")
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _decode(value):
    """String leaves come back as str (bytes where they are not valid UTF-8)."""
    if isinstance(value, dict):
        raw = base64.b64decode(value["b64"])
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


class _IsolatedServer:
    """One ``isolated_run.py --serve`` process per test process: TensorFlow is imported once, not per call."""

    process = None

    @classmethod
    def request(cls, version_dir, calls, timeout):
        if cls.process is None or cls.process.poll() is not None:
            cls.stderr = tempfile.TemporaryFile(mode="w+")
            cls.process = subprocess.Popen([sys.executable, "-I", ISOLATED_RUNNER, "--serve"], cwd="/", text=True,
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=cls.stderr)
            cls.replies = queue.Queue()
            threading.Thread(target=cls._read, args=(cls.process.stdout, cls.replies), daemon=True).start()
            atexit.register(cls.process.kill)
        cls.process.stdin.write(json.dumps({"version_dir": os.path.abspath(os.fspath(version_dir)), "calls": calls})
                                + "\n")
        cls.process.stdin.flush()
        try:
            reply = cls.replies.get(timeout=timeout)
        except queue.Empty:
            reply = None
        if reply is None:   # timed out, or the process died: report its stderr and start afresh next time
            cls.process.kill()
            cls.stderr.seek(0)
            raise AssertionError(f"isolated_run.py gave no reply: {cls.stderr.read()[-3000:]}")
        return reply

    @staticmethod
    def _read(stdout, replies):
        for line in stdout:
            if line.startswith(REPLY_PREFIX):
                replies.put(json.loads(line[len(REPLY_PREFIX):]))
        replies.put(None)


def run_isolated(version_dir, calls, timeout=600):
    """Runs ``calls`` (a list of ``(signature, {input name: value})``; values are Python lists / scalars, str or
    bytes for strings) on the SavedModel at ``version_dir`` in a process with kerasplm blocked (one such process
    per test process, reused: see ``isolated_run.py --serve``).

    Asserts the isolation and op-registration part of the contract; returns one ``{output name: value}`` dict
    per call (nested lists; strings as str, bytes where not valid UTF-8).
    """
    calls = [{"signature": name, "inputs": {k: _encode(v) for k, v in inputs.items()}} for name, inputs in calls]
    result = _IsolatedServer.request(version_dir, calls, timeout)
    assert "error" not in result, result.get("error")
    assert result["kerasplm_importable"] is False and result["kerasplm_in_modules"] is False
    assert len(result["op_types"]) > 5 and result["unregistered_ops"] == [], result["unregistered_ops"]
    return [{name: _decode(value) for name, value in outputs.items()} for outputs in result["outputs"]]


_LOADED = {}


def _load(model):
    if not isinstance(model, (str, os.PathLike)):
        return model
    key = os.path.abspath(os.fspath(model))
    if key not in _LOADED:
        _LOADED[key] = tf.saved_model.load(key)
    return _LOADED[key]


def load_export(path):
    """The SavedModel at ``path``, loaded once per test process: the checks here given the same path (or this
    object) reuse it rather than load the export again."""
    return _load(path)


def call_signature(model, signature, input_name, texts, extra_inputs=None):
    """Calls ``signature`` with ``texts`` (list of str/bytes) as ``input_name`` -> ``{output: numpy array}``.

    ``extra_inputs``: ``{name: value or callable(texts) -> value}``, converted to the declared dtype.
    """
    fn = _load(model).signatures[signature]
    specs = fn.structured_input_signature[1]
    kwargs = {input_name: tf.constant(list(texts), tf.string, shape=[len(texts)])}
    for name, value in (extra_inputs or {}).items():
        value = value(list(texts)) if callable(value) else value
        shape = [len(value)] if isinstance(value, list) and not value else None
        kwargs[name] = tf.constant(value, specs[name].dtype, shape=shape)
    return {name: tensor.numpy() for name, tensor in fn(**kwargs).items()}


def _zero_like(array):
    return np.zeros_like(array) if array.dtype != object else np.full_like(array, b"")


def assert_same_row(alone, batched, name=""):
    """``alone`` (one row's output, run by itself) equals ``batched`` (the same row inside a batch).

    Extra padding in the batched row (a longer batch-mate widens ``[T]``/``[S]`` axes) must be zero / ``b""``:
    the batched row, cropped to the alone row's shape, equals it, and everything outside the crop is padding.
    Floats compare with rtol 1e-4, atol 1e-5 (batch-size-dependent kernels differ in the last bits).
    """
    alone, batched = np.asarray(alone), np.asarray(batched)
    assert alone.ndim == batched.ndim and all(a <= b for a, b in zip(alone.shape, batched.shape)), \
        f"{name}: shape {alone.shape} alone vs {batched.shape} in the batch"
    crop = tuple(slice(0, n) for n in alone.shape)
    if alone.dtype.kind == "f":
        np.testing.assert_allclose(batched[crop], alone, rtol=1e-4, atol=1e-5, err_msg=name)
    else:
        assert np.array_equal(batched[crop], alone), f"{name}: {alone!r} alone vs {batched[crop]!r} in the batch"
    rest = batched.copy()
    rest[crop] = _zero_like(alone)
    assert np.array_equal(rest, _zero_like(batched)), f"{name}: padding outside the row is not zero"


def check_bad_inputs(model, signature, input_name, output_check=None, normal=NORMAL, extra_inputs=None,
                     extra_bad=None, compare_rows=None, refused=None):
    """Runs the bad-input battery on ``signature`` (of a SavedModel path or a loaded one); returns
    ``{label: outputs of that input alone}`` (labels: "normal", the keys of BAD_INPUTS and of ``extra_bad``).

    Asserts, for every call (each input alone, the mixed batch, the empty batch): no exception and every output's
    first dimension equals the batch size. Then per-row independence: the ``normal`` sentence, and each input
    labelled in ``compare_rows`` (default: all), gives the same output alone and inside the mixed batch
    (:func:`assert_same_row`). ``output_check(texts, outputs)`` adds the family's own assertions; it is called
    for every batch run. ``extra_inputs`` as in :func:`call_signature` (e.g. a beam size).

    ``refused``: ``{label: text}`` for inputs the export refuses by design (a cap on a sentence's tokens): alone,
    each must fail with an InvalidArgumentError whose message contains ``text``; they stay out of the mixed batch.
    """
    cases = {"normal": normal, **BAD_INPUTS, **(extra_bad or {})}
    for label, text in (refused or {}).items():
        try:
            call_signature(model, signature, input_name, [cases.pop(label)], extra_inputs)
        except tf.errors.InvalidArgumentError as e:
            assert text in e.message, f"{signature}: {label!r} refused with {e.message!r}, expected {text!r}"
        else:
            raise AssertionError(f"{signature}: {label!r} was answered; the export should refuse it ({text!r})")
    compare_rows = set(cases) if compare_rows is None else {"normal", *compare_rows}

    def run(texts):
        outputs = call_signature(model, signature, input_name, texts, extra_inputs)
        for name, value in outputs.items():
            assert value.ndim >= 1 and value.shape[0] == len(texts), \
                f"{signature}: output {name!r} has shape {value.shape} for a batch of {len(texts)}"
        if output_check is not None:
            output_check(list(texts), outputs)
        return outputs

    alone = {label: run([text]) for label, text in cases.items()}
    # Mixed: the normal sentence first, between the bad inputs and last.
    labels = ["normal"] + [x for label in cases if label != "normal" for x in (label, "normal")]
    mixed = run([cases[label] for label in labels])
    for row, label in enumerate(labels):
        if label in compare_rows:
            for name, value in mixed.items():
                assert_same_row(alone[label][name][0], value[row], f"{signature}/{name}, row {row} ({label})")
    run([])
    return alone


def check_batch_safe(model):
    """TF Serving's batching rule for every signature of an export (``metadata``, which takes no input, aside):
    every input and every output has an unknown 0th dimension, the batch, so that concurrent requests can be
    concatenated along it and the answers split back. Returns the signatures checked."""
    checked = []
    for name, fn in _load(model).signatures.items():
        inputs = fn.structured_input_signature[1]
        if not inputs:
            continue
        shapes = {f"input {k}": spec.shape for k, spec in inputs.items()}
        shapes.update({f"output {k}": spec.shape for k, spec in fn.structured_outputs.items()})
        for what, shape in shapes.items():
            assert shape.rank is not None and shape.rank >= 1 and shape[0] is None, \
                f"signature {name!r}: {what} has shape {shape}, not [batch, ...] (TF Serving's batching rule)"
        checked.append(name)
    assert "serving_default" in checked
    return sorted(checked)


def check_warmup(version_dir):
    """The export's ``assets.extra/tf_serving_warmup_requests``: TF Serving's format (a TFRecord of PredictionLog
    protos, at most 1,000), every signature with inputs warmed at least once, and every record replays on the loaded
    model (:func:`kerasplm.serving.models.replay_warmup`, what ``kerasplm serve`` runs at load). Returns
    ``{signature: number of records}``."""
    path = os.path.join(version_dir, "assets.extra", "tf_serving_warmup_requests")
    records = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in tf.data.TFRecordDataset(path)]
    assert 0 < len(records) <= 1000
    counts = {}
    for log in records:
        request = getattr(log, log.WhichOneof("log_type")).request
        counts[request.model_spec.signature_name] = counts.get(request.model_spec.signature_name, 0) + 1
    loaded = load_version(os.path.dirname(os.path.abspath(version_dir)), int(os.path.basename(version_dir)),
                          warmup=False)
    with_inputs = {name for name, fn in loaded.signatures.items() if fn.structured_input_signature[1]}
    assert set(counts) == with_inputs, (sorted(counts), sorted(with_inputs))
    assert replay_warmup(loaded) == len(records)
    return counts
