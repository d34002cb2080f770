"""The export base (ExportModule + save_version) and the shared contract helpers, on a tiny string-in model.

The atomic-version rules are family-independent (``kerasplm.export.atomic``), so they are tested here, on a
model that exports in a fraction of a second, rather than once per family."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from kerasplm.export import ExportModule, read_metadata, save_version, warmup
from kerasplm.generation.options import map_option_groups
from kerasplm.serving.models import load_version
from tests.export.contract import assert_same_row, check_bad_inputs, check_warmup, run_isolated
from tests.export.toy_scorer import Scorer


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    base = tmp_path_factory.mktemp("toy") / "scorer"
    module = Scorer()
    return module, save_version(module, str(base), metadata={"preset": "toy", "answer": 42})


def test_save_version_layout_and_metadata(saved):
    module, path = saved
    assert os.path.basename(path) == "1" and os.listdir(os.path.dirname(path)) == ["1"]
    meta = read_metadata(path)
    assert meta["family"] == "toy_scorer" and meta["version"] == 1
    assert meta["preset"] == "toy" and meta["answer"] == 42
    assert meta["signatures"] == ["metadata", "serving_default"]
    assert {"kerasplm_version", "tensorflow_version", "tensorflow_text_version", "export_time"} <= set(meta)
    loaded = tf.saved_model.load(path)
    assert json.loads(loaded.signatures["metadata"]()["metadata"].numpy().decode()) == meta
    texts = tf.constant(["a b", "hello"])
    np.testing.assert_allclose(loaded.signatures["serving_default"](inputs=texts)["scores"].numpy(),
                               module.score(texts)["scores"].numpy(), rtol=1e-6)


def test_variables_restore_in_a_tf1_session(saved):
    """TF Serving and saved_model_cli run load through a TF1 session: the graph's variables must be restored."""
    module, path = saved
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta_graph.signature_def["serving_default"]
        scores = session.run(signature.outputs["scores"].name,
                             {signature.inputs["inputs"].name: np.array([b"a b", b"hello"], object)})
    np.testing.assert_allclose(scores, module.score(tf.constant(["a b", "hello"]))["scores"].numpy(), rtol=1e-6)


def test_versions_overwrite_and_errors(saved, tmp_path):
    module, _ = saved
    base = str(tmp_path / "scorer")
    assert save_version(module, base).endswith("/1") and save_version(module, base).endswith("/2")
    with pytest.raises(FileExistsError, match="version 2 exists; pass overwrite=True"):
        save_version(module, base, version=2)
    assert save_version(module, base, version=2, overwrite=True, metadata={"x": 1}) == os.path.join(base, "2")
    assert read_metadata(os.path.join(base, "2"))["x"] == 1 and sorted(os.listdir(base)) == ["1", "2"]
    assert save_version(module, base, version=7).endswith("/7")
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="version must be a positive integer"):
            save_version(module, base, version=bad)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        save_version(module, str(tmp_path / "file"))


def test_overwrite_replaces_the_files_and_stale_leftovers_are_cleaned(saved, tmp_path):
    module, _ = saved
    base = str(tmp_path / "scorer")
    path = save_version(module, base, version=3)
    stale = os.path.join(base, ".tmp-5-999999999-deadbeef")  # left by a killed export (no such pid)
    os.makedirs(os.path.join(stale, "variables"))
    assert save_version(module, base) == os.path.join(base, "4") and not os.path.exists(stale)
    before = read_metadata(path)["export_time"]
    inode = os.stat(os.path.join(path, "saved_model.pb")).st_ino
    time.sleep(1.1)
    assert save_version(module, base, version=3, overwrite=True) == path
    assert os.stat(os.path.join(path, "saved_model.pb")).st_ino != inode   # new files, renamed into place
    assert read_metadata(path)["export_time"] >= before
    assert sorted(os.listdir(base)) == ["3", "4"]


