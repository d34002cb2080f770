"""The seed's own translation pipeline, trained for a fixed time budget and scored like kerasplm's run.

What is the seed's (shared/seeds/000_*, via tests/seed_reference.py): ``preprocess_sentence`` (ASCII
folding, lower-casing, punctuation split, everything else dropped), the word-level vocabulary of
``Tokenizer(filters='')`` with the whole corpus padded to its longest sentence, the same Transformer,
Adam + CustomSchedule, the seed's masked ``loss_function`` and ``train_step`` under ``tf.function``,
unshuffled batches of 64 (``drop_remainder=True``) epoch after epoch, and greedy decoding up to <end>.

What is shared with ``kerasplm train translator`` so the comparison is fair: the same train/held-out
split (``kerasplm.models.translator.job._prepare_data``, split by source sentence), the same length filter
(pairs longer than --max-length tokens dropped), the same model size (--preset), the same time budget,
and the same scorer (``corpus_bleu``: case-insensitive sacrebleu with every reference of a source).
Decoding uses a batched re-implementation of the seed's ``evaluate`` (same argmax, same stop rule):
the seed's eager loop would take hours on 1,000 sentences and decoding speed does not change BLEU.

    python benchmarks/bleu_seed_baseline.py --data ../shared/data/tatoeba_spa_eng/spa-eng.tsv \
        --src-col 1 --tgt-col 0 --preset transformer_seed --time-budget 1200 --out seed_bleu.json
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

import kerasplm  # noqa: E402,F401
from kerasplm.models import get_preset  # noqa: E402
from kerasplm.models.translator.job import SEED_SENTENCES, TranslatorOptions, _prepare_data, corpus_bleu  # noqa: E402
from tests import seed_reference as seed  # noqa: E402


def main():
    p = argparse.ArgumentParser(description="Seed pipeline BLEU baseline")
    p.add_argument("--data")
    p.add_argument("--src-col", type=int, default=1)
    p.add_argument("--tgt-col", type=int, default=0)
    p.add_argument("--dev-size", type=int, default=1000)
    p.add_argument("--preset", default="transformer_seed")
    p.add_argument("--time-budget", type=float, default=1200)
    p.add_argument("--max-length", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out")
    args = p.parse_args()
    keras.utils.set_random_seed(args.seed)

    (train_src, train_tgt), _, (dev_sources, dev_refs) = _prepare_data(TranslatorOptions(
        data=args.data, src_col=args.src_col, tgt_col=args.tgt_col, dev_size=args.dev_size, seed=args.seed))
    inp_text = [seed.preprocess_sentence(s) for s in train_src]
    tar_text = [seed.preprocess_sentence(t) for t in train_tgt]
    keep = [i for i in range(len(inp_text)) if len(inp_text[i].split(" ")) <= args.max_length
            and len(tar_text[i].split(" ")) <= args.max_length]
    inp_text, tar_text = [inp_text[i] for i in keep], [tar_text[i] for i in keep]
    input_tensor, inp_tok = seed.tokenize(inp_text)
    target_tensor, tar_tok = seed.tokenize(tar_text)
    # The seed shuffles once (train_test_split) and never again.
    order = np.random.default_rng(args.seed).permutation(len(input_tensor))
    input_tensor, target_tensor = input_tensor[order], target_tensor[order]
    print(f"seed pipeline: {len(input_tensor)} pairs, padded to {input_tensor.shape[1]} / {target_tensor.shape[1]}, "
          f"vocab {len(inp_tok.word_index) + 2} / {len(tar_tok.word_index) + 2}", flush=True)
    dataset = tf.data.Dataset.from_tensor_slices((input_tensor.astype(np.int64), target_tensor.astype(np.int64)))
    dataset = dataset.batch(args.batch_size, drop_remainder=True)

    cfg = get_preset(args.preset)
    input_vocab_size, target_vocab_size = len(inp_tok.word_index) + 2, len(tar_tok.word_index) + 2
    transformer = seed.Transformer(cfg.num_layers, cfg.d_model, cfg.num_heads, cfg.dff, input_vocab_size,
                                   target_vocab_size, pe_input=input_vocab_size, pe_target=target_vocab_size,
                                   rate=cfg.rate)
    optimizer = keras.optimizers.Adam(seed.CustomSchedule(cfg.d_model), beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    train_loss, train_accuracy = keras.metrics.Mean(), keras.metrics.SparseCategoricalAccuracy()
    train_step = seed.make_train_step(transformer, optimizer, train_loss, train_accuracy)

    start, steps, epoch = time.time(), 0, 0
    while time.time() - start < args.time_budget:
        epoch += 1
        train_loss.reset_state()
        train_accuracy.reset_state()
        for inp, tar in dataset:
            train_step(inp, tar)
            steps += 1
            if time.time() - start >= args.time_budget:
                break
        print(f"epoch {epoch} step {steps} loss {float(train_loss.result()):.4f} "
              f"accuracy {float(train_accuracy.result()):.4f} ({time.time() - start:.0f}s)", flush=True)
    train_seconds = time.time() - start

    start_id, end_id = tar_tok.word_index["<start>"], tar_tok.word_index["<end>"]
    in_start, in_end = inp_tok.word_index["<start>"], inp_tok.word_index["<end>"]

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64)])
    def greedy(encoder_input):
        # The seed's evaluate(): re-run the whole model on the prefix, append the argmax; batched.
        batch = tf.shape(encoder_input)[0]
        output = tf.fill([batch, 1], tf.constant(start_id, tf.int64))
        for _ in range(args.max_length):
            enc_mask, combined, dec_mask = seed.create_masks(encoder_input, output)
            predictions, _ = transformer(encoder_input, output, training=False, enc_padding_mask=enc_mask,
                                         look_ahead_mask=combined, dec_padding_mask=dec_mask)
            output = tf.concat([output, tf.argmax(predictions[:, -1:, :], axis=-1)], axis=-1)
        return output

    def translate(sentences):
        results = []
        for i in range(0, len(sentences), 100):
            # The seed's evaluate() keeps known words only and wraps them in <start>/<end>.
            seqs = [[in_start] + [inp_tok.word_index[w] for w in seed.preprocess_sentence(s).split(" ")[1:-1]
                                  if w in inp_tok.word_index] + [in_end] for s in sentences[i:i + 100]]
            ids = greedy(tf.constant(seed.pad_sequences(seqs), tf.int64)).numpy()
            for row in ids:
                words = []
                for t in row[1:]:
                    if t == end_id:
                        break
                    if t in tar_tok.index_word:
                        words.append(tar_tok.index_word[t])
                results.append(" ".join(words))
        return results

    t0 = time.time()
    hyps = translate(dev_sources)
    bleu = corpus_bleu(hyps, dev_refs)
    summary = {"pipeline": "seed (word-level vocabulary)", "preset": args.preset, "steps": steps, "epochs": epoch,
               "train_seconds": round(train_seconds, 1), "bleu": round(bleu.score, 2), "bleu_signature": str(bleu),
               "bleu_sentences": len(dev_sources), "decode_seconds": round(time.time() - t0, 1),
               "final_train_loss": float(train_loss.result()),
               "samples": dict(zip(SEED_SENTENCES, translate(SEED_SENTENCES))),
               "dev_examples": [{"source": s, "translation": h, "references": r}
                                for s, h, r in list(zip(dev_sources, hyps, dev_refs))[:10]]}
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2, ensure_ascii=False)


if __name__ == "__main__":
    main()
