"""Where a training step's time goes: TensorFlow's profiler over a few steps of kerasplm and of its anchor.

For the rows of ``benchmarks.run`` below their target, this traces ``--steps`` steps of each side of one
comparison with ``tf.profiler.experimental`` (after ``--warmup`` untimed ones), reads the trace (the XSpace
protobuf TensorFlow writes) and sums the host's TensorFlow op events by op type: milliseconds per step and the
share of all op time. Ops on the inter-op threads run side by side, so the op time per step can exceed the
step's wall time; the shares say which kinds of work dominate. ``MatMul``-like types (``MatMul``,
``BatchMatMulV2``, ``_FusedMatMul``, ``Einsum`` and oneDNN's ``_Mkl*`` kernels of them) are the part the matmul
peak bounds; the rest is what a faster step removes first. An event lasts from the op's start to its end, waiting
included: an op that runs beside an XLA cluster or other updates can show far more time than its work (the BERT XLA
step's weight decay read 60–105 ms per step here, and under 1% of the step in an A/B with and without it;
benchmarks/RESULTS.md, 2026-12-06). Confirm a suspect with an A/B of the step before working on it.

An XLA-compiled side has no TensorFlow op events inside its cluster: XLA:CPU's runtime records each of its thunks
instead (the compiled HLO's fusions, dots and loops, e.g. ``dot_add_fusion.30``, on the intra-op threads). Those
are summed by kind, the HLO name without its number (``dot_add_fusion``); kinds starting with ``dot`` (a dot and its
output fusions) count as matmuls.

    python -m benchmarks.profile_step gpt           # kerasplm's GPT step (no XLA) against keras-hub's
    python -m benchmarks.profile_step translator    # the Trainer's translator step against the seed's train_step
    python -m benchmarks.profile_step generate      # one new token of kerasplm's engine (XLA) against keras-hub's
    python -m benchmarks.profile_step generate --by-name --top 20   # each compiled product on its own row
    python -m benchmarks.profile_step bert          # the BERT MLM step (XLA) against keras-hub's BertMaskedLM (XLA)
"""
import argparse
import collections
import glob
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import load_average, machine_info, write_results  # noqa: E402

MATMUL_TYPES = {"MatMul", "BatchMatMulV2", "BatchMatMulV3", "_FusedMatMul", "Einsum", "_MklMatMul",
                "_MklFusedMatMul", "_MklBatchMatMulV2", "_MklNativeMatMul", "_MklNativeFusedMatMul",
                "_MklNativeBatchMatMulV2"}


def gpt_sides(args):
    import numpy as np

    from benchmarks import bench_gpt_train as bench

    options = bench.build_parser().parse_args(["--layers", str(args.layers), "--hidden", str(args.hidden),
                                              "--heads", str(args.heads), "--seq", str(args.seq),
                                              "--batch", str(args.batch)])
    tokens = np.random.default_rng(0).integers(1, bench.V, size=(options.batch, options.seq + 1)).astype(np.int32)
    return {"kerasplm": bench.kerasplm_step(options, tokens, False)[0],
            "keras_hub": bench.keras_hub_step(options, tokens, False)[0]}, 1


def translator_sides(args):
    import numpy as np

    from benchmarks import bench_train as bench
    from kerasplm.models.presets import get_preset

    batches = bench.make_batches(8, np.random.default_rng(0))
    cfg = get_preset("transformer_seed", input_vocab_size=bench.VOCAB, target_vocab_size=bench.VOCAB)
    ours = bench.kerasplm_step(cfg, batches, "float32", False)[0]
    seed = bench.seed_step(cfg, batches)[0]
    counter = collections.Counter()

    def turn(step, name):
        def run():
            step(counter[name])
            counter[name] += 1
        return run
    return {"kerasplm": turn(ours, "kerasplm"), "seed": turn(seed, "seed")}, 1


