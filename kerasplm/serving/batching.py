"""Request batching for ``kerasplm serve --enable_batching``: concurrent predict requests to the same
signature of the same loaded version merged into one signature call, as TensorFlow Serving's batching
session does.

**Parameters** (:class:`BatchingParameters`) come from ``--batching_parameters_file``, TF Serving's
text-format ``tensorflow.serving.BatchingParameters``, parsed by ``google.protobuf.text_format`` (through
:func:`kerasplm.serving.config.parse_text_proto`: one-line ``FILE:LINE: problem`` errors).
``tensorflow-serving-api`` does not ship that proto (``session_bundle_config_pb2``), so this module
declares the message with TF Serving's field names, numbers and types, for the fields kerasplm serve
implements; a field of newer TF Serving versions (``enable_large_batch_splitting``...) is an error naming
it::

    max_batch_size { value: 32 }          # rows per merged call (TF Serving's default 1000)
    batch_timeout_micros { value: 2000 }  # how long an open batch waits for more rows (default 0)
    max_enqueued_batches { value: 100 }   # queue bound per signature, in batches (default 10)
    num_batch_threads { value: 4 }        # batches run in parallel (default: the CPU count)
    allowed_batch_sizes: 8                # optional; increasing, the last = max_batch_size
    allowed_batch_sizes: 32
    pad_variable_length_inputs: true      # pad inputs' other dimensions (default false)
    thread_pool_name { value: "batch" }   # optional; names the batch threads

**Scheduling** (TF Serving's ``SharedBatchScheduler``): each (loaded version, signature) has a queue of
batches, the last one open.  A request's rows join the open batch if they fit in ``max_batch_size``,
else start a new batch; if the queue already holds ``max_enqueued_batches`` batches the request is
refused with UNAVAILABLE "The batch scheduling queue to which this task was submitted is full" (HTTP
503 over REST).  A batch is run by one of ``num_batch_threads`` threads once it is full, once a newer
batch was started behind it, or once it has been open ``batch_timeout_micros`` (0: as soon as a thread
is free).  Batches being run no longer count against the queue bound.

**Merging** (TF Serving's ``BatchingSession``): inputs are concatenated along axis 0.  With
``pad_variable_length_inputs`` every input is first padded along its other dimensions to the batch's
largest size, with the input's own first element (TF Serving's choice: a value the model accepts);
without it only requests whose inputs have the same trailing shapes are merged (TF Serving would
fail such a batch instead).  With ``allowed_batch_sizes`` the batch is padded up to the next allowed
size with copies of the last request's first row; those rows' outputs are dropped.

**Splitting**: every output must have one row per batch row; each request gets its own rows back.
Dimensions other than the 0th that are unknown in the output signature (a ragged result padded to the
longest row of the call, e.g. a token matrix padded with ``""``) are cropped back to what the request
alone gives: along such an axis a request keeps the positions up to its last value that is not the
padding value (``b""``, 0 or False), taken over every output that has that axis at the same batched
size (so an integer output is cropped like the string output beside it).  This equals the request's own
answer when the signature pads ragged results with that value, as kerasplm's exports and the toy
models do; an output whose genuine values end with the padding value across all such outputs would be
cropped shorter.

**Failures**: if a merged call fails (a model error, outputs that cannot be split) every request of the
batch is run again on its own, so one bad request cannot fail the others.  A request with more rows
than ``max_batch_size``, or with zero rows, is not queued: the caller runs it as before.

Which signatures are batched is the caller's rule (:func:`batch_safe`, TF Serving's: every input and
output has an unknown 0th dimension).  The batcher knows no TensorFlow: it merges and splits numpy
arrays and calls the function it is given.
"""
from __future__ import annotations

import functools
import os
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from kerasplm.serving.config import parse_text_proto, read_text_file
from kerasplm.serving.api import RequestError

QUEUE_FULL_MESSAGE = "The batch scheduling queue to which this task was submitted is full"
# Bounds beyond which a value is a typo, not a setting: a batch timeout over an hour, a thread per
# ten thousand, a batch of more rows than an int32 holds.
MAX_TIMEOUT_MICROS = 3_600_000_000
MAX_THREADS = 1024
MAX_ROWS = 2**31 - 1
# TF Serving's thread pool name when --enable_batching is given without a parameters file.
DEFAULT_THREAD_POOL_NAME = "model_server_batch_threads"


