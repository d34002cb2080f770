"""ELECTRA against BERT (MLM only) at the same discriminator size and the same pretraining time, judged by SST-2.

The claim of Clark et al. (2020) measured at CPU scale: replaced-token detection learns more per unit of compute
than masked language modelling. Both sides are pretrained by their own jobs on the same corpus (default:
WikiText-2's validation split, its test split held out) with the same vocabulary, masking, sequence length, batch
size and warmup fraction; the peak learning rate is one for both or one per side (``--learning-rate
electra=1e-4,bert=5e-4``):

* ELECTRA: ``kerasplm train electra --preset electra_bert_tiny|electra_mini`` (discriminator = BERT-Tiny, 2 layers
  of 128, or BERT-Mini, 4 layers of 256: ``--size tiny|mini``; generator 1/4 of its width), loss = MLM + 50·RTD;
* BERT: ``kerasplm train bert --preset bert_tiny|bert_mini --sentence-task none`` (the same encoder configuration,
  checked), MLM only.

Each gets ``--pretrain-seconds`` of training, one after the other so each has the machine to itself. Their
learning rates decay linearly to 0 at the step the budget allows: a calibration run of ``--calibration-steps``
steps times each side's step (median of the steps after the first few, the Trainer's ``step_seconds``), and the
schedule is the budget, less the first step's trace (timed there too), over it. The budget is wall time on an
idle machine; the process CPU seconds of each pretraining are recorded beside it.

Then each pretrained encoder is fine-tuned on SST-2 (``kerasplm finetune bert-classifier --init RUN``) with one
recipe for each of ``--seeds`` seeds (at least 5 for the figure); seed s is the same for both sides (same example
order, dropout masks and head initialisation), so the dev accuracies are paired. Reported: each side's mean dev
accuracy (and standard deviation), the mean paired difference ELECTRA - BERT, and the paired t-test (t, two-sided
p; scipy's ``ttest_rel`` when scipy is installed).

    python -m benchmarks.electra_vs_bert --pretrain-seconds 1800 --seeds 5 --json electra_vs_bert.json
    python -m benchmarks.electra_vs_bert --calibrate-only --pretrain-seconds 600     # idle: prints the step counts
    python -m benchmarks.electra_vs_bert --pretrain-steps electra=N,bert=M --seeds 5 --json out.json  # load-proof
    python -m benchmarks.electra_vs_bert --smoke                      # a few steps of everything (not a figure)
    python -m benchmarks.electra_vs_bert --smoke --pretrain-seconds 20 --calibration-steps 8   # + the timing path
"""
import argparse
import math
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import load_average, machine_info, write_results  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))
# ``--size``: each side's preset; the two discriminators are the same BertBackbone configuration.
SIZES = {"tiny": {"electra": "electra_bert_tiny", "bert": "bert_tiny"},
         "mini": {"electra": "electra_mini", "bert": "bert_mini"}}
SIDES = ("electra", "bert")
# Steps of the calibration run left out of the timing (the first traces the step).
CALIBRATION_SKIP = 5


def paired_test(a, b):
    """Mean of ``a - b``, the paired t statistic and its two-sided p-value (None without scipy or with < 2 pairs,
    or when every difference is the same)."""
    diffs = [x - y for x, y in zip(a, b)]
    mean = statistics.fmean(diffs)
    result = {"mean_difference": mean, "t": None, "p": None, "pairs": len(diffs)}
    if len(diffs) < 2 or statistics.stdev(diffs) == 0:
        return result
    result["t"] = mean / (statistics.stdev(diffs) / math.sqrt(len(diffs)))
    try:
        from scipy import stats
    except ImportError:
        result["p_reason"] = "scipy is not installed"
        return result
    result["p"] = float(stats.ttest_rel(a, b).pvalue)
    return result


def per_side(convert, what):
    """An option given once for both sides (``X``) or per side (``electra=X,bert=Y``) -> {side: value}."""
    def parse(text):
        try:
            if "=" not in text:
                values = {side: convert(text) for side in SIDES}
            else:
                values = {side: convert(v) for side, v in (item.split("=") for item in text.split(","))}
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} or electra={what},bert={what}, got {text!r}") from None
        if set(values) != set(SIDES) or min(values.values()) <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive {what} for each of {', '.join(SIDES)}, got {text!r}")
        return values
    return parse


side_steps = per_side(int, "N")
side_rates = per_side(float, "RATE")


