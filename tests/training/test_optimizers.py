"""FusedAdam / FusedAdamW against Keras' Adam / AdamW: the same numbers, step by step."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.training.optimizers import FusedAdam, FusedAdamW
from kerasplm.training.schedules import WarmupLinearDecay


def _run(optimizer, steps=5, sparse=False, compile_mode=None):
    rng = np.random.default_rng(0)
    table = keras.Variable(rng.normal(size=(6, 3)).astype(np.float32), name="table")
    bias = keras.Variable(rng.normal(size=(3,)).astype(np.float32), name="bias")
    variables = [table, bias]
    optimizer.build(variables)

    def step(i):
        x = tf.constant(rng.normal(size=(4, 3)).astype(np.float32))
        with tf.GradientTape() as tape:
            rows = tf.gather(table, [0, 2, 2, 5]) if sparse else tf.matmul(x, table, transpose_b=True)
            loss = tf.reduce_sum(tf.sin(rows) ** 2) + tf.reduce_sum(bias ** 3)
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))

    run = step if compile_mode is None else tf.function(step, jit_compile=compile_mode == "xla")
    for i in range(steps):
        run(i)
    return [v.numpy() for v in variables], optimizer


@pytest.mark.parametrize("compile_mode", [None, "graph", "xla"])
def test_fused_adamw_matches_keras_adamw(compile_mode):
    def kwargs():
        return dict(learning_rate=WarmupLinearDecay(0.1, 2, 10), weight_decay=0.1, beta_1=0.8, beta_2=0.95,
                    epsilon=1e-6)
    reference = keras.optimizers.AdamW(**kwargs())
    reference.exclude_from_weight_decay(var_names=["bias"])
    fused = FusedAdamW(**kwargs())
    fused.exclude_from_weight_decay(var_names=["bias"])
    expected, _ = _run(reference, compile_mode=compile_mode)
    got, fused = _run(fused, compile_mode=compile_mode)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert int(fused.iterations) == 5
    # The same slots (m, v per weight, in the same order), so checkpoints carry over.
    assert [v.path.split("/", 1)[1] for v in fused.variables] == [v.path.split("/", 1)[1] for v in reference.variables]


def test_fused_adam_matches_keras_adam_and_sparse_gradients_fall_back():
    for sparse in (False, True):
        expected, _ = _run(keras.optimizers.Adam(0.05, beta_2=0.98, epsilon=1e-9), sparse=sparse)
        got, _ = _run(FusedAdam(0.05, beta_2=0.98, epsilon=1e-9), sparse=sparse)
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_fused_adamw_round_trips_its_config():
    optimizer = FusedAdamW(learning_rate=0.01, weight_decay=0.02, epsilon=1e-6)
    clone = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(clone) is FusedAdamW and clone.weight_decay == 0.02 and clone.epsilon == 1e-6


def test_discriminative_learning_rates_divide_by_the_factor_per_group_below_the_top():
    """ULMFiT's η^(l-1) = η^l / 2.6: with Adam's first step (lr · g/|g|), each variable moves by the base rate times
    2.6^-(top - group)."""
    from kerasplm.training.optimizers import LayerwiseAdamW, discriminative_decay, layer_group_multiplier

    variables = [keras.Variable(np.zeros((2, 3), np.float32), name=f"group{g}") for g in range(4)]
    groups = {id(v): g for g, v in enumerate(variables)}
    multiplier = layer_group_multiplier(lambda v: groups[id(v)], 3, discriminative_decay(2.6))
    optimizer = LayerwiseAdamW(multiplier, learning_rate=1e-2, weight_decay=0.0, epsilon=1e-12)
    optimizer.build(variables)
    optimizer.apply_gradients([(tf.ones_like(v), v) for v in variables])
    for g, v in enumerate(variables):
        np.testing.assert_allclose(-v.numpy(), 1e-2 / 2.6 ** (3 - g), rtol=1e-4, err_msg=f"group {g}")
    with pytest.raises(ValueError, match="factor must be > 0"):
        discriminative_decay(0)


def test_gradual_unfreezing_thaws_one_group_per_stage_from_the_top():
    """Groups 0..2, 2 steps per stage: the top group moves from step 0, group 1 from step 2, group 0 from step 4;
    a frozen variable is not decayed either."""
    from kerasplm.training.optimizers import LayerwiseAdamW, gradual_unfreezing

    variables = [keras.Variable(np.ones((2,), np.float32), name=f"group{g}") for g in range(3)]
    groups = {id(v): g for g, v in enumerate(variables)}
    optimizer = LayerwiseAdamW(lambda v: 1.0, frozen_until=gradual_unfreezing(lambda v: groups[id(v)], 2, 2),
                               learning_rate=1e-2, weight_decay=0.1, epsilon=1e-12)
    optimizer.build(variables)
    moved = []
    for _ in range(5):
        before = [v.numpy().copy() for v in variables]
        optimizer.apply_gradients([(tf.ones_like(v), v) for v in variables])
        moved.append([bool(np.any(v.numpy() != b)) for v, b in zip(variables, before)])
    assert moved == [[False, False, True], [False, False, True], [False, True, True], [False, True, True],
                     [True, True, True]]


def test_scaled_schedule_multiplies_the_rate_read_in_the_step():
    from kerasplm.training.schedules import ScaledSchedule, SlantedTriangular

    schedule = ScaledSchedule(SlantedTriangular(0.01, 100))
    variable = keras.Variable(np.zeros((1,), np.float32))
    optimizer = keras.optimizers.SGD(learning_rate=schedule)
    optimizer.build([variable])

    @tf.function
    def step(scale):
        schedule.scale.assign(scale)      # as a training step sets it from its window's length
        optimizer.apply_gradients([(tf.ones_like(variable), variable)])

    step(tf.constant(0.5))
    np.testing.assert_allclose(-variable.numpy(), 0.5 * 0.01 / 32, rtol=1e-5)
    schedule.set_total_steps(50)
    assert schedule.total_steps == 50 == schedule.schedule.total_steps