class BatchingParametersError(ValueError):
    """A batching parameters file that cannot be used; the message is ``FILE:LINE: problem``."""


@dataclass(frozen=True)
class BatchingParameters:
    """TF Serving's ``BatchingParameters`` with its defaults (see the module docstring)."""

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = field(default_factory=lambda: min(os.cpu_count() or 1, MAX_THREADS))
    thread_pool_name: str = "batch_threads"
    allowed_batch_sizes: tuple = ()
    pad_variable_length_inputs: bool = False

    def __post_init__(self):
        problem = self.problem()
        if problem:
            raise ValueError(problem)

    def problem(self) -> str | None:
        """What is wrong with these values (None if nothing): TF Serving's rules and sane bounds."""
        for name, low, high in (("max_batch_size", 1, MAX_ROWS), ("batch_timeout_micros", 0, MAX_TIMEOUT_MICROS),
                                ("max_enqueued_batches", 1, 2**63 - 1), ("num_batch_threads", 1, MAX_THREADS)):
            value = getattr(self, name)
            if type(value) is not int or not low <= value <= high:
                return f"'{name}' must be an integer in [{low}, {high}], got {value!r}"
        sizes = self.allowed_batch_sizes
        if any(type(s) is not int or s < 1 for s in sizes):
            return f"'allowed_batch_sizes' must be positive integers, got {list(sizes)}"
        if any(b <= a for a, b in zip(sizes, sizes[1:])):
            return f"'allowed_batch_sizes' must be in increasing order, got {list(sizes)}"
        if sizes and sizes[-1] != self.max_batch_size:
            return (f"the last entry of 'allowed_batch_sizes' must equal max_batch_size ({self.max_batch_size}), "
                    f"got {sizes[-1]}")
        return None

    def padded_size(self, rows: int) -> int:
        """The smallest allowed batch size >= ``rows`` (``rows`` itself without allowed sizes)."""
        for size in self.allowed_batch_sizes:
            if size >= rows:
                return size
        return rows


# --------------------------------------------------------------------------------------------
# The text format

_WRAPPED_INTS = ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads")
# Fields of newer TF Serving versions that kerasplm serve does not implement: named in the error.
_UNSUPPORTED = dict.fromkeys(("enable_large_batch_splitting", "max_execution_batch_size", "enable_lazy_split",
                              "batch_padding_policy", "mixed_priority_batching_policy",
                              "experimental_fixed_input_tensors"))
_MESSAGE = "tensorflow.serving.BatchingParameters"


