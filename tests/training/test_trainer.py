import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.training import Trainer, masked_accuracy_counts, masked_sparse_cross_entropy
from tests.training import toy

ROOT = Path(__file__).resolve().parents[2]


def adam():
    return keras.optimizers.Adam(1e-2)


def make_trainer(**kwargs):
    kwargs.setdefault("verbose", 0)
    model_fn = kwargs.pop("model_fn", toy.make_model)
    return Trainer(model_fn, kwargs.pop("optimizer", adam), toy.compute_loss, **kwargs)


def test_loss_falls_and_history_is_plottable(tmp_path):
    trainer = make_trainer(log_dir=str(tmp_path / "logs"))
    history = trainer.fit(toy.make_dataset(), steps=60, log_every=20)
    assert trainer.step == 60 and trainer.stop_reason == "steps"
    assert history["step"] == [20, 40, 60]
    assert history["loss"][-1] < 0.2 * history["loss"][0]
    assert history["accuracy"][-1] > 0.9
    assert history["learning_rate"] == pytest.approx([1e-2] * 3)
    (event_file,) = os.listdir(tmp_path / "logs")
    tags = {
        value.tag
        for event in tf.compat.v1.train.summary_iterator(str(tmp_path / "logs" / event_file))
        for value in event.summary.value
    }
    assert {"loss", "accuracy", "learning_rate"} <= tags
    # A second fit continues from the current step.
    trainer.fit(toy.make_dataset(), steps=70, log_every=5)
    assert trainer.step == 70 and history["step"][-2:] == [65, 70]


def test_jit_and_no_jit_give_the_same_trajectory():
    losses = {}
    for jit in (True, False):
        trainer = make_trainer(model_fn=lambda: toy.make_model(dropout=0.0), jit_compile=jit)
        losses[jit] = trainer.fit(toy.make_dataset(), steps=15, log_every=1)["loss"]
    np.testing.assert_allclose(losses[True], losses[False], rtol=2e-4, atol=1e-5)


def test_single_step_update_is_the_gradient_of_the_masked_mean():
    keras.utils.set_random_seed(1)
    model = toy.make_model(dropout=0.0)
    x, y = toy.make_arrays(8, 10, seed=5)
    model.build((None, None))
    before = [np.array(v) for v in model.trainable_variables]
    with tf.GradientTape() as tape:
        loss_sum, count = masked_sparse_cross_entropy(y, model(x))
        mean = loss_sum / count
    grads = tape.gradient(mean, model.trainable_variables)
    trainer = Trainer(model, keras.optimizers.SGD(1.0), toy.compute_loss, verbose=0)
    trainer.fit(tf.data.Dataset.from_tensors((x, y)), steps=1)
    for b, g, v in zip(before, grads, model.trainable_variables):
        np.testing.assert_allclose(b - np.array(v), np.array(tf.convert_to_tensor(g)), atol=1e-6)


def test_clip_norm_bounds_the_update():
    model = toy.make_model(dropout=0.0)
    model.build((None, None))
    before = [np.array(v) for v in model.trainable_variables]
    trainer = Trainer(model, keras.optimizers.SGD(1.0), toy.compute_loss, clip_norm=0.01,
                      verbose=0)
    trainer.fit(toy.make_dataset(), steps=1)
    delta = [b - np.array(v) for b, v in zip(before, model.trainable_variables)]
    np.testing.assert_allclose(np.sqrt(sum((d**2).sum() for d in delta)), 0.01, rtol=1e-4)


