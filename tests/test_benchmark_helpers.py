"""The benchmarks' shared helpers (benchmarks/common.py): no timing is asserted, only the bookkeeping."""
import sys

import numpy as np
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


# ------------------------------------------------------------------------- MFU (benchmarks/mfu.py), not timed

def test_training_flops_per_token_is_six_n_plus_the_attention_term():
    from benchmarks.mfu import training_flops_per_token, transformer_matmul_params

    assert training_flops_per_token(1000, 2, 8, 4) == 6 * 1000 + 12 * 2 * 8 * 4 == 6768
    assert training_flops_per_token(1000, 0, 512, 64) == 6000           # no attention layer: 6N alone
    # BERT-base at sequence 128: N = 12 · (4 · 768² + 2 · 768 · 3072) = 84,934,656 non-embedding weights.
    n = transformer_matmul_params(12, 768, 3072)
    assert n == 84_934_656
    assert training_flops_per_token(n, 12, 128, 768) == 509_607_936 + 14_155_776
    # A decoder block with cross-attention has four more d x d matrices.
    assert transformer_matmul_params(1, 8, 32, cross_attention_layers=1) == 4 * 64 + 2 * 8 * 32 + 4 * 64
    with pytest.raises(ValueError, match="seq_len must be >= 0"):
        training_flops_per_token(1, 1, -1, 1)


def test_measured_matmul_peak_is_two_n_cubed_per_product_over_the_timed_products():
    from benchmarks.mfu import measured_matmul_peak, mfu

    calls, ticks = [], iter([10.0, 12.0])                     # the timed products take 2 s in all

    def matmul(size, dtype):
        assert (size, dtype) == (10, "bfloat16")
        return lambda: calls.append(1)
    peak = measured_matmul_peak("bfloat16", size=10, repeats=5, matmul=matmul, clock=lambda: next(ticks))
    assert peak == 2 * 10 ** 3 * 5 / 2.0
    assert len(calls) == 6                                    # one untimed product first
    assert mfu(100.0, 20.0, 4000.0) == 0.5 and mfu(100.0, None, 4000.0) is None


def test_best_matmul_peak_is_the_fastest_size():
    from benchmarks.mfu import best_matmul_peak

    seconds = {10: 1.0, 20: 4.0}                              # per timed product: 2000 and 4000 FLOP/s
    now = [0.0]

    def matmul(size, dtype):
        def run():
            now[0] += seconds[size]
        return run
    assert best_matmul_peak("float32", sizes=(10, 20), repeats=(2, 1), matmul=matmul,
                            clock=lambda: now[0]) == 2 * 20 ** 3 / 4.0


def test_bfloat16_peak_only_where_the_cpu_flags_say_so(tmp_path):
    from benchmarks.mfu import cpu_has_bfloat16

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\n")
    assert not cpu_has_bfloat16(str(cpuinfo))
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert cpu_has_bfloat16(str(cpuinfo))
    cpuinfo.write_text("flags\t\t: fpu amx_bf16 amx_tile\n")
    assert cpu_has_bfloat16(str(cpuinfo))
    assert not cpu_has_bfloat16(str(tmp_path / "absent"))


# ------------------------------------------------------------------------- the runner (benchmarks/run.py)

def test_ratio_is_kerasplm_over_the_anchor_in_higher_is_better_terms():
    from benchmarks.run import ratio

    assert ratio(300.0, 100.0, "tokens/s") == 3.0            # throughput: kerasplm / anchor
    assert ratio(50.0, 100.0, "ms") == 2.0                     # latency: anchor / kerasplm
    assert ratio(50.0, None, "ms") is None
    with pytest.raises(ValueError, match="unknown unit 'furlongs'"):
        ratio(1.0, 1.0, "furlongs")