def generate_sides(args):
    """Greedy generation of ``--new`` tokens after a 32-token prompt, ``--batch`` rows, by bench_generate's model:
    kerasplm's engine (XLA) and keras-hub's ``GPT2CausalLM.generate`` (its default compile). A step is one new
    token: each side's profile is divided by ``--new`` (``steps_per_call``)."""
    import numpy as np

    from benchmarks import bench_generate as bench
    from kerasplm.generation import make_generate_fn

    _, model, hub, _ = bench.load_models()
    prompts = np.random.default_rng(0).integers(1, bench.SHAPE["vocab_size"], (args.batch, 32)).astype(np.int32)
    ours = make_generate_fn(model, max_new_tokens=args.new, stop_ids=(), jit_compile=True, screened_greedy=True)
    sides = {"kerasplm": lambda: ours(prompts).tokens.numpy()}
    if hub is not None:
        hub.compile(sampler="greedy")
        inputs = bench.keras_hub_inputs(prompts, args.new)
        sides["keras_hub"] = lambda: hub.generate(dict(inputs), stop_token_ids=None)
    return sides, args.new


def bert_sides(args):
    """The runner's BERT MLM row with XLA (bench_bert_pretrain's bert_mini, seq 128, batch 16): kerasplm's Trainer
    step and keras-hub's ``BertMaskedLM.train_on_batch``, both ``jit_compile=True``; with ``--no-xla`` both
    without."""
    from benchmarks import bench_bert_pretrain as bench

    return {"kerasplm": bench.kerasplm_step(args.xla)[0], "keras_hub": bench.keras_hub_step(args.xla)[0]}, 1


# Each returns ({side: a zero-argument call}, steps per call).
COMPARISONS = {"gpt": gpt_sides, "translator": translator_sides, "generate": generate_sides, "bert": bert_sides}


def is_op_event(name):
    """True for a TensorFlow op's event (``"scope/op_name:OpType"``); False for the runtime's own events
    (``"ExecutorState::Process"``, ...), for function calls (``"...:__inference_train_step_123"``), which
    contain the op events and would count them twice, and for XLA:CPU's end-of-thunk marks (``"end: dot"``)."""
    if ":" not in name or "::" in name or name.startswith("end: "):
        return False
    op_type = name.rsplit(":", 1)[1].strip()
    return bool(op_type) and not op_type.startswith("__inference") and "PartitionedCall" not in op_type


HLO_NAME = re.compile(r"^([a-z][a-z0-9_\-]*)(\.\d+)?$")


def thunk_kind(name, thread):
    """The kind of an XLA:CPU thunk's event (``"dot_add_fusion.30"`` -> ``"dot_add_fusion"``), or None for any
    other event. Thunks run on the intra-op (Eigen) threads and are named after the HLO they run: lower case,
    numbered. The loops' bodies are thunks of their own, so a ``while`` event counts the loop's own work only."""
    match = HLO_NAME.match(name)
    return match.group(1) if match and "Eigen" in thread else None


def is_matmul(op):
    """A matmul-like TensorFlow op type, or an XLA dot and its output fusions (``dot``, ``dot_add_fusion``); also
    for the full names of ``--by-name`` (``"scope/MatMul:_MklMatMul"``, ``"dot_add_fusion.30"``)."""
    op = op.rsplit(":", 1)[-1]
    return op in MATMUL_TYPES or op.startswith("dot")