def test_one_trace_serves_every_bucket_shape():
    buckets = [toy.make_dataset(length=n, seed=n) for n in (4, 8, 12)]
    choice = tf.data.Dataset.range(3).repeat()
    dataset = tf.data.Dataset.choose_from_datasets(buckets, choice)
    assert dataset.element_spec[0].shape.as_list() == [8, None]  # the bucketed dimension is unknown
    trainer = make_trainer()
    t = time.monotonic()
    trainer.fit(dataset, steps=30, log_every=10)
    wall = time.monotonic() - t
    # Per-step wall times of the last fit (the job's budget timing uses them): one per step, within the fit.
    assert len(trainer.step_seconds) == 30 and min(trainer.step_seconds) > 0 and sum(trainer.step_seconds) < wall
    # Traced once for the dataset's element_spec, not once per bucket (3 here): see trainer._trace_for.
    assert trainer.trace_count == 1
    trainer.evaluate(dataset.take(9))
    assert trainer.eval_trace_count == 1
    trainer.evaluate(tf.data.Dataset.choose_from_datasets(
        [toy.make_dataset(length=n, seed=n) for n in (5, 6, 7, 9, 10, 11)], tf.data.Dataset.range(6).repeat()).take(12))
    assert trainer.eval_trace_count == 1
    # A dataset of a static shape that the first trace admits reuses it too.
    fixed = toy.make_dataset(length=6, seed=1)
    assert fixed.element_spec[0].shape.as_list() == [8, 6]
    trainer.fit(fixed, steps=40, log_every=0)
    assert trainer.step == 40 and trainer.trace_count == 1


def test_evaluate_equals_manual_computation():
    trainer = make_trainer()
    trainer.fit(toy.make_dataset(), steps=5)
    # 40 examples in batches of 8 plus a partial batch of 3.
    x, y = toy.make_arrays(43, 9, seed=7)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    metrics = trainer.evaluate(dataset)
    logits = trainer.model(x, training=False)
    loss_sum, count = masked_sparse_cross_entropy(y, logits)
    correct, _ = masked_accuracy_counts(y, logits)
    np.testing.assert_allclose(metrics["loss"], float(loss_sum / count), rtol=1e-5)
    np.testing.assert_allclose(metrics["accuracy"], float(correct / count), rtol=1e-6)


def test_periodic_eval_is_recorded():
    trainer = make_trainer()
    eval_ds = toy.make_dataset(num=16, seed=9, repeat=False)
    history = trainer.fit(toy.make_dataset(), steps=10, eval_dataset=eval_ds, eval_every=5,
                          log_every=5)
    assert history["eval_step"] == [5, 10]
    assert history["eval_loss"][1] < history["eval_loss"][0]