def test_compare_flags_only_ratios_that_fell_beyond_the_tolerance():
    from benchmarks.run import compare, format_table

    rows = [{"name": "a", "ratio": 0.89, "kerasplm": 89.0, "anchor": 100.0, "unit": "tokens/s"},
            {"name": "b", "ratio": 0.91, "kerasplm": 91.0, "anchor": 100.0, "unit": "tokens/s"},
            {"name": "c", "ratio": None, "unit": "tokens/s", "skipped": "keras-hub is not installed"},
            {"name": "new", "ratio": 0.1, "kerasplm": 1.0, "anchor": 10.0, "unit": "ms"},
            {"name": "p50", "ratio": None, "kerasplm": 12.0, "anchor": None, "unit": "ms"},
            {"name": "rate", "ratio": None, "kerasplm": 95.0, "anchor": None, "unit": "sentences/s"}]
    old = [{"name": "a", "ratio": 1.0, "anchor": 1.0}, {"name": "b", "ratio": 1.0, "anchor": 1.0},
           {"name": "c", "ratio": 2.0, "anchor": 1.0},
           {"name": "p50", "ratio": None, "kerasplm": 10.0, "anchor": None, "unit": "ms"},
           {"name": "rate", "ratio": None, "kerasplm": 100.0, "anchor": None, "unit": "sentences/s"}]
    # Absolute rows (no anchor) are judged on their own figure: 12 ms against 10 ms is 1/12 < 0.9 / 10.
    assert compare(rows, old, 0.10) == ["a", "p50"]
    assert rows[0]["regressed"] and not rows[1]["regressed"] and not rows[5]["regressed"]
    assert "regressed" not in rows[2] and "regressed" not in rows[3]   # nothing to judge
    assert rows[4]["old_kerasplm"] == 10.0 and rows[0]["old_ratio"] == 1.0
    lines = format_table(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    starts = [lines[0].index(h) for h in ("kerasplm", "ratio", "unit")]
    assert lines[2].split()[0] == "a" and "REGRESSED (was 1.00x)" in lines[2]
    assert lines[2][starts[2]:].startswith("tokens/s") and lines[5][starts[2]:].startswith("ms")
    assert "skipped: keras-hub is not installed" in lines[4]
    assert "REGRESSED (was 10.00)" in lines[6] and lines[7].endswith("was 100")
    markdown = format_table(rows, markdown=True).splitlines()
    assert markdown[0] == "| name | kerasplm | anchor | ratio | unit | MFU | peak RSS MB | note |"
    assert markdown[1] == "| --- | ---: | ---: | ---: | --- | ---: | ---: | --- |"
    assert markdown[2] == "| a | 89.00 | 100 | 0.89x | tokens/s | - | - | REGRESSED (was 1.00x) |"
    with pytest.raises(ValueError, match="tolerance"):
        compare(rows, old, 1.5)


def test_runner_end_to_end_on_its_selftest_entry_writes_json_and_flags_a_regression(tmp_path):
    import json
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"rows": [{"name": "selftest/matmul vs einsum", "ratio": 1e12}]}))
    new = tmp_path / "new.json"
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run", "--only", "selftest", "--json", str(new),
                           "--compare", str(old)], cwd=root, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1, proc.stderr[-2000:]                 # the regression is the exit status
    assert "REGRESSED" in proc.stdout and "regression: selftest/matmul vs einsum" in proc.stdout
    result = json.loads(new.read_text())
    assert {"machine", "date", "commit", "rows", "compared_with"} <= set(result)
    assert result["machine"]["cpus_usable"] >= 1
    measured, skipped = result["rows"]
    assert {"name", "kerasplm", "anchor", "ratio", "unit", "mfu", "peak_rss_mb"} <= set(measured)
    assert measured["name"] == "selftest/matmul vs einsum" and measured["unit"] == "tokens/s"
    assert measured["ratio"] == pytest.approx(measured["kerasplm"] / measured["anchor"])
    assert measured["mfu"] == pytest.approx(measured["kerasplm"] * 2 * 64 * 64 / measured["peak_flops"])
    assert measured["peak_rss_mb"] > 1 and measured["regressed"] is True
    assert skipped["name"] == "selftest/missing anchor" and skipped["ratio"] is None
    assert skipped["peak_rss_mb"] is None
    assert "kerasplm_no_such_library is not installed" in skipped["skipped"]
    assert result["compared_with"] == {"file": str(old), "tolerance": 0.1, "regressed": [measured["name"]]}
    # A training row's child runs on the kernels of kerasplm's training jobs (kerasplm.cli.choose_cpu_kernels).
    assert result["comparisons"]["selftest"]["TF_ENABLE_ONEDNN_OPTS"] == "1"


