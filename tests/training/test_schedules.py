import math

import keras
import matplotlib
import numpy as np
import pytest

import tensorflow as tf

from kerasplm.training import (BudgetSchedule, CustomSchedule, SlantedTriangular, WarmupCosineDecay, WarmupLinearDecay,
                              plot_schedule)

matplotlib.use("Agg")


def transformer_lr(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize("step", [1, 10, 1000, 3999, 4000, 4001, 40000])
def test_custom_schedule_formula(step):
    schedule = CustomSchedule(512, warmup_steps=4000)
    np.testing.assert_allclose(float(schedule(step)), transformer_lr(step, 512, 4000), rtol=1e-5)


def test_custom_schedule_step_zero_is_zero_not_nan():
    value = float(CustomSchedule(128)(0))
    assert value == 0.0 and not math.isnan(value)


def test_custom_schedule_peaks_at_warmup():
    schedule = CustomSchedule(128, warmup_steps=100)
    values = np.array(schedule(np.arange(1, 1000)))
    assert int(np.argmax(values)) + 1 == 100


@pytest.mark.parametrize(
    "schedule",
    [
        CustomSchedule(256, warmup_steps=50),
        WarmupLinearDecay(1e-4, warmup_steps=10, total_steps=100, end_learning_rate=1e-6),
        WarmupCosineDecay(6e-4, warmup_steps=10, total_steps=100, alpha=0.1),
        BudgetSchedule(2e-3, total_steps=100, warmup_fraction=0.1),
    ],
)
def test_schedule_serialization_round_trip(schedule):
    config = keras.optimizers.schedules.serialize(schedule)
    restored = keras.optimizers.schedules.deserialize(config)
    assert type(restored) is type(schedule)
    assert restored.get_config() == schedule.get_config()
    steps = np.array([0, 1, 10, 55, 100, 150], dtype=np.float32)
    np.testing.assert_allclose(np.array(restored(steps)), np.array(schedule(steps)))

    optimizer = keras.optimizers.Adam(learning_rate=schedule)
    rebuilt = keras.optimizers.Adam.from_config(optimizer.get_config())
    assert type(rebuilt._learning_rate) is type(schedule)
    np.testing.assert_allclose(float(rebuilt._learning_rate(55)), float(schedule(55)))


def test_optimizer_with_schedule_survives_keras_save(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(CustomSchedule(64, 10)), loss="mse")
    model.fit(np.ones((4, 3)), np.zeros((4, 2)), epochs=1, verbose=0)
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    schedule = loaded.optimizer._learning_rate
    assert isinstance(schedule, CustomSchedule)
    assert schedule.get_config() == {"d_model": 64, "warmup_steps": 10}


def test_warmup_linear_decay_key_points():
    s = WarmupLinearDecay(1e-3, warmup_steps=10, total_steps=110, end_learning_rate=1e-5)
    np.testing.assert_allclose(float(s(0)), 0.0)
    np.testing.assert_allclose(float(s(5)), 5e-4, rtol=1e-6)
    np.testing.assert_allclose(float(s(10)), 1e-3, rtol=1e-6)
    np.testing.assert_allclose(float(s(60)), 1e-5 + (1e-3 - 1e-5) * 0.5, rtol=1e-5)
    np.testing.assert_allclose(float(s(110)), 1e-5, rtol=1e-5)
    np.testing.assert_allclose(float(s(500)), 1e-5, rtol=1e-5)


def test_warmup_cosine_decay_key_points():
    s = WarmupCosineDecay(6e-4, warmup_steps=10, total_steps=110, alpha=0.1)
    np.testing.assert_allclose(float(s(0)), 0.0)
    np.testing.assert_allclose(float(s(5)), 3e-4, rtol=1e-6)
    np.testing.assert_allclose(float(s(10)), 6e-4, rtol=1e-6)
    np.testing.assert_allclose(float(s(60)), 6e-4 * (0.1 + 0.9 * 0.5), rtol=1e-5)
    np.testing.assert_allclose(float(s(35)), 6e-4 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4))),
                               rtol=1e-5)
    np.testing.assert_allclose(float(s(110)), 6e-5, rtol=1e-5)
    np.testing.assert_allclose(float(s(1000)), 6e-5, rtol=1e-5)


def test_bad_total_steps_is_rejected():
    with pytest.raises(ValueError, match="total_steps"):
        WarmupLinearDecay(1e-3, warmup_steps=100, total_steps=10)


def test_plot_schedule_returns_axes():
    ax = plot_schedule(CustomSchedule(128, 100), steps=500)
    x, y = ax.lines[0].get_data()
    assert len(x) == 500
    np.testing.assert_allclose(y[100], transformer_lr(100, 128, 100), rtol=1e-5)


def budget_lr(step, peak, total, fraction):
    warmup = max(fraction * total, 1.0) if fraction > 0 else 0.0
    if step < warmup:
        return peak * step / warmup
    return peak * max(total - step, 0.0) / max(total - warmup, 1.0)


@pytest.mark.parametrize("total, fraction", [(100, 0.1), (1000, 0.05), (7, 0.0), (50, 1.0)])
def test_budget_schedule_formula(total, fraction):
    schedule = BudgetSchedule(2e-3, total_steps=total, warmup_fraction=fraction)
    steps = np.arange(0, total + 20)
    expected = [budget_lr(s, 2e-3, total, fraction) for s in steps]
    np.testing.assert_allclose(np.array(schedule(steps)), expected, rtol=1e-5, atol=1e-9)


