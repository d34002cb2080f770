"""MirroredStrategy (2 logical CPUs) and MultiWorkerMirroredStrategy (2 local workers), in
subprocesses: logical devices and TF_CONFIG must be set before TensorFlow initializes."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.jobs.multiworker import free_ports, tf_config

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow")
    env.update(extra)
    return env


def _result(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, stdout[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_mirrored_matches_single_device_and_trains():
    proc = subprocess.run(
        [sys.executable, "-m", "tests.training.train_script", "mirrored"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = _result(proc.stdout)
    assert report["replicas"] == 2
    for clip in ("None", "0.05"):
        # The first update moved the weights, and did so identically on 1 and 2 replicas,
        # although the two replicas held very different numbers of real tokens.
        assert report[f"update_{clip}"] > 1e-3
        assert report[f"weight_diff_{clip}"] < 1e-6
        assert report[f"loss_diff_{clip}"] < 1e-5
    assert report["update_0.05"] < report["update_None"]
    # FusedAdamW (TensorFlow's fused Adam kernel) updates the same on 1 and 2 replicas.
    assert report["fused_update"] > 1e-3 and report["fused_weight_diff"] < 1e-6
    # So does Keras' Adam on learned positions, whose rows each replica sums over its examples: the Trainer hands the
    # optimizer dense gradients (as IndexedSlices, one row per replica, Adam's second moment differed by ~lr).
    assert report["position_update"] > 1e-2 and report["position_weight_diff"] < 1e-6
    losses = report["losses"]
    assert losses[-1] < 0.3 * losses[0]
    assert report["trace_count"] == 1


def test_two_loss_terms_are_exact_across_replicas():
    """L = token CE mean + 0.5 * even-token CE mean, each over the GLOBAL batch: one step on 2 replicas
    with very uneven counts updates the weights like the hand-computed gradient of L, and reports
    L, each term's mean and the accuracy exactly (train history and evaluate)."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.training.train_script", "multiterm"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = _result(proc.stdout)
    assert report["mirrored_replicas"] == 2
    assert report["update"] > 1e-2
    # A mean of per-replica means would be far off; the Trainer is exact to float32 rounding.
    assert report["naive_grad_diff"] > 1e-2
    for name in ("default", "mirrored"):
        assert report[f"{name}_weight_diff"] < 1e-6
        assert report[f"{name}_metric_diff"] < 1e-5
        assert report[f"{name}_eval_diff"] < 1e-5
        assert report[f"{name}_keys"] == ["accuracy", "even_loss", "loss", "token_loss"]


def test_multiworker_two_processes_agree(tmp_path):
    ports = free_ports(2)
    procs = []
    for index in range(2):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tests.training.train_script", "multiworker", "--steps", "6",
             "--ckpt", str(tmp_path / "ckpt"), "--out", str(tmp_path / f"w{index}.npz")],
            cwd=ROOT, env=_env(TF_CONFIG=tf_config(ports, index)), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        ))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=180))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
    reports = [_result(out) for out, _ in outputs]
    assert [r["is_chief"] for r in reports] == [True, False]
    assert all(r["replicas"] == 2 and r["step"] == 6 for r in reports)
    np.testing.assert_allclose(reports[0]["losses"], reports[1]["losses"], rtol=1e-6)
    assert reports[0]["losses"][-1] < reports[0]["losses"][0]
    w0, w1 = np.load(tmp_path / "w0.npz"), np.load(tmp_path / "w1.npz")
    for key in w0.files:
        np.testing.assert_array_equal(w0[key], w1[key])
    # Only the chief wrote into the shared checkpoint directory.
    assert (tmp_path / "ckpt" / "checkpoint").exists()
    assert "ckpt-6.index" in os.listdir(tmp_path / "ckpt")


def test_datasets_are_sharded_by_data(monkeypatch):
    """The Trainer hands the strategy its datasets with tf.data's DATA auto-shard policy: with the default, AUTO, two
    workers reading a pipeline of two files would each read one file (worker 0 the batches [0, 1], [2, 3], ...
    of file 0, worker 1 those of file 1) instead of splitting the global batches a single process makes (measured
    with two MultiWorkerMirroredStrategy workers). A policy the dataset names itself is kept."""
    import keras
    import tensorflow as tf

    from kerasplm.training import Trainer
    from tests.training import toy

    policy = tf.data.experimental.AutoShardPolicy
    strategy, seen = tf.distribute.get_strategy(), []
    distribute = strategy.experimental_distribute_dataset

    def recording(dataset, options=None):
        seen.append(dataset.options().experimental_distribute.auto_shard_policy)
        return distribute(dataset, options)

    monkeypatch.setattr(strategy, "experimental_distribute_dataset", recording)
    trainer = Trainer(toy.make_model, lambda: keras.optimizers.SGD(0.1), toy.compute_loss, strategy=strategy,
                      verbose=0)
    trainer.fit(toy.make_dataset(), steps=1, log_every=0)
    off = tf.data.Options()
    off.experimental_distribute.auto_shard_policy = policy.OFF
    trainer.evaluate(toy.make_dataset(repeat=False).with_options(off))
    assert seen == [policy.DATA, policy.OFF]