def test_the_runners_peak_is_the_higher_of_its_readings_before_and_after_a_comparison(monkeypatch):
    from benchmarks import mfu as mfu_lib
    from benchmarks import run

    readings = iter([1e9, 4e9])            # a low reading before the rows, the machine's peak after them
    monkeypatch.setattr(mfu_lib, "peak_dtypes", lambda: ("float32",))
    monkeypatch.setattr(mfu_lib, "best_matmul_peak", lambda dtype, matmul=None: next(readings))
    rows, info = run.run_in_process(run.REGISTRY["selftest"], quick=True)
    assert info["matmul_peaks"] == {"float32": 4e9} and rows[0]["peak_flops"] == 4e9
    assert rows[0]["mfu"] == pytest.approx(rows[0]["kerasplm"] * 2 * 64 * 64 / 4e9)


def test_runner_rejects_an_unknown_comparison_and_an_unreadable_old_json(tmp_path, capsys):
    from benchmarks.run import main

    with pytest.raises(SystemExit):
        main(["--only", "gpt_trian"])
    assert "unknown comparison(s) gpt_trian; choose from translator_train" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--only", "selftest", "--compare", str(tmp_path / "absent.json")])
    err = capsys.readouterr().err
    assert "--compare" in err and "absent.json: cannot read its rows" in err


def test_a_comparison_past_its_timeout_is_killed_and_reported_as_failed():
    from benchmarks.run import REGISTRY, run_child

    rows, _ = run_child(REGISTRY["selftest"], quick=False, log=None, timeout=0.2)
    assert len(rows) == 1 and rows[0]["name"] == "selftest" and rows[0]["ratio"] is None
    assert rows[0]["error"].endswith("killed after the --timeout of 0.2 s")


def test_pair_rows_take_the_faster_kerasplm_side_and_skip_rows_whose_anchor_did_not_run():
    from benchmarks.common import pair_rows

    results = {"kerasplm": {"tokens_per_second": 90.0}, "kerasplm_xla": {"tokens_per_second": 120.0},
               "huggingface": {"tokens_per_second": 60.0}, "keras_hub": {"skipped": "keras-hub is not installed"}}
    pairs = [("vs hub", "kerasplm", "keras_hub"), ("vs HF", ("kerasplm", "kerasplm_xla"), "huggingface"),
             ("vs absent", "kerasplm", "keras_hub_xla")]
    rows = pair_rows(results, pairs, "tokens_per_second", {"seq": 8}, flops_per_unit=6.0)
    assert rows[0] == {"name": "vs hub", "anchor_side": "keras_hub", "config": {"seq": 8},
                       "skipped": "keras-hub is not installed"}
    assert rows[1]["kerasplm"] == 120.0 and rows[1]["kerasplm_side"] == "kerasplm_xla" and rows[1]["anchor"] == 60.0
    assert rows[1]["training_flops_per_unit"] == 6.0 and rows[1]["dtype"] == "float32"
    assert rows[2]["skipped"] == "keras_hub_xla was not run"