def test_budget_schedule_key_points():
    schedule = BudgetSchedule(1e-3, total_steps=200, warmup_fraction=0.1)
    values = {s: float(schedule(s)) for s in (0, 10, 20, 110, 200, 250)}
    assert values[0] == 0.0                                   # starts at zero
    assert values[10] == pytest.approx(0.5e-3)                # halfway up the warmup
    assert values[20] == pytest.approx(1e-3)                  # the peak ends the warmup (10% of 200)
    assert values[110] == pytest.approx(0.5e-3)               # halfway down the decay
    assert values[200] == 0.0 and values[250] == 0.0          # zero at the end and after it
    assert int(np.argmax(np.array(schedule(np.arange(201))))) == 20
    no_warmup = BudgetSchedule(1e-3, total_steps=200, warmup_fraction=0.0)
    assert float(no_warmup(0)) == pytest.approx(1e-3) and float(no_warmup(100)) == pytest.approx(0.5e-3)


def test_budget_schedule_refit_needs_no_retrace():
    schedule = BudgetSchedule(1e-3, total_steps=1000, warmup_fraction=0.1)
    traces = []

    @tf.function
    def lr(step):
        traces.append(1)
        return schedule(step)

    assert float(lr(tf.constant(50))) == pytest.approx(0.5e-3)
    schedule.set_total_steps(200)                             # warmup is now 20 steps
    assert float(lr(tf.constant(50))) == pytest.approx(1e-3 * 150 / 180)
    assert len(traces) == 1 and schedule.total_steps == 200
    assert schedule.get_config() == {"peak_learning_rate": 1e-3, "total_steps": 200, "warmup_fraction": 0.1}


@pytest.mark.parametrize("kwargs, message", [
    (dict(peak_learning_rate=1e-3, total_steps=0), "total_steps must be >= 1"),
    (dict(peak_learning_rate=1e-3, total_steps=10, warmup_fraction=1.5), "warmup_fraction must be in"),
    (dict(peak_learning_rate=0.0, total_steps=10), "peak_learning_rate must be > 0"),
])
def test_budget_schedule_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BudgetSchedule(**kwargs)


def stlr_formula(t, total, cut_frac, ratio, peak):
    """Howard & Ruder (2018), eq. 3, written out in plain Python; p held at 0 once the decay has reached the bottom
    (when T·cut_frac is not an integer, cut·(1/cut_frac - 1) < T - cut and the paper's p would turn negative)."""
    cut = math.floor(total * cut_frac)
    if t < cut:
        p = t / cut
    else:
        p = max(1 - (t - cut) / (cut * (1 / cut_frac - 1)), 0.0)
    return peak * (1 + p * (ratio - 1)) / ratio


@pytest.mark.parametrize("total,cut_frac,ratio", [(1000, 0.1, 32), (250, 0.2, 10), (37, 0.1, 32)])
def test_slanted_triangular_is_the_papers_formula(total, cut_frac, ratio):
    schedule = SlantedTriangular(0.01, total, cut_frac=cut_frac, ratio=ratio)
    cut = math.floor(total * cut_frac)
    for t in sorted({0, 1, cut // 2, cut - 1, cut, cut + 1, total // 2, total - 1, total}):
        np.testing.assert_allclose(float(schedule(t)), stlr_formula(t, total, cut_frac, ratio, 0.01), rtol=1e-5,
                                   err_msg=f"step {t}")
    # Its shape: the lowest rate η_max/ratio at 0, the peak at cut, rising before it and falling after.
    values = np.array(schedule(np.arange(total, dtype=np.float32)))
    assert int(np.argmax(values)) == cut and values[0] == pytest.approx(0.01 / ratio)
    assert np.all(np.diff(values[:cut + 1]) > 0) and np.all(np.diff(values[cut:]) <= 0)


def test_slanted_triangular_edges_and_refitting():
    schedule = SlantedTriangular(0.01, 1000)
    assert float(schedule(5000)) == pytest.approx(0.01 / 32)        # past T: held at the lowest rate
    schedule.set_total_steps(100)                                   # refitted (a time budget): cut = 10
    assert float(schedule(10)) == pytest.approx(0.01) and schedule.total_steps == 100
    short = SlantedTriangular(0.01, 5)                              # T·cut_frac < 1: no rise, decay over T
    np.testing.assert_allclose(np.array(short(np.arange(6.0))), 0.01 * (1 + (1 - np.arange(6) / 5) * 31) / 32,
                               rtol=1e-5)
    for bad, message in [(dict(cut_frac=0.0), "cut_frac"), (dict(ratio=0.5), "ratio"),
                         (dict(max_learning_rate=0.0), "max_learning_rate"), (dict(total_steps=0), "total_steps")]:
        with pytest.raises(ValueError, match=message):
            SlantedTriangular(**{"max_learning_rate": 0.01, "total_steps": 10, **bad})
    restored = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert restored.get_config() == schedule.get_config() == {"max_learning_rate": 0.01, "total_steps": 100,
                                                              "cut_frac": 0.1, "ratio": 32}
