"""The benchmarks' shared helpers (benchmarks/common.py): no timing is asserted, only the bookkeeping."""
import sys

import pytest

from benchmarks.common import interleaved, keras_hub_or_reason


def test_interleaved_runs_every_side_the_same_number_of_times_in_rotating_order():
    calls = []
    sides = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    result = interleaved(sides, rounds=3, steps_per_round=2, warmup=1)
    assert calls[:3] == ["a", "b", "c"]                      # one warm-up step each, in order
    timed = calls[3:]
    assert timed == ["a"] * 2 + ["b"] * 2 + ["c"] * 2 + ["b"] * 2 + ["c"] * 2 + ["a"] * 2 \
        + ["c"] * 2 + ["a"] * 2 + ["b"] * 2                   # the order rotates each round
    assert sorted(result) == ["a", "b", "c"]
    assert all(len(r["rounds"]) == 3 and r["seconds_per_step"] >= 0 for r in result.values())


def test_missing_keras_hub_gives_a_reason_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "keras_hub", None)      # import keras_hub now raises ImportError
    module, reason = keras_hub_or_reason()
    assert module is None
    assert "keras-hub is not installed" in reason and ".[test,bench]" in reason


def test_learning_curve_rows_pair_each_evaluation_with_the_last_logged_training_loss(tmp_path):
    import math

    from benchmarks.learning_curve import curve_rows, main, markdown

    history = {"step": [50, 100, 150], "loss": [7.0, 6.0, 5.0],
               "eval_step": [75, 150], "eval_loss": [6.5, 5.5], "eval_mlm_loss": [6.0, 5.0],
               "eval_mlm_accuracy": [0.1, 0.2]}
    rows = curve_rows(history)
    assert [s for s, _ in rows] == [75, 150]
    assert rows[0][1]["train_loss"] == 7.0 and rows[1][1]["train_loss"] == 5.0   # at or before the eval step
    assert math.isclose(rows[1][1]["eval_mlm_perplexity (exp)"], math.exp(5.0))  # BERT: the MLM term only
    table = markdown(rows).splitlines()
    assert table[0].startswith("| step | train_loss |") and table[3].startswith("| 150 | 5 |")
    (tmp_path / "history.json").write_text('{"step": [1], "loss": [1.0]}')
    with pytest.raises(SystemExit, match="no held-out evaluations"):
        main([str(tmp_path)])