def test_a_side_in_its_own_process_gets_the_same_arguments_and_a_failure_becomes_a_skip_reason(tmp_path, monkeypatch):
    from benchmarks.common import installed_or_reason, side_in_own_process

    (tmp_path / "fake_bench.py").write_text(
        "import argparse, json, sys\n"
        "p = argparse.ArgumentParser(); p.add_argument('--rounds'); p.add_argument('--sides', nargs='+')\n"
        "p.add_argument('--json'); a = p.parse_args()\n"
        "if a.rounds == 'bad': sys.exit('no such device')\n"
        "json.dump({s: {'tokens_per_second': 7.0, 'rounds': a.rounds} for s in a.sides}, open(a.json, 'w'))\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert side_in_own_process("fake_bench", ["--rounds", "3"], "huggingface") == \
        {"tokens_per_second": 7.0, "rounds": "3", "own_process": True}
    assert side_in_own_process("fake_bench", ["--rounds", "bad"], "huggingface") == \
        {"skipped": "huggingface failed in its own process: no such device"}
    assert installed_or_reason("json", "os") is None
    assert installed_or_reason("json", "no_such_module_xyz").startswith("no_such_module_xyz is not installed")


def test_squad_retrieval_ranks_and_metrics():
    """Rank of the gold column (ties counted against it), recall@k and MRR by hand."""
    from benchmarks.squad_retrieval import ranks_of_gold, retrieval_metrics

    scores = np.array([[0.9, 0.1, 0.5], [0.2, 0.2, 0.8], [0.3, 0.7, 0.7]])
    ranks = ranks_of_gold(scores, np.array([0, 0, 2]))
    assert ranks.tolist() == [1, 3, 2]
    metrics = retrieval_metrics(ranks)
    assert metrics["recall@1"] == pytest.approx(1 / 3) and metrics["recall@5"] == 1.0
    assert metrics["mrr"] == pytest.approx((1 + 1 / 3 + 1 / 2) / 3) and metrics["questions"] == 3


def test_squad_retrieval_cosine_ranks():
    """Cosine, not the raw inner product: a long corpus vector does not outrank a better-aligned short one."""
    from benchmarks.squad_retrieval import cosine_ranks

    corpus = np.array([[10.0, 10.0], [0.1, 0.0]])   # the first is long but at 45 degrees from the query
    queries = np.array([[1.0, 0.0], [1.0, 1.0]])
    assert cosine_ranks(corpus, queries, np.array([1, 0])).tolist() == [1, 1]
    assert cosine_ranks(corpus, queries, np.array([0, 1])).tolist() == [2, 2]


def test_scaling_row_efficiency_is_two_workers_over_twice_one_worker_of_one_thread():
    from benchmarks.bench_scaling import SIDES, scaling_row

    row = scaling_row("bert", dict(zip(SIDES, [1.0, 0.625, 0.5])))   # batch 32: 32, 51.2 and 64 examples/s
    assert row["examples_per_second"] == dict(zip(SIDES, [32.0, 51.2, 64.0]))
    assert row["efficiency"] == 0.8 and row["two_workers_vs_two_threads"] == 0.8


def test_scaling_projection_follows_its_stated_formulas():
    from benchmarks.bench_scaling import (BERT_BASE, BERT_LARGE, PAPER_SCHEDULE, PUBLISHED_LARGE_PER_GPU,
                                          flops_per_sequence, project_bert_base, ring_efficiency)

    assert ring_efficiency(0.8, 2) == pytest.approx(0.8)            # measured at 2 workers: itself
    assert ring_efficiency(0.8, 64) == pytest.approx(1 / (1 + 0.25 * 2 * 63 / 64))
    # BERT-base at 128 tokens: 12 blocks of 4d² + 2d·dff, the MLM head on 20 of 128 positions, attention 12·L·T·d.
    n = 12 * (4 * 768 ** 2 + 2 * 768 * 3072) + 20 / 128 * (768 ** 2 + 768 * 30522)
    assert flops_per_sequence(BERT_BASE, 128) == pytest.approx(128 * (6 * n + 12 * 12 * 128 * 768))
    one_gpu = project_bert_base(gpus=(1,))[0]
    ratio = flops_per_sequence(BERT_LARGE, 128) / flops_per_sequence(BERT_BASE, 128)
    assert 3.3 < ratio < 3.6
    expected = sum(sequences / (PUBLISHED_LARGE_PER_GPU[t] * flops_per_sequence(BERT_LARGE, t)
                                / flops_per_sequence(BERT_BASE, t)) for sequences, t in PAPER_SCHEDULE) / 3600
    assert one_gpu["hours"] == pytest.approx(expected, abs=0.01)
    eight = project_bert_base(gpus=(8,), measured_efficiency=0.8)
    assert [row["efficiency_from"] for row in eight] == ["published", "measured"]
    assert eight[1]["hours"] == pytest.approx(one_gpu["hours"] / (8 * ring_efficiency(0.8, 8)), abs=0.02)


def test_electra_vs_bert_options_take_one_value_or_one_per_side():
    import argparse

    from benchmarks.electra_vs_bert import side_rates, side_steps

    assert side_steps("7") == {"electra": 7, "bert": 7}
    assert side_rates("electra=1e-4,bert=5e-4") == {"electra": 1e-4, "bert": 5e-4}
    for bad in ("electra=3", "electra=1,bert=0", "electra=x,bert=2", "gpt=1,bert=2"):
        with pytest.raises(argparse.ArgumentTypeError):
            side_steps(bad)


def test_finetune_benchmark_builds_the_jobs_step_on_a_tiny_backbone():
    from benchmarks.bench_finetune import kerasplm_step, synthetic_batch

    step, info = kerasplm_step(dict(num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64),
                               synthetic_batch(2, 32), False)
    step()
    assert info["parameters"] > 0 and info["jit_compile"] is False


def test_xla_gemv_benchmark_runs_its_three_variants():
    from benchmarks.bench_xla_gemv import VARIANTS, measure

    result = measure(rows=1, passes=2, rounds=1)
    assert set(result) == set(VARIANTS) and all(r["gb_per_s"] > 0 for r in result.values())


def test_profile_counts_op_events_only_once():
    from benchmarks.profile_step import is_op_event

    assert is_op_event("gpt/block_0/attention/MatMul:_MklMatMul")
    assert not is_op_event("ExecutorState::Process")                     # the runtime's own event
    assert not is_op_event("StatefulPartitionedCall: __inference_train_step_4548")   # holds the op events
    assert not is_op_event("EagerExecute")
    assert not is_op_event("end: dot_add_fusion")                         # XLA:CPU's end-of-thunk mark


def test_profile_sums_xla_thunks_by_kind_on_the_intra_op_threads_only():
    from benchmarks.profile_step import is_matmul, thunk_kind

    eigen = "tf_numa_-1_Eigen/2557757414198"
    assert thunk_kind("dot_add_fusion.30", eigen) == "dot_add_fusion"
    assert thunk_kind("wrapped_reduce-window.4", eigen) == "wrapped_reduce-window"
    assert thunk_kind("dot", eigen) == "dot"
    assert thunk_kind("ThunkExecutor::Execute", eigen) is None            # holds the thunks
    assert thunk_kind("SlinkyThreadPool::Await", eigen) is None
    assert thunk_kind("core", "python") is None                           # a tf.function's name, not a thunk
    assert thunk_kind("gpt/MatMul:_MklMatMul", eigen) is None             # a TensorFlow op: is_op_event's
    assert is_matmul("dot_add_fusion") and is_matmul("dot") and is_matmul("_MklMatMul")
    assert not is_matmul("multiply_add_fusion") and not is_matmul("Mul")
    assert is_matmul("dot_add_fusion.30") and is_matmul("gpt/MatMul:_MklMatMul") and not is_matmul("gpt/mul:Mul")


def test_distill_benchmark_reuses_a_finished_run_only_with_the_settings_asked_for(tmp_path):
    import json

    from benchmarks.distill_sst2 import finished

    run = tmp_path / "distilled"
    run.mkdir()
    assert finished(str(run), 10) is None                                      # nothing trained yet
    (run / "config.json").write_text(json.dumps({"options": {"alpha": 0.5, "hidden_loss": False}}))
    (run / "metrics.json").write_text(json.dumps({"step": 6, "dev": {"accuracy": 0.8}}))
    assert finished(str(run), 10, {"alpha": 0.5}) is None                     # stopped short: train again
    (run / "metrics.json").write_text(json.dumps({"step": 10, "dev": {"accuracy": 0.8}}))
    assert finished(str(run), 10, {"alpha": 0.5, "hidden_loss": False})["dev"]["accuracy"] == 0.8
    with pytest.raises(SystemExit, match="hidden_loss.*another --workdir"):
        finished(str(run), 10, {"alpha": 0.5, "hidden_loss": True})
    # A run recorded before --sortish trained on plain shuffled batches: reused with --sortish 0 only.
    assert finished(str(run), 10, {"alpha": 0.5, "sortish": 0})["dev"]["accuracy"] == 0.8
    with pytest.raises(SystemExit, match=r"'sortish': \(0, 50\)"):
        finished(str(run), 10, {"alpha": 0.5, "sortish": 50})