def op_times(logdir, by_name=False):
    """{op type: total picoseconds} over the host's TensorFlow op events and XLA:CPU thunk events (by kind,
    :func:`thunk_kind`) of the trace in ``logdir``, and the number of those events. An event is a TensorFlow op
    when its name is ``"name:Type"``. ``by_name``: the thunks by their own names (``dot_add_fusion.30``: one
    product of the compiled program each), the ops by their full names."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    if not paths:
        raise RuntimeError(f"the profiler wrote no trace under {logdir}")
    space = xplane_pb2.XSpace()
    with open(paths[0], "rb") as f:
        space.ParseFromString(f.read())
    totals, events = collections.Counter(), 0
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                kind = name.rsplit(":", 1)[1] if is_op_event(name) else thunk_kind(name, line.name)
                if kind is None:
                    continue
                if by_name:
                    kind = name
                totals[kind] += event.duration_ps
                events += 1
    return totals, events


def profile(step, steps, warmup, steps_per_call=1, by_name=False):
    """Per-step milliseconds of each op type (``by_name``: of each op and thunk, see :func:`op_times`) and the
    median wall time of ``steps`` traced calls of ``step``, one call being ``steps_per_call`` steps (e.g. the new
    tokens of one ``generate`` call)."""
    import tensorflow as tf

    for _ in range(warmup):
        step()
    logdir = tempfile.mkdtemp(prefix="profile_step_")
    walls = []
    tf.profiler.experimental.start(logdir)
    try:
        for _ in range(steps):
            start = time.perf_counter()
            step()
            walls.append(time.perf_counter() - start)
    finally:
        tf.profiler.experimental.stop()
    totals, events = op_times(logdir, by_name)
    per_step = {op: ps / 1e9 / (steps * steps_per_call) for op, ps in totals.items()}   # ps -> ms
    walls.sort()
    return {"wall_ms_per_step": round(1000 * walls[len(walls) // 2] / steps_per_call, 3), "op_events": events,
            "op_ms_per_step": {op: round(ms, 3) for op, ms in sorted(per_step.items(), key=lambda kv: -kv[1])}}


def summary_table(results, top):
    sides = [s for s in results["sides"]]
    digits = 1 if min(results["sides"][s]["wall_ms_per_step"] for s in sides) >= 100 else 3
    everything = collections.Counter()
    for side in sides:
        everything.update(results["sides"][side]["op_ms_per_step"])
    lines = ["| op type | " + " | ".join(f"{s} ms/step (share)" for s in sides) + " |",
             "|---|" + "---:|" * len(sides)]
    for op, _ in everything.most_common(top):
        cells = []
        for side in sides:
            ms = results["sides"][side]["op_ms_per_step"]
            total = sum(ms.values())
            cells.append(f"{ms.get(op, 0.0):.{digits}f} ({100 * ms.get(op, 0.0) / total:.0f}%)")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    for label, pick in (("all matmul types", is_matmul), ("all ops", lambda op: True)):
        cells = []
        for side in sides:
            ms = results["sides"][side]["op_ms_per_step"]
            part = sum(v for op, v in ms.items() if pick(op))
            cells.append(f"{part:.{digits}f} ({100 * part / sum(ms.values()):.0f}%)")
        lines.append(f"| **{label}** | " + " | ".join(cells) + " |")
    lines.append("| step wall time | " + " | ".join(f"{results['sides'][s]['wall_ms_per_step']:.{digits}f} ms"
                                                  for s in sides) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("comparison", choices=sorted(COMPARISONS))
    parser.add_argument("--steps", type=int, default=4, help="traced steps per side")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--top", type=int, default=12, help="op types in the table")
    parser.add_argument("--layers", type=int, default=6, help="gpt: the runner's GPT-2 layout (L6 H512)")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=None, help="rows (default: gpt 8, generate 1)")
    parser.add_argument("--new", type=int, default=96, help="generate: new tokens per call")
    parser.add_argument("--no-xla", dest="xla", action="store_false", help="bert: both sides without XLA")
    parser.add_argument("--by-name", action="store_true",
                        help="rows per op and XLA thunk (e.g. dot_add_fusion.30), not per type")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.batch is None:
        args.batch = 1 if args.comparison == "generate" else 8
    sides, steps_per_call = COMPARISONS[args.comparison](args)
    results = {"machine": machine_info(), "load_average_start": load_average(), "comparison": args.comparison,
               "steps": args.steps, "steps_per_call": steps_per_call, "sides": {}}
    for name, step in sides.items():
        results["sides"][name] = profile(step, args.steps, args.warmup, steps_per_call, args.by_name)
    results["load_average_end"] = load_average()
    print(summary_table(results, args.top))
    write_results(results, args.json)
    return results


if __name__ == "__main__":
    main()
