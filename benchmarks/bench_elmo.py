"""ELMo biLM training throughput: kerasplm's Trainer step vs a plain Keras ``Model.fit`` of the same network.

Both sides train the same :class:`kerasplm.models.elmo.model.ElmoLanguageModel` weights layout (character CNN,
forward/backward LSTMs, shared full-softmax over the word vocabulary) on the same random batches of windows
(``--batch`` windows of ``--window`` tokens, no padding), Adagrad(0.2). The Keras side is a functional model
``char_ids -> (forward logits, backward logits)`` compiled with two sparse cross-entropy losses on the
shifted targets (``sample_weight`` masks the last/first position) and trained with ``fit`` on a repeated
dataset. The two take turns (``--rounds`` rounds of ``--steps`` steps each) so that they share machine noise;
tokens/s = batch · window · steps / seconds (median over rounds).

    python benchmarks/bench_elmo.py [--preset elmo_tiny] [--vocab 2000] [--batch 32] [--window 20] [--rounds 3]

``runner_rows`` gives this comparison's rows to ``python -m benchmarks.run``.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.common import machine_info  # noqa: E402
from kerasplm.models.elmo.model import ElmoLanguageModel  # noqa: E402
from kerasplm.training import Trainer  # noqa: E402


def make_batch(rng, batch, window, vocab, max_chars=50):
    chars = rng.integers(1, 257, size=(batch, window, max_chars)).astype(np.int32)
    return {"char_ids": chars, "token_ids": rng.integers(0, vocab, size=(batch, window)).astype(np.int32)}


def trainer_side(args, data):
    keras.utils.set_random_seed(0)
    trainer = Trainer(lambda: ElmoLanguageModel.from_preset(args.preset, vocab_size=args.vocab),
                      lambda: keras.optimizers.Adagrad(0.2, initial_accumulator_value=1.0),
                      ElmoLanguageModel.trainer_loss, jit_compile=args.jit, clip_norm=10.0, verbose=0)
    ds = tf.data.Dataset.from_tensors(data).repeat()
    trainer._ensure_ready(ds)
    batch = next(iter(trainer.strategy.experimental_distribute_dataset(ds)))

    def run(steps):
        for _ in range(steps):
            out = trainer._train_fn(batch)
        tf.nest.map_structure(lambda t: t.numpy(), out)
    return run


def keras_side(args, data):
    keras.utils.set_random_seed(0)
    task = ElmoLanguageModel.from_preset(args.preset, vocab_size=args.vocab)
    chars = keras.Input((None, 50), dtype="int32")
    logits = task(chars)
    model = keras.Model(chars, [logits["forward_logits"], logits["backward_logits"]])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(keras.optimizers.Adagrad(0.2, initial_accumulator_value=1.0, global_clipnorm=10.0),
                  loss=[loss, loss], jit_compile=args.jit)
    ids = data["token_ids"]
    fwd_targets, bwd_targets = np.roll(ids, -1, axis=1), np.roll(ids, 1, axis=1)
    weights_f, weights_b = np.ones(ids.shape, np.float32), np.ones(ids.shape, np.float32)
    weights_f[:, -1] = 0
    weights_b[:, 0] = 0
    ds = tf.data.Dataset.from_tensors((data["char_ids"], (fwd_targets, bwd_targets), (weights_f, weights_b))).repeat()

    def run(steps):
        model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0)
    return run


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="elmo_tiny")
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jit", action="store_true", help="XLA-compile both sides")
    return parser


def measure(args):
    """Times both sides as ``args`` (from ``build_parser``) says; returns {side: {"tokens_per_s", "first_step_s"}}."""
    data = make_batch(np.random.default_rng(0), args.batch, args.window, args.vocab)
    sides = {"kerasplm Trainer": trainer_side(args, data), "keras Model.fit": keras_side(args, data)}
    first, times = {}, {name: [] for name in sides}
    for name, run in sides.items():
        start = time.perf_counter()
        run(1)
        first[name] = time.perf_counter() - start
    for _ in range(args.rounds):
        for name, run in sides.items():
            start = time.perf_counter()
            run(args.steps)
            times[name].append(time.perf_counter() - start)
    tokens = args.batch * args.window * args.steps
    return {name: {"tokens_per_s": round(tokens / float(np.median(t)), 1), "first_step_s": round(first[name], 2)}
            for name, t in times.items()}


def runner_rows(argv=()):
    """``benchmarks.run``'s row: the kerasplm Trainer step against ``Model.fit`` of the same network; tokens/s.
    No MFU: 6·N does not count a character CNN, whose filters run over every character of a token."""
    args = build_parser().parse_args(argv)
    results = measure(args)
    return [{"name": "vs Keras Model.fit", "kerasplm": results["kerasplm Trainer"]["tokens_per_s"],
             "anchor": results["keras Model.fit"]["tokens_per_s"], "kerasplm_side": "kerasplm Trainer",
             "anchor_side": "keras Model.fit", "config": {k: v for k, v in vars(args).items()}}]


def main():
    args = build_parser().parse_args()
    results = measure(args)
    print(json.dumps({"benchmark": "elmo_train", "args": vars(args), "results": results,
                      "machine": machine_info()}, indent=2))


if __name__ == "__main__":
    main()