_KILL_SCRIPT = r"""
import os, sys, time
from kerasplm.export import save_version
from tests.export.toy_scorer import Scorer
real_rename = os.rename
def slow_rename(a, b, *args, **kw):   # the SavedModel is complete in the tmp dir: wait to be killed
    if os.path.basename(a).startswith(".tmp-"):
        print("READY", a, flush=True)
        time.sleep(600)
    return real_rename(a, b, *args, **kw)
os.rename = slow_rename
save_version(Scorer(), sys.argv[1])
"""


def test_kill_mid_export_leaves_no_version(saved, tmp_path):
    base = str(tmp_path / "scorer")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, base], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=repo, env=env)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), line
        tmp = line.split()[1]
        assert os.path.isfile(os.path.join(tmp, "saved_model.pb"))
        assert os.path.isfile(os.path.join(tmp, "assets.extra", "kerasplm.json"))
        assert [n for n in os.listdir(base) if n.isdigit()] == []
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    names = os.listdir(base)
    assert [n for n in names if n.isdigit()] == [] and len(names) == 1 and names[0].startswith(".tmp-1-")
    from kerasplm.export.atomic import list_version_numbers

    assert list_version_numbers(base) == []  # servers list versions with this: they ignore the leftover
    path = save_version(saved[0], base)  # cleans it and takes version 1
    assert os.listdir(base) == ["1"] and path.endswith("/1")


def test_signatures_are_validated(tmp_path):
    class NoSignatures(ExportModule):
        family = "toy"

    class WithMetadata(Scorer):
        def signatures(self):
            return {"serving_default": self.score, "metadata": self.score}

    model = keras.Sequential([keras.Input([2]), keras.layers.Dense(2)])
    with pytest.raises(NotImplementedError, match="NoSignatures must define its signatures"):
        save_version(NoSignatures(model), str(tmp_path / "a"))
    with pytest.raises(ValueError, match="must contain 'serving_default' and not 'metadata'"):
        save_version(WithMetadata(), str(tmp_path / "b"))
    with pytest.raises(ValueError, match="needs a family name"):
        ExportModule(model)
    assert not os.path.exists(tmp_path / "a" / "1") and not os.path.exists(tmp_path / "b" / "1")

    class NotAClassifier(Scorer):   # a classification method on a signature TF Serving could not classify with
        def signature_methods(self):
            return {"serving_default": "tensorflow/serving/classify"}

    class UnknownName(Scorer):
        def signature_methods(self):
            return {"classify": "tensorflow/serving/classify"}

    with pytest.raises(ValueError, match=r"outputs must be 'classes' and/or 'scores', has \['length', 'scores'\]"):
        save_version(NotAClassifier(), str(tmp_path / "c"))
    with pytest.raises(ValueError, match=r"signature_methods\(\) names \['classify'\], which signatures\(\) lacks"):
        save_version(UnknownName(), str(tmp_path / "d"))
    assert not os.path.exists(tmp_path / "c" / "1") and not os.path.exists(tmp_path / "d" / "1")


def test_contract_helpers_pass_on_a_conforming_model(saved):
    _, path = saved
    alone = check_bad_inputs(path, "serving_default", "inputs")
    assert alone["long"]["length"].tolist() == [len(" ".join(["word"] * 5000))]
    assert alone["empty"]["length"].tolist() == [0]
    (outputs,) = run_isolated(path, [("serving_default", {"inputs": ["a b", b"\xff"]})])
    assert outputs["length"] == [3, 1] and len(outputs["scores"]) == 2


def test_contract_helpers_catch_a_batch_dependent_model(tmp_path):
    path = save_version(Scorer(leaky=True), str(tmp_path / "leaky"))
    with pytest.raises(AssertionError, match="serving_default/scores, row"):
        check_bad_inputs(path, "serving_default", "inputs")


def test_assert_same_row_crops_padding():
    assert_same_row(np.array([b"a", b"b"], object), np.array([b"a", b"b", b""], object))
    assert_same_row(np.ones([2, 2]), np.pad(np.ones([2, 2]), [[0, 1], [0, 3]]))
    with pytest.raises(AssertionError, match="padding outside the row is not zero"):
        assert_same_row(np.ones([2]), np.ones([3]))
    with pytest.raises(AssertionError, match="shape"):
        assert_same_row(np.ones([3]), np.ones([2]))