def calibrate(side, preset, out, common, rates, calibration_steps, budget):
    """Times ``side``'s step (median after the first few) and returns ``(steps the budget allows, seconds per
    step)``; the budget also pays for the first step's trace, so the schedule ends where the rest runs out."""
    # Its held-out score is not used: two documents of the corpus keep its evaluation short.
    _, job, _ = pretrain(side, preset, os.path.join(out, f"{side}_calibration"),
                         dict(common, dev_corpus=None, dev_documents=2), rates, calibration_steps, calibration_steps)
    timed = sorted(job.trainer.step_seconds[CALIBRATION_SKIP:])
    seconds_per_step = timed[len(timed) // 2]
    return max(1, int((budget - job.trainer.step_seconds[0]) / seconds_per_step)), seconds_per_step


def pretrain_job(side):
    if side == "electra":
        from kerasplm.models.electra.pretraining_job import ElectraPretrainingJob
        return ElectraPretrainingJob
    from kerasplm.models.bert.pretraining_job import BertPretrainingJob
    return BertPretrainingJob


def pretrain(side, preset, out, common, rates, steps, schedule_steps, time_budget=None):
    """One pretraining session of ``side`` with model ``preset``: ``(summary, job, process CPU seconds)``."""
    options = dict(common, preset=preset, steps=steps, schedule_steps=schedule_steps, learning_rate=rates[side],
                   warmup_steps=max(1, schedule_steps // 10), time_budget=time_budget)
    if side == "bert":
        options["sentence_task"] = "none"
    job = pretrain_job(side)(out, log=lambda *_: None, **options)
    cpu = time.process_time()
    summary = job.run()
    return summary, job, time.process_time() - cpu


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=os.path.join(DATA, "wikitext2", "wiki.valid.tokens"))
    parser.add_argument("--dev-corpus", default=os.path.join(DATA, "wikitext2", "wiki.test.tokens"))
    parser.add_argument("--sst2", default=os.path.join(DATA, "sst2"), help="folder of SST-2's train.tsv and dev.tsv")
    parser.add_argument("--pretrain-seconds", type=float,
                        help="training seconds per side (default 1800; with --smoke: train 3 steps instead)")
    parser.add_argument("--pretrain-steps", type=side_steps,
                        help="train each side exactly this many steps instead of timing a budget: N for both (smoke "
                             "runs) or electra=N,bert=M, the counts --calibrate-only printed (load-proof)")
    parser.add_argument("--calibrate-only", action="store_true",
                        help="time each side's step on this (idle) machine, print the step counts --pretrain-seconds "
                             "allows as a --pretrain-steps value, and stop")
    parser.add_argument("--calibration-steps", type=int, default=40)
    parser.add_argument("--size", choices=sorted(SIZES), default="mini",
                        help="the discriminator both sides share: BERT-Tiny (2 x 128) or BERT-Mini (4 x 256)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=side_rates, default=side_rates("5e-4"),
                        help="peak pretraining learning rate: RATE for both sides, or electra=RATE,bert=RATE")
    parser.add_argument("--seeds", type=int, default=5, help="paired fine-tuning seeds (>= 5 for the figure)")
    parser.add_argument("--finetune-examples", type=int, default=10000, help="SST-2 training sentences used")
    parser.add_argument("--finetune-epochs", type=float, default=2.0)
    parser.add_argument("--finetune-steps", type=int, help="fine-tune exactly this many steps (smoke runs)")
    parser.add_argument("--finetune-learning-rate", type=float, default=1e-4)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="pretraining seed (both sides)")
    parser.add_argument("--smoke", action="store_true",
                        help="a few steps of everything on a slice of the data: checks the script, measures nothing")
    parser.add_argument("--out", help="directory for the runs (default: a temporary one)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.smoke:
        if args.pretrain_seconds is None:
            args.pretrain_steps = args.pretrain_steps or side_steps("3")
        args.finetune_steps, args.seeds = args.finetune_steps or 2, 2
        args.finetune_examples, args.vocab_size, args.max_seq_length = 64, 1000, 32
    if args.pretrain_seconds is None:
        args.pretrain_seconds = 1800.0
    for path in (args.corpus, args.dev_corpus, os.path.join(args.sst2, "train.tsv"), os.path.join(args.sst2, "dev.tsv")):
        if not os.path.isfile(path):
            parser.error(f"no file {path} (the corpora live in ../shared/data; see its README)")

    from kerasplm.models.bert.classifier_job import finetune_bert_classifier
    from kerasplm.runs import load_run
    from kerasplm.text import build_wordpiece_vocab, write_vocab
    from kerasplm.data.pretraining import BERT_SPECIAL_TOKENS, read_documents

    out = args.out or tempfile.mkdtemp(prefix="bench_electra_vs_bert_")
    os.makedirs(out, exist_ok=True)
    # One vocabulary for both sides, learned from the training corpus as `train bert` would.
    vocab_path = os.path.join(out, "vocab.txt")
    if not os.path.exists(vocab_path):
        sentences = [s for d in read_documents(args.corpus) for s in d]
        write_vocab(build_wordpiece_vocab(sentences, vocab_size=args.vocab_size, reserved_tokens=BERT_SPECIAL_TOKENS),
                    vocab_path)
    common = dict(corpus=args.corpus, dev_corpus=args.dev_corpus, vocab=vocab_path, max_seq_length=args.max_seq_length,
                  batch_size=args.batch_size, seed=args.seed, verbose=0)
    if args.smoke:
        common["dev_corpus"] = None
        common["dev_documents"] = 2
    presets = SIZES[args.size]
    results = {"machine": machine_info(), "load_average_start": load_average(), "sides": presets,
               "pretraining": {**{k: v for k, v in common.items() if k != "verbose"},
                               "learning_rate": args.learning_rate,
                               "seconds": None if args.pretrain_steps else args.pretrain_seconds}}

    if args.calibrate_only:
        calibration = {side: calibrate(side, presets[side], out, common, args.learning_rate, args.calibration_steps,
                                       args.pretrain_seconds) for side in SIDES}
        results["calibration"] = {side: {"steps": n, "seconds_per_step": t} for side, (n, t) in calibration.items()}
        results["pretrain_steps"] = ",".join(f"{side}={n}" for side, (n, _) in calibration.items())
        results["load_average_end"] = load_average()
        write_results(results, args.json)
        return results

    runs = {}
    for side in SIDES:
        run = os.path.join(out, side)
        if args.pretrain_steps:
            steps, budget, seconds_per_step = args.pretrain_steps[side], None, None
        else:
            steps, seconds_per_step = calibrate(side, presets[side], out, common, args.learning_rate,
                                                args.calibration_steps, args.pretrain_seconds)
            budget = args.pretrain_seconds
        summary, job, cpu_seconds = pretrain(side, presets[side], run, common, args.learning_rate, steps, steps,
                                             time_budget=budget)
        model = summary["pretrainer"]
        runs[side] = run
        results[side] = {"run": run, "preset": presets[side], "seconds_per_step": seconds_per_step,
                         "planned_steps": steps, "steps": summary["step"], "stop_reason": summary["stop_reason"],
                         "train_seconds": summary["train_seconds"],
                         "process_cpu_seconds": round(cpu_seconds, 1),
                         "encoder_parameters": model.backbone.count_params(),
                         "pretrainer_parameters": model.count_params(),
                         **{k: v for k, v in summary.items() if k.startswith("eval_")}}
    encoders = {side: load_run(run).backbone.config for side, run in runs.items()}
    if encoders["electra"] != encoders["bert"]:
        raise SystemExit(f"the encoders differ: {encoders}")

    finetune = dict(train=os.path.join(args.sst2, "train.tsv"), dev=os.path.join(args.sst2, "dev.tsv"),
                    max_examples=args.finetune_examples, epochs=args.finetune_epochs, steps=args.finetune_steps,
                    learning_rate=args.finetune_learning_rate, max_length=args.max_length, batch_size=32, verbose=0)
    results["finetuning"] = {k: v for k, v in finetune.items() if k != "verbose"}
    accuracy = {side: [] for side in SIDES}
    for seed in range(args.seeds):
        for side, run in runs.items():   # the same seed for both sides: paired
            summary = finetune_bert_classifier(os.path.join(out, f"sst2_{side}_seed{seed}"), init=run, seed=seed,
                                               log=lambda *_: None, **finetune)
            accuracy[side].append(summary["dev"]["accuracy"])
    for side in SIDES:
        values = accuracy[side]
        results[side]["sst2_dev_accuracy"] = values
        results[side]["sst2_mean"] = statistics.fmean(values)
        results[side]["sst2_stdev"] = statistics.stdev(values) if len(values) > 1 else None
    results["electra_minus_bert"] = paired_test(accuracy["electra"], accuracy["bert"])
    results["load_average_end"] = load_average()
    write_results(results, args.json)
    return results


if __name__ == "__main__":
    main()
