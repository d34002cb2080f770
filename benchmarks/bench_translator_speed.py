"""Relative training speed of translator-job configurations, measured back to back (issue 10).

On a shared (loaded) machine absolute steps/s mean little; what holds is the ratio between two
configurations timed in the same process, interleaved: each round times ``--steps`` train steps of
every configuration in turn, after ``--warmup`` untimed steps each (tracing every bucket shape).

A configuration is ``name:key=value,...`` with keys ``preset`` (default transformer_seed), ``batch``
(pairs per batch, default 64), ``vocab`` (WordPiece vocabulary size, default 8000), ``dropout``, and
any ``TransformerConfig`` field (``num_layers``, ``d_model``, ``num_heads``, ``dff``,
``normalize_first``...). The first configuration is the reference: the report gives every one's
steps/s relative to it and "steps in 165 s idle" = 1000 x that ratio (the reference, the job's old
default, makes about 1,000 steps in 165 s on the idle benchmark box).

    python benchmarks/bench_translator_speed.py default:batch=64 b256v4k:batch=256,vocab=4000
"""
import argparse
import dataclasses
import json
import os
import tempfile
import time

import keras

from kerasplm.data import make_translation_dataset, read_parallel_tsv, sample_path
from kerasplm.models.transformer.model import Transformer, get_preset
from kerasplm.models.translator.job import translation_loss
from kerasplm.text import TranslatorPreprocessor, WordPieceTokenizer, build_wordpiece_vocab, write_vocab
from kerasplm.training import BudgetSchedule, Trainer

JOB_KEYS = {"preset": str, "batch": int, "vocab": int, "data": str}


def parse_config(spec):
    name, _, body = spec.partition(":")
    config = {"preset": "transformer_seed", "batch": 64, "vocab": 8000, "data": None, "model": {}}
    for item in filter(None, body.split(",")):
        key, _, value = item.partition("=")
        if key in JOB_KEYS:
            config[key] = JOB_KEYS[key](value)
        elif key == "dropout":
            config["model"]["rate"] = float(value)
        else:
            config["model"][key] = json.loads(value.lower() if value in ("True", "False") else value)
    return name, config


def build(config, texts, vocab_dir, cache):
    """A ready Trainer and an endless iterator of its batches."""
    src, tgt = texts(config["data"])
    key = (config["data"], config["vocab"])
    if key not in cache:
        paths = []
        for side, side_texts in (("src", src), ("tgt", tgt)):
            path = os.path.join(vocab_dir, f"{side}_{abs(hash(key))}.txt")
            write_vocab(build_wordpiece_vocab(side_texts, vocab_size=config["vocab"],
                                              reserved_tokens=TranslatorPreprocessor.special_tokens), path)
            paths.append(path)
        cache[key] = tuple(WordPieceTokenizer(p) for p in paths)
    src_tok, tgt_tok = cache[key]
    model_config = get_preset(config["preset"], input_vocab_size=src_tok.vocab_size,
                              target_vocab_size=tgt_tok.vocab_size, **config["model"])
    dataset = make_translation_dataset(src, tgt, src_tok, tgt_tok, batch_size=config["batch"], shuffle=True,
                                       seed=0, repeat=True)
    trainer = Trainer(model=lambda: Transformer.from_config_object(model_config),
                      optimizer=lambda: keras.optimizers.Adam(BudgetSchedule(1e-3, 1000), beta_1=0.9,
                                                              beta_2=0.98, epsilon=1e-9),
                      compute_loss=lambda m, b, training: translation_loss(m, b, training, label_smoothing=0.1),
                      jit_compile=False, verbose=0)
    trainer.fit(dataset, steps=0)
    return trainer, iter(dataset), (src_tok.vocab_size, tgt_tok.vocab_size)


def run_steps(trainer, iterator, steps):
    t = time.perf_counter()
    for _ in range(steps):
        sums = trainer._train_fn(next(iterator))
    float(sums["terms"]["loss"][0])  # wait for the last step
    return time.perf_counter() - t


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("configs", nargs="+")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args(argv)
    corpora = {}

    def texts(data):
        if data not in corpora:
            corpora[data] = read_parallel_tsv(data or sample_path("spa-eng-train.tsv"), src_col=1, tgt_col=0)
        return corpora[data]

    configs = [parse_config(s) for s in a.configs]
    built, cache = {}, {}
    with tempfile.TemporaryDirectory() as vocab_dir:
        for name, config in configs:
            built[name] = build(config, texts, vocab_dir, cache)
            run_steps(*built[name][:2], a.warmup)
        seconds = {name: 0.0 for name, _ in configs}
        for _ in range(a.rounds):
            for name, _ in configs:
                seconds[name] += run_steps(*built[name][:2], a.steps)
    reference = configs[0][0]
    rate = {name: a.rounds * a.steps / s for name, s in seconds.items()}
    for name, config in configs:
        ratio = rate[name] / rate[reference]
        print(json.dumps({"name": name, "batch": config["batch"], "vocab": built[name][2],
                          "model": {k: v for k, v in dataclasses.asdict(built[name][0].model.config).items()
                                    if k in ("num_layers", "d_model", "num_heads", "dff", "rate")},
                          "steps_per_s_loaded": round(rate[name], 2), "relative": round(ratio, 3),
                          "steps_in_165s_idle": round(1000 * ratio),
                          "pairs_in_165s_idle": round(1000 * ratio * config["batch"])}))


if __name__ == "__main__":
    main()