def test_exact_resume_with_dropout(tmp_path):
    dataset = toy.make_dataset  # a callable: a fresh seeded pipeline, same sequence every time
    full = make_trainer(checkpoint_dir=str(tmp_path / "full"))
    full_history = full.fit(dataset, steps=20, log_every=1)

    first = make_trainer(checkpoint_dir=str(tmp_path / "split"))
    first.fit(dataset, steps=10, log_every=1)
    # Like a new process: a fresh model (here with scrambled weights) restored from the checkpoint.
    # The seed must stay the same: it is also the global seed for the dataset's shuffle.
    def scrambled_model():
        model = toy.make_model()
        model.build((None, None))
        rng = np.random.default_rng(123)
        model.set_weights([rng.normal(size=w.shape) for w in model.get_weights()])
        return model

    second = make_trainer(checkpoint_dir=str(tmp_path / "split"), model_fn=scrambled_model)
    assert second.step == 0
    second_history = second.fit(dataset, steps=20, log_every=1)
    assert second.step == 20
    np.testing.assert_allclose(second_history["loss"], full_history["loss"][10:], rtol=1e-6)
    for a, b in zip(toy.weights(full.model), toy.weights(second.model)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert tf.train.latest_checkpoint(str(tmp_path / "split")).endswith("ckpt-20")


def test_dropout_rng_state_is_checkpointed(tmp_path):
    trainer = make_trainer(checkpoint_dir=str(tmp_path))
    trainer.fit(toy.make_dataset(), steps=3)
    names = [name for name, _ in tf.train.list_variables(str(tmp_path))]
    assert any(name.startswith("rng_0/") for name in names)


def test_time_budget_stops_and_saves(tmp_path):
    trainer = make_trainer(checkpoint_dir=str(tmp_path))
    start = time.monotonic()
    trainer.fit(toy.make_dataset(), steps=10**7, time_budget=1.5, log_every=0)
    assert trainer.stop_reason == "time_budget"
    assert time.monotonic() - start < 60
    assert 0 < trainer.step < 10**7
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith(f"ckpt-{trainer.step}")


def test_time_budget_counts_the_tracing(monkeypatch):
    """Jobs compared at an equal budget must pay their tracing inside it: a trace that outlasts the budget leaves
    time for the one step fit always takes, not for a budget's worth of steps after it."""
    from kerasplm.training import trainer as trainer_module

    traced = trainer_module._trace_for

    def slow_trace(step_fn, data):
        traced(step_fn, data)
        time.sleep(1.0)

    monkeypatch.setattr(trainer_module, "_trace_for", slow_trace)
    trainer = make_trainer()
    trainer.fit(toy.make_dataset(), steps=10**7, time_budget=0.5, log_every=0)
    assert trainer.stop_reason == "time_budget" and trainer.step == 1


def test_finite_dataset_ends_training():
    trainer = make_trainer()
    trainer.fit(toy.make_dataset(repeat=False), log_every=0)
    assert trainer.step == 8 and trainer.stop_reason == "end_of_data"


def test_sigterm_in_process_stops_after_current_step(tmp_path):
    trainer = make_trainer(checkpoint_dir=str(tmp_path))
    previous = signal.getsignal(signal.SIGTERM)

    # The input pipeline sends SIGTERM to this process while producing batch 3.
    dataset = toy.make_dataset().enumerate().map(
        lambda i, batch: (tf.py_function(
            lambda i: os.kill(os.getpid(), signal.SIGTERM) if int(i) == 3 else None, [i], []
        ), batch)[1]
    )
    trainer.fit(dataset, steps=1000, log_every=0)
    assert trainer.stop_reason == "sigterm"
    assert trainer.step < 1000
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith(f"ckpt-{trainer.step}")
    assert signal.getsignal(signal.SIGTERM) is previous


def test_bfloat16_policy_trains():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        trainer = make_trainer()
        assert trainer.model.layers[-1].compute_dtype == "bfloat16"
        assert trainer.model.layers[-1].kernel.dtype == "float32"
        history = trainer.fit(toy.make_dataset(), steps=40, log_every=10)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert history["loss"][-1] < 0.3 * history["loss"][0]


def test_float16_policy_uses_loss_scaling():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        trainer = make_trainer()
        assert isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
        history = trainer.fit(toy.make_dataset(), steps=40, log_every=10)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert history["loss"][-1] < 0.3 * history["loss"][0]


def _run_script(tmp_path, name, steps, **popen):
    cmd = [sys.executable, "-m", "tests.training.train_script", "toy", "--steps", str(steps),
           "--ckpt", str(tmp_path / f"ckpt_{name}"), "--out", str(tmp_path / f"{name}.npz"),
           "--sleep", "0.05", "--checkpoint-every", "5"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


def test_sigterm_subprocess_resumes_to_the_same_weights(tmp_path):
    import json

    total = 40
    reference = _run_script(tmp_path, "ref", total)
    victim = _run_script(tmp_path, "cut", total)
    ckpt = tmp_path / "ckpt_cut" / "checkpoint"
    deadline = time.monotonic() + 120
    while not ckpt.exists() and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert victim.poll() is None, victim.communicate()[1][-3000:]
    victim.send_signal(signal.SIGTERM)
    out, err = victim.communicate(timeout=120)
    assert victim.returncode == 0, err[-3000:]
    cut = json.loads(out.splitlines()[-1][len("RESULT "):])
    assert cut["stop_reason"] == "sigterm" and 5 <= cut["step"] < total

    resumed = _run_script(tmp_path, "cut", total)
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err[-3000:]
    assert json.loads(out.splitlines()[-1][len("RESULT "):])["step"] == total
    out, err = reference.communicate(timeout=120)
    assert reference.returncode == 0, err[-3000:]

    ref, got = np.load(tmp_path / "ref.npz"), np.load(tmp_path / "cut.npz")
    for key in ref.files:
        np.testing.assert_allclose(got[key], ref[key], rtol=1e-6, atol=1e-7)


def test_compute_loss_without_weight_is_rejected():
    trainer = Trainer(toy.make_model, adam, lambda model, batch, training: {"loss": 0.0},
                      verbose=0)
    with pytest.raises(ValueError, match="'weight'"):
        trainer.fit(toy.make_dataset(), steps=1)


def test_two_term_loss_single_device_step_and_history():
    keras.utils.set_random_seed(2)
    model = toy.make_model(dropout=0.0)
    x, y = toy.make_arrays(8, 10, seed=6)
    model.build((None, None))
    before = [np.array(v) for v in model.trainable_variables]
    _, grads, means = toy.two_term_reference(model, x, y)
    trainer = Trainer(model, keras.optimizers.SGD(1.0), toy.two_term_loss, verbose=0)
    history = trainer.fit(tf.data.Dataset.from_tensors((x, y)), steps=1, log_every=1)
    for b, g, v in zip(before, grads, model.trainable_variables):
        np.testing.assert_allclose(b - np.array(v), np.array(tf.convert_to_tensor(g)), atol=1e-6)
    for key, value in means.items():
        assert history[key] == [pytest.approx(value, rel=1e-5)], key
    assert history["loss"][0] == pytest.approx(history["token_loss"][0] + 0.5 * history["even_loss"][0])


def _results(**extra):
    def compute_loss(model, batch, training):
        x, y = batch
        loss_sum, count = masked_sparse_cross_entropy(y, model(x, training=training))
        out = {"losses": {"a": (loss_sum, count)}}
        out.update({k: (v(loss_sum, count) if callable(v) else v) for k, v in extra.items()})
        return out
    return compute_loss


@pytest.mark.parametrize("compute_loss, message", [
    (lambda m, b, training: [1.0], "must return a dict, got list"),
    (lambda m, b, training: {"losses": {}}, "'losses' must be a non-empty dict"),
    (lambda m, b, training: {"losses": {"a": (1.0,)}}, "loss term 'a' must be (sum, count)"),
    (lambda m, b, training: {"losses": {"a": (1.0, 2.0, tf.constant(0.5))}}, "must be a finite Python number"),
    (lambda m, b, training: {"losses": {"a": (tf.ones(3), 2.0)}}, "must be a scalar sum, got shape (3,)"),
    (lambda m, b, training: {"losses": {"a": (1.0, 2.0)}, "loss": 1.0, "weight": 1.0}, "use one form"),
    (_results(accuracy=lambda s, c: s), "metric 'accuracy' needs its count"),
    (_results(a_loss=lambda s, c: (s, c)), "metric 'a_loss' clashes"),
])
def test_malformed_loss_results_are_rejected(compute_loss, message):
    trainer = Trainer(toy.make_model, adam, compute_loss, verbose=0)
    with pytest.raises(ValueError) as excinfo:
        trainer.fit(toy.make_dataset(), steps=1)
    assert message in str(excinfo.value)


def test_damaged_checkpoint_is_one_clear_error(tmp_path):
    from kerasplm.training.checkpoints import CheckpointError

    make_trainer(checkpoint_dir=str(tmp_path)).fit(toy.make_dataset(), steps=2)
    (data,) = [p for p in tmp_path.iterdir() if ".data-" in p.name]
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(CheckpointError) as excinfo:
        make_trainer(checkpoint_dir=str(tmp_path)).fit(toy.make_dataset(), steps=4)
    message = str(excinfo.value)
    assert str(data) in message and "truncated" in message and len(message.splitlines()) == 1
