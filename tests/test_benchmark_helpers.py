"""The benchmarks' shared helpers (benchmarks/common.py): no timing is asserted, only the bookkeeping."""
import sys

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