# ---- warmup records and per-row option groups ----
def test_warmup_records_are_tf_servings_format_and_replay(saved):
    _, path = saved
    records = list(tf.data.TFRecordDataset(os.path.join(path, "assets.extra", "tf_serving_warmup_requests")))
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in records]
    # One sentence, then a batch of sentences of several lengths: TF Serving's PredictLog records.
    assert [log.WhichOneof("log_type") for log in logs] == ["predict_log"] * 2
    requests = [log.predict_log.request for log in logs]
    assert {r.model_spec.signature_name for r in requests} == {"serving_default"}
    batches = [tf.make_ndarray(r.inputs["inputs"]) for r in requests]
    assert [b.shape for b in batches] == [(1,), (len(warmup.WARMUP_SENTENCES),)]
    assert check_warmup(path) == {"serving_default": 2}


class _Extra(Scorer):
    def __init__(self, requests):
        super().__init__()
        self.extra = requests

    def warmup_requests(self):
        return super().warmup_requests() + self.extra


@pytest.mark.parametrize("requests, message", [
    ([warmup.WarmupRequest("nope", {"inputs": ["x"]})], "unknown signature 'nope'"),
    ([warmup.WarmupRequest("serving_default", {"text": ["x"]})], "takes \\['inputs'\\]"),
    ([warmup.WarmupRequest("serving_default", {"inputs": ["x"]})] * 1000, "TF Serving replays at most 1000"),
])
def test_a_warmup_file_tf_serving_would_refuse_fails_the_export(tmp_path, requests, message):
    with pytest.raises(ValueError, match=message):
        save_version(_Extra(requests), str(tmp_path / "scorer"))
    assert not [p for p in os.listdir(tmp_path / "scorer") if not p.startswith(".")]   # nothing published


def test_replay_refuses_damaged_warmup_files(saved, tmp_path):
    _, path = saved
    base = tmp_path / "copy"
    shutil.copytree(path, base / "1")
    warmup_file = base / "1" / "assets.extra" / "tf_serving_warmup_requests"
    with tf.io.TFRecordWriter(str(warmup_file)) as writer:
        writer.write(b"\x08\x01not a prediction log")
    with pytest.raises(ValueError, match="record 0: not a tensorflow.serving.PredictionLog"):
        load_version(str(base), 1)
    assert load_version(str(base), 1, warmup=False).version == 1
    warmup_file.write_bytes(b"garbage that is no TFRecord")
    with pytest.raises(ValueError, match="not a TFRecord file"):
        load_version(str(base), 1)


def test_map_option_groups_runs_each_combination_once_in_batch_order():
    calls = []

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int32),
                                  tf.TensorSpec([None], tf.float32)])
    def tag(texts, beam, temperature):
        def fn(rows, options):
            (group_texts,), (group_beam, group_temperature) = rows, options
            calls.append(1)   # traced once: the loop body is one function whatever the number of groups
            label = tf.strings.format("{}/{}", (group_beam, group_temperature))
            return {"tagged": tf.strings.join([group_texts, tf.fill(tf.shape(group_texts), label)], ":"),
                    "size": tf.fill(tf.shape(group_texts), tf.size(group_texts))}
        return map_option_groups(fn, [texts], [beam, temperature], {"tagged": tf.string, "size": tf.int32})

    out = tag(tf.constant(["a", "b", "c", "d", "e"]), tf.constant([1, 2, 1, 1, 2]),
              tf.constant([0.5, 0.5, 0.5, 0.25, 0.5]))
    assert out["tagged"].numpy().tolist() == [b"a:1/0.5", b"b:2/0.5", b"c:1/0.5", b"d:1/0.25", b"e:2/0.5"]
    assert out["size"].numpy().tolist() == [2, 2, 2, 1, 2]   # a, c together; b, e together; d alone
    empty = tag(tf.constant([], tf.string), tf.constant([], tf.int32), tf.constant([], tf.float32))
    assert empty["tagged"].shape == (0,) and len(calls) == 1