@functools.lru_cache(maxsize=None)
def _batching_parameters_proto():
    """TF Serving's ``tensorflow.serving.BatchingParameters`` message class, the fields kerasplm serve
    implements (1-7, as in ``tensorflow_serving/servables/tensorflow/session_bundle_config.proto``).

    ``tensorflow-serving-api`` ships the API and config protos but not ``session_bundle_config_pb2``, so
    the message is declared here, with TF Serving's names, numbers and types, in a descriptor pool of its
    own (no clash with a real ``session_bundle_config_pb2``)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    field_type = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    file = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/servables/tensorflow/session_bundle_config.proto", package="tensorflow.serving",
        syntax="proto3", dependency=["google/protobuf/wrappers.proto"])
    message = file.message_type.add(name="BatchingParameters")
    for number, name in enumerate(_WRAPPED_INTS + ("thread_pool_name",), start=1):
        message.field.add(name=name, number=number, label=field_type.LABEL_OPTIONAL, type=field_type.TYPE_MESSAGE,
                          type_name=".google.protobuf." + ("StringValue" if number == 5 else "Int64Value"))
    message.field.add(name="allowed_batch_sizes", number=6, label=field_type.LABEL_REPEATED, type=field_type.TYPE_INT64)
    message.field.add(name="pad_variable_length_inputs", number=7, label=field_type.LABEL_OPTIONAL,
                      type=field_type.TYPE_BOOL)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(_MESSAGE))


def parse_batching_parameters(text: str, filename: str = "<batching parameters>") -> BatchingParameters:
    """Parse TF Serving's text-format ``BatchingParameters`` (with ``google.protobuf.text_format``);
    :class:`BatchingParametersError` (``filename:line: problem``) for a syntax error, an unknown or
    unsupported field, a repeated one, a bad or out-of-range value."""
    proto = _batching_parameters_proto()()
    root = parse_text_proto(text, proto, filename, BatchingParametersError,
                            {_MESSAGE: ("BatchingParameters", None)}, _UNSUPPORTED)

    def error(line: int, problem: str) -> BatchingParametersError:
        return BatchingParametersError(f"{filename}:{line}: {problem}")

    values, lines = {}, {}
    for name in _WRAPPED_INTS + ("thread_pool_name",):
        site = root.first(name)
        if site is None:
            continue
        lines[name] = site.line
        if site.first("value") is None:  # `name { }`: the wrapper is set, its value is not
            raise error(site.line, f"'{name}' needs a 'value'")
        values[name] = getattr(proto, name).value
        if name != "thread_pool_name" and values[name] < 0:
            raise error(site.first("value").line, f"'value' must be an integer in [0, 2^63), got {values[name]}")
    for size, site in zip(proto.allowed_batch_sizes, root.all("allowed_batch_sizes")):
        if size < 1:
            raise error(site.line, f"'allowed_batch_sizes' must be an integer in [1, 2^63), got {size}")
        lines["allowed_batch_sizes"] = site.line
    values["allowed_batch_sizes"] = tuple(proto.allowed_batch_sizes)
    values["pad_variable_length_inputs"] = proto.pad_variable_length_inputs
    try:
        return BatchingParameters(**values)
    except ValueError as e:  # the message names the field first: report that field's line
        named = re.search(r"'(\w+)'", str(e))
        raise error(lines.get(named.group(1) if named else "", 1), str(e)) from None


def read_batching_parameters_file(path: str) -> BatchingParameters:
    """Read a ``--batching_parameters_file``."""
    text = read_text_file(path, "the batching parameters file", BatchingParametersError)
    return parse_batching_parameters(text, path)


# --------------------------------------------------------------------------------------------
# Merging and splitting (pure functions over numpy arrays)


def batch_safe(input_shapes: dict, output_shapes: dict) -> bool:
    """TF Serving's rule for a batchable signature: every input and every output has an unknown 0th
    dimension (the batch).  Shapes are ``tf.TensorShape``-likes with ``.rank`` and indexing."""
    shapes = list(input_shapes.values()) + list(output_shapes.values())
    return bool(input_shapes) and all(s.rank not in (None, 0) and s[0] is None for s in shapes)


def _fill_value(dtype):
    return b"" if dtype == object else np.zeros((), dtype)


def _pad_to(array: np.ndarray, trailing: tuple, fill) -> np.ndarray:
    """``array`` padded at the end of every dimension but the 0th to ``trailing`` with ``fill``."""
    if array.shape[1:] == trailing:
        return array
    out = np.full((array.shape[0],) + trailing, fill, dtype=array.dtype)
    out[(slice(None),) + tuple(slice(0, d) for d in array.shape[1:])] = array
    return out


def merge_inputs(requests: list, batch_size: int, pad_variable_length: bool) -> dict:
    """``[{input: array}]`` (one dict per request) -> ``{input: array of batch_size rows}``.

    Requests are concatenated along axis 0; with ``pad_variable_length`` each input is first padded
    along its other dimensions to the largest request's size with that request's own first element
    (TF Serving's rule); rows up to ``batch_size`` are copies of the last request's first row.
    """
    merged = {}
    for name in requests[0]:
        arrays = [r[name] for r in requests]
        if pad_variable_length:
            if len({a.ndim for a in arrays}) != 1:
                raise ValueError(f"input '{name}' has different ranks in the batch")
            trailing = tuple(max(a.shape[i] for a in arrays) for i in range(1, arrays[0].ndim))
            if any(a.shape[1:] != trailing and a.size == 0 for a in arrays):
                raise ValueError(f"input '{name}': an empty tensor cannot be padded")
            arrays = [_pad_to(a, trailing, a.flat[0] if a.size else None) for a in arrays]
        rows = sum(a.shape[0] for a in arrays)
        if batch_size > rows:
            arrays.append(np.repeat(arrays[-1][:1], batch_size - rows, axis=0))
        merged[name] = np.concatenate(arrays, axis=0)
    return merged


def _content_extent(array: np.ndarray, axis: int) -> int:
    """1 + the last index along ``axis`` holding a value other than the padding value (0 if none)."""
    if array.shape[axis] == 0:
        return 0
    if array.dtype == object:
        filled = np.vectorize(lambda v: v != b"" and v != "", otypes=[bool])(array)
    else:
        filled = array != _fill_value(array.dtype)
    others = tuple(i for i in range(array.ndim) if i != axis)
    along = filled.any(axis=others) if others else filled
    hits = np.flatnonzero(along)
    return int(hits[-1]) + 1 if hits.size else 0


def split_outputs(outputs: dict, rows: list, batch_size: int, unknown_axes: dict) -> list:
    """A merged call's ``{output: array}`` -> one ``{output: array}`` per request (``rows`` each).

    Every output must have ``batch_size`` rows (else ValueError).  ``unknown_axes`` maps an output to
    the axes (> 0) its signature leaves unknown; along those, each request's part is cropped as the
    module docstring describes.
    """
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != batch_size:
            raise ValueError(f"output '{name}' has shape {list(array.shape)}; expected {batch_size} rows "
                             "(one per batched row)")
    parts, start = [], 0
    for n in rows:
        part = {name: array[start:start + n] for name, array in outputs.items()}
        start += n
        # Outputs sharing an unknown axis at the same batched size are cropped together.
        extents = {}
        for name, axes in unknown_axes.items():
            for axis in axes:
                key = (axis, outputs[name].shape[axis])
                extents[key] = max(extents.get(key, 0), _content_extent(part[name], axis))
        for name, axes in unknown_axes.items():
            if axes:
                crop = [slice(None)] * part[name].ndim
                for axis in axes:
                    crop[axis] = slice(0, extents[(axis, outputs[name].shape[axis])])
                part[name] = part[name][tuple(crop)]
        parts.append(part)
    return parts


# --------------------------------------------------------------------------------------------
# The scheduler


class _Task:
    """One request waiting for its answer."""

    def __init__(self, inputs: dict, rows: int):
        self.inputs = inputs
        self.rows = rows
        self.done = threading.Event()
        self.result = None
        self.error = None

    def finish(self, result=None, error=None):
        self.result, self.error = result, error
        self.done.set()


class _Batch:
    def __init__(self, opened: float):
        self.opened = opened
        self.tasks: list = []
        self.rows = 0


class _Queue:
    """The batches of one (loaded version, signature[, trailing shapes]); the last one is open."""

    def __init__(self, run, unknown_axes: dict):
        self.run = run  # also keeps the loaded version alive while the queue exists
        self.unknown_axes = unknown_axes
        self.batches: list = []


class Batcher:
    """Merges concurrent requests into batched calls (see the module docstring).

    :meth:`submit` blocks until the request's outputs are ready.  For metrics, ``on_request(rows)`` is
    called for every request queued, ``on_batch(rows, padded_rows)`` for every batch run and
    ``on_call()`` for every signature call (a batch, or a request of a failed batch run again alone).
    :meth:`flush` makes every batch run at once (a stop is coming; requests still arrive and run);
    :meth:`close` waits for the queued batches and stops the threads.
    """

    def __init__(self, params: BatchingParameters, on_batch=None, on_request=None, on_call=None,
                 clock=time.monotonic):
        self.params = params
        self.on_batch = on_batch
        self.on_request = on_request
        self.on_call = on_call
        self.clock = clock
        self._cv = threading.Condition()
        self._queues: dict = {}
        self._threads: list = []
        self._flushing = False
        self._closed = False
        self._running = 0
        self.calls = 0  # merged calls made (each request run again alone counts too)

    def accepts(self, rows: int) -> bool:
        """Whether a request of ``rows`` rows is queued (else the caller runs it on its own)."""
        return 0 < rows <= self.params.max_batch_size

    def submit(self, key, inputs: dict, run, unknown_axes: dict) -> dict:
        """Queue a request and wait for its outputs.

        ``key`` identifies the signature (requests with equal keys are merged); ``inputs`` maps each
        input to an array whose 0th dimension is the request's rows (the same for all); ``run`` runs
        ``{input: array}`` through the signature and returns ``{output: array}`` (it raises what the
        request should get on failure); ``unknown_axes`` maps each output to its unknown axes > 0.
        Raises :class:`RequestError` UNAVAILABLE (503) when the queue is full.
        """
        rows = {int(a.shape[0]) for a in inputs.values()}
        if len(rows) != 1:
            raise RequestError(400, "Batching: every input must have the same number of rows (0th dimension)")
        (n,) = rows
        if not self.params.pad_variable_length_inputs:
            key = (key, tuple(sorted((name, a.shape[1:]) for name, a in inputs.items())))
        task = _Task(inputs, n)
        with self._cv:
            if self._closed:
                return run(inputs)
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _Queue(run, unknown_axes)
            batches = queue.batches
            if not batches or batches[-1].rows + n > self.params.max_batch_size:
                if len(batches) >= self.params.max_enqueued_batches:
                    raise RequestError(503, QUEUE_FULL_MESSAGE, code="UNAVAILABLE")
                batches.append(_Batch(self.clock()))
            batches[-1].tasks.append(task)
            batches[-1].rows += n
            self._start_threads()
            self._cv.notify_all()
        if self.on_request is not None:
            self.on_request(n)
        task.done.wait()
        if task.error is not None:
            raise task.error
        return task.result

    def _start_threads(self):
        if not self._threads:
            self._threads = [threading.Thread(target=self._work, name=f"{self.params.thread_pool_name}-{i}",
                                              daemon=True) for i in range(self.params.num_batch_threads)]
            for thread in self._threads:
                thread.start()

    # -- worker threads ---------------------------------------------------------------------------
    def _ready(self, batches: list, now: float) -> bool:
        first = batches[0]
        return (len(batches) > 1 or first.rows >= self.params.max_batch_size or self._flushing
                or now - first.opened >= self.params.batch_timeout_micros / 1e6)

    def _take(self):
        """The ready batch that was opened first, removed from its queue: ``(queue, batch)`` or None,
        and the time until the next open batch times out."""
        now = self.clock()
        best, wait = None, None
        for key, queue in self._queues.items():
            if self._ready(queue.batches, now):
                if best is None or queue.batches[0].opened < best[1].batches[0].opened:
                    best = (key, queue)
            else:
                left = queue.batches[0].opened + self.params.batch_timeout_micros / 1e6 - now
                wait = left if wait is None else min(wait, left)
        if best is None:
            return None, wait
        key, queue = best
        batch = queue.batches.pop(0)
        if not queue.batches:
            del self._queues[key]
        return (queue, batch), None

    def _work(self):
        while True:
            with self._cv:
                while True:
                    taken, wait = self._take()
                    if taken is not None:
                        break
                    if self._closed and not self._queues:
                        return
                    self._cv.wait(wait)
                self._running += 1
            try:
                self._process(*taken)
            finally:
                with self._cv:
                    self._running -= 1
                    self._cv.notify_all()

    def _count_call(self):
        with self._cv:
            self.calls += 1
        if self.on_call is not None:
            self.on_call()

    def _process(self, queue: _Queue, batch: _Batch):
        tasks = batch.tasks
        padded = self.params.padded_size(batch.rows)
        if len(tasks) == 1 and padded == batch.rows:  # nothing to merge: the request's own call
            if self.on_batch is not None:
                self.on_batch(batch.rows, padded)
            self._run_alone(queue, tasks[0])
            return
        try:
            merged = merge_inputs([t.inputs for t in tasks], padded, self.params.pad_variable_length_inputs)
            self._count_call()
            if self.on_batch is not None:
                self.on_batch(batch.rows, padded)
            outputs = queue.run(merged)
            parts = split_outputs(outputs, [t.rows for t in tasks] + [padded - batch.rows], padded,
                                  queue.unknown_axes)
        except Exception:
            for task in tasks:  # one bad request must not fail the others
                self._run_alone(queue, task)
            return
        for task, part in zip(tasks, parts):
            task.finish(result=part)

    def _run_alone(self, queue: _Queue, task: _Task):
        self._count_call()
        try:
            task.finish(result=queue.run(task.inputs))
        except Exception as e:
            task.finish(error=e)

    # -- stopping ---------------------------------------------------------------------------------
    def open(self):
        """Batch again after :meth:`close` (a server started again)."""
        with self._cv:
            if self._closed:
                self._flushing = self._closed = False
                self._threads = []

    def flush(self):
        """Run every queued batch at once from now on (no waiting for ``batch_timeout_micros``)."""
        with self._cv:
            self._flushing = True
            self._cv.notify_all()

    def close(self, timeout: float | None = None) -> bool:
        """Run what is queued, then stop the threads (later submits run inline).  True if all finished
        within ``timeout`` seconds."""
        with self._cv:
            self._flushing = self._closed = True
            self._cv.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)
