"""One-call checks for a backbone or task model, shared by every family's tests.

>>> check_model(lambda: CausalLM.from_preset("causal_lm_tiny"), token_ids,
...             expected_shapes=(2, 5, 64), tmp_path=tmp_path)

``check_model`` builds the model, calls it, checks the output shapes, and then (each can be switched
off with ``checks=``):

* ``"config"``: ``get_config`` -> ``from_config`` gives the same config and the same output shapes;
* ``"keras_file"``: ``.keras`` save + ``keras.models.load_model`` reproduce the outputs;
* ``"checkpoint"``: ``tf.train.Checkpoint`` holds exactly ``len(model.weights)`` variables (so no block
  list is missed) and restoring them into a fresh model reproduces the outputs;
* ``"mixed_bfloat16"``: built under that policy, the model computes in bfloat16 and, with the float32
  model's weights, gives outputs close to float32's;
* ``"xla"``: ``tf.function(jit_compile=True)`` gives the eager outputs.

Keep models tiny: each check runs the model a few times.
"""
import keras
import numpy as np
import tensorflow as tf

ALL_CHECKS = ("config", "keras_file", "checkpoint", "mixed_bfloat16", "xla")


def _floats(structure):
    return [np.asarray(tf.cast(t, tf.float32)) for t in tf.nest.flatten(structure)
            if tf.is_tensor(t) and t.dtype.is_floating]


def assert_outputs_close(actual, expected, atol=1e-5, rtol=1e-5, what="outputs"):
    """Same nested structure, same values (float tensors within atol/rtol, others exactly)."""
    tf.nest.assert_same_structure(actual, expected)
    for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), atol=atol, rtol=rtol, err_msg=what)


def _is_shape(x):
    return isinstance(x, tuple) and all(s is None or isinstance(s, int) for s in x)


def _shape_list(expected):
    """Flattens a structure whose leaves are shape tuples (tf.nest would flatten the tuples too)."""
    if _is_shape(expected):
        return [expected]
    if isinstance(expected, dict):
        return [s for key in sorted(expected) for s in _shape_list(expected[key])]
    return [s for item in expected for s in _shape_list(item)]


def _call(model, inputs):
    return model(inputs, training=False)


def check_model(make_model, inputs, *, expected_shapes, tmp_path, select=lambda outputs: outputs,
                checks=ALL_CHECKS, atol=1e-5, bfloat16_tolerance=0.05):
    """Runs the module docstring's checks on ``make_model()``; returns the float32 model.

    Args:
      make_model: zero-argument callable returning a fresh, built model (called again for restores and
        under ``mixed_bfloat16``).
      inputs: what ``model(inputs, training=False)`` takes.
      expected_shapes: ``select(outputs)``'s structure with a shape tuple per tensor (None = any size);
        dicts are matched in sorted-key order.
      tmp_path: a directory for the ``.keras`` file and the checkpoint (pytest's ``tmp_path``).
      select: picks the outputs to compare (default: all of them).
      checks: a subset of ``ALL_CHECKS``.
      atol: tolerance of float32 comparisons; ``bfloat16_tolerance``: max |bf16 - f32| / (1 + max |f32|).
    """
    unknown = set(checks) - set(ALL_CHECKS)
    if unknown:
        raise ValueError(f"unknown checks {sorted(unknown)}; expected some of {ALL_CHECKS}")
    model = make_model()
    outputs = select(_call(model, inputs))
    _check_shapes(outputs, expected_shapes)

    if "config" in checks:
        config = model.get_config()
        clone = type(model).from_config(config)
        assert clone.get_config() == config, "get_config -> from_config -> get_config changed the config"
        _check_shapes(select(_call(clone, inputs)), expected_shapes)

    if "keras_file" in checks:
        path = str(tmp_path / "harness_model.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        assert_outputs_close(select(_call(loaded, inputs)), outputs, atol=atol, what=".keras reload")

    if "checkpoint" in checks:
        saved = tf.train.Checkpoint(model=model).save(str(tmp_path / "harness_ckpt"))
        names = [n for n, _ in tf.train.list_variables(saved) if n.startswith("model/")]
        assert len(names) == len(model.weights), \
            f"checkpoint holds {len(names)} variables but the model has {len(model.weights)} weights"
        fresh = make_model()
        tf.train.Checkpoint(model=fresh).restore(saved).assert_existing_objects_matched()
        assert_outputs_close(select(_call(fresh, inputs)), outputs, atol=atol, what="checkpoint restore")

    if "mixed_bfloat16" in checks:
        previous = keras.mixed_precision.global_policy()
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
        try:
            low = make_model()
        finally:
            keras.mixed_precision.set_global_policy(previous)
        assert low.compute_dtype == "bfloat16" and all(w.dtype == "float32" for w in low.weights)
        low.set_weights(model.get_weights())
        low_outputs = select(_call(low, inputs))
        _check_shapes(low_outputs, expected_shapes)
        for a, e in zip(_floats(low_outputs), _floats(outputs)):
            assert np.isfinite(a).all(), "mixed_bfloat16 outputs are not finite"
            error = np.abs(a - e).max() / (1.0 + np.abs(e).max())
            assert error < bfloat16_tolerance, f"mixed_bfloat16 outputs differ from float32 by {error:.3f}"

    if "xla" in checks:
        compiled = tf.function(lambda x: _call(model, x), jit_compile=True)
        assert_outputs_close(select(compiled(inputs)), outputs, atol=atol * 10, rtol=1e-4, what="XLA")
    return model


def _check_shapes(outputs, expected_shapes):
    flat = tf.nest.flatten(outputs)
    expected = _shape_list(expected_shapes)
    assert len(flat) == len(expected), f"{len(flat)} outputs but {len(expected)} expected shapes"
    for out, shape in zip(flat, expected):
        got = tuple(out.shape)
        assert len(got) == len(shape) and all(s is None or s == g for s, g in zip(shape, got)), \
            f"output shape {got} != expected {shape}"


def write_word_corpus(directory, words, num_lines, end=".", seed=0):
    """A plain-text corpus for the language-model jobs' tests: ``num_lines`` lines of 3–8 words drawn from
    ``words`` (seeded), each ending in ``end``; written to ``directory/corpus.txt``, whose path is returned."""
    rng = np.random.default_rng(seed)
    lines = [" ".join(rng.choice(words, size=rng.integers(3, 9))) + end for _ in range(num_lines)]
    path = directory / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)
