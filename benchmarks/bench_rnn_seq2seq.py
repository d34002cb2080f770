"""RNN encoder-decoder training throughput (target tokens/s): kerasplm's ``RNNSeq2Seq`` train step vs a plain Keras
re-implementation of the seed's model, interleaved in one process.

Issue 27's speed evidence (goal: kerasplm under tf.function/XLA ≥ 1.5× the plain Keras model). Same model on every
side: the ``gru_bahdanau`` preset's shape (embedding 128, two GRU layers of 256, additive attention of 256 units;
``--preset`` for another RNN preset with additive attention), vocabulary 8,000 on both sides, dropout 0, random
weights; one synthetic batch of 64 pairs, source and target lengths drawn from 5..``--length`` with the rest
padding, fitted repeatedly with Adam (lr 1e-3) on the masked token cross-entropy.

- kerasplm: the Trainer step of ``kerasplm train translator --preset gru_bahdanau`` (``translation_loss``, the job's
  ``FusedAdam``; no XLA, as the job trains RNN presets). Keys projected once per source, the decoder steps in one
  ``tf.scan``, the output layer once over every position.
- kerasplm_xla: the same model, loss and optimizer in one ``tf.function(jit_compile=True)`` holding the forward
  pass, the backward pass and the update. (The Trainer XLA-compiles the forward pass alone, whose recurrent loops
  cannot hand their TensorLists to a backward pass outside XLA; so the whole step is compiled here.)
- kerasplm_bf16 (``--sides``): the Trainer step under the ``mixed_bfloat16`` policy (``--mixed-precision``).
- seed_keras: the seed's model (001_* §3.1-3.2: ``Seq2SeqEncoder``, ``AdditiveAttention`` with ``masked_softmax``,
  ``Seq2SeqAttentionDecoder``) written with plain Keras layers: ``keras.layers.GRU`` stacks for the encoder (over
  the padding, as the seed's), and a Python loop over the target positions in which the attention projects the
  keys again (``W_k(keys)``, as the seed's ``forward``), each decoder layer is a ``keras.layers.GRU`` run on one
  step from its state, and the output layer is applied to the concatenated outputs; the train step is a
  ``tf.function`` with a GradientTape (no XLA).

The sides take turns (``--rounds`` × ``--steps``), so they share the machine's load; target tokens/s = the batch's
real target tokens / median seconds per step.

    python -m benchmarks.bench_rnn_seq2seq [--rounds 5] [--steps 3] [--preset gru_bahdanau] [--json out.json]

``runner_rows`` gives this comparison's rows to ``python -m benchmarks.run``.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from benchmarks.common import (interleaved, load_average, machine_info, pair_rows, trainer_step,  # noqa: E402
                               write_results)

V = 8000
SIDES = ("kerasplm", "kerasplm_xla", "kerasplm_bf16", "seed_keras")


def synthetic_batch(batch, length, seed=0):
    """``((src (B, S), tgt_in (B, T)), tgt_out (B, T))`` int32: [START]=2 ... [END]=3, 0-padded, random lengths."""
    rng = np.random.default_rng(seed)

    def sentences(width):
        lengths = rng.integers(5, width + 1, size=batch)
        ids = rng.integers(4, V, size=(batch, width + 2))
        ids[:, 0] = 2
        ids[np.arange(batch), lengths + 1] = 3
        return np.where(np.arange(width + 2)[None] <= lengths[:, None] + 1, ids, 0).astype(np.int32)

    src, tgt = sentences(length), sentences(length)
    return (src, tgt[:, :-1]), tgt[:, 1:]


def kerasplm_step(config, batch, jit_compile):
    import tensorflow as tf

    from kerasplm.models.rnn_seq2seq.model import RNNSeq2Seq
    from kerasplm.models.transformer.model import translation_loss
    from kerasplm.training import Trainer
    from kerasplm.training.optimizers import FusedAdam

    (src, tgt_in), tgt_out = batch
    data = ((tf.constant(src), tf.constant(tgt_in)), tf.constant(tgt_out))
    trainer = Trainer(model=lambda: RNNSeq2Seq.from_config_object(config), optimizer=lambda: FusedAdam(1e-3),
                      compute_loss=translation_loss, jit_compile=jit_compile, verbose=0)
    return trainer_step(trainer, data, "loss")


def kerasplm_bf16_step(config, batch):
    """The Trainer step of ``kerasplm train translator --preset gru_bahdanau --mixed-precision mixed_bfloat16``:
    variables and the optimizer in float32, the matmuls and the recurrences in bfloat16 (the CPU's AVX-512 BF16
    dot products), the loss in float32."""
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        step, info = kerasplm_step(config, batch, False)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    return step, {**info, "dtype_policy": "mixed_bfloat16"}


def kerasplm_xla_step(config, batch):
    import tensorflow as tf

    from kerasplm.models.rnn_seq2seq.model import RNNSeq2Seq
    from kerasplm.models.transformer.model import translation_loss
    from kerasplm.training.optimizers import FusedAdam

    (src, tgt_in), tgt_out = batch
    data = ((tf.constant(src), tf.constant(tgt_in)), tf.constant(tgt_out))
    model = RNNSeq2Seq.from_config_object(config)
    optimizer = FusedAdam(1e-3)
    optimizer.build(model.trainable_variables)

    @tf.function(jit_compile=True)
    def train_step(data):
        with tf.GradientTape() as tape:
            sums = translation_loss(model, data, training=True, real_tokens_only=False)   # XLA: static shapes
            loss = sums["loss"] / sums["weight"]
        grads = tape.gradient(loss, model.trainable_variables)
        grads = [tf.convert_to_tensor(g) for g in grads]   # dense, as the Trainer's
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def step():
        train_step(data).numpy()

    return step, {"parameters": model.count_params(), "jit_compile": True}


def seed_keras_model(config):
    """The seed's GRU encoder-decoder with additive attention in plain Keras (module docstring)."""
    import keras
    import tensorflow as tf

    class SeedSeq2SeqAttention(keras.Model):
        def __init__(self, c):
            super().__init__()
            self.encoder_embedding = keras.layers.Embedding(c.input_vocab_size, c.embedding_dim)
            self.encoder_rnns = [keras.layers.GRU(c.units, return_sequences=True, return_state=True)
                                 for _ in range(c.num_layers)]
            self.decoder_embedding = keras.layers.Embedding(c.target_vocab_size, c.embedding_dim)
            units = c.attention_units or c.units
            self.W_k = keras.layers.Dense(units, use_bias=False)
            self.W_q = keras.layers.Dense(units, use_bias=False)
            self.w_v = keras.layers.Dense(1, use_bias=False)
            self.decoder_rnns = [keras.layers.GRU(c.units, return_sequences=True, return_state=True)
                                 for _ in range(c.num_layers)]
            self.dense = keras.layers.Dense(c.target_vocab_size)

        def call(self, src, tgt_in):
            valid_lens = tf.reduce_sum(tf.cast(src != 0, tf.int32), axis=1)
            x, state = self.encoder_embedding(src), []
            for rnn in self.encoder_rnns:
                x, s = rnn(x)
                state.append(s)
            enc_outputs, X, outputs = x, self.decoder_embedding(tgt_in), []
            for t in range(tgt_in.shape[1]):
                query = state[-1][:, tf.newaxis]
                features = tf.tanh(self.W_q(query)[:, :, tf.newaxis] + self.W_k(enc_outputs)[:, tf.newaxis])
                scores = tf.squeeze(self.w_v(features), -1)
                valid = tf.range(tf.shape(scores)[-1])[tf.newaxis, tf.newaxis] < valid_lens[:, tf.newaxis, tf.newaxis]
                weights = tf.nn.softmax(tf.where(valid, scores, -1e6), axis=-1)      # masked_softmax
                x = tf.concat([tf.matmul(weights, enc_outputs), X[:, t:t + 1]], axis=-1)
                new_state = []
                for rnn, s in zip(self.decoder_rnns, state):
                    x, s = rnn(x, initial_state=s)
                    new_state.append(s)
                state = new_state
                outputs.append(x)
            return self.dense(tf.concat(outputs, axis=1))

    return SeedSeq2SeqAttention(config)


def seed_keras_step(config, batch):
    import keras
    import tensorflow as tf

    (src, tgt_in), tgt_out = (tuple(tf.constant(x) for x in batch[0]), tf.constant(batch[1]))
    model = seed_keras_model(config)
    optimizer = keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(src, tgt_in, tgt_out):
        with tf.GradientTape() as tape:
            logits = model(src, tgt_in)
            mask = tf.cast(tgt_out != 0, tf.float32)       # the seed's MaskedSoftmaxCELoss: padding weighs 0
            losses = keras.losses.sparse_categorical_crossentropy(tgt_out, logits, from_logits=True)
            loss = tf.reduce_sum(losses * mask) / tf.reduce_sum(mask)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def step():
        train_step(src, tgt_in, tgt_out).numpy()

    model(src[:1], tgt_in[:1, :1])   # build
    return step, {"parameters": model.count_params(), "jit_compile": False}


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gru_bahdanau", help="an RNN preset with additive attention")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=20, help="longest source/target sentence (tokens)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps per side per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=[s for s in SIDES if s != "kerasplm_bf16"],
                        help="sides to time (kerasplm_bf16, the Trainer step under mixed_bfloat16, on request)")
    parser.add_argument("--json")
    return parser


def measure(args, parser=None):
    """Runs the sides of ``args`` (from ``build_parser``) interleaved; returns the results dict."""
    from kerasplm.models.rnn_seq2seq.model import get_preset

    config = get_preset(args.preset, input_vocab_size=V, target_vocab_size=V, rate=0.0)
    if config.attention != "additive" or config.cell != "gru" or config.bidirectional:
        (parser or build_parser()).error(
            f"--preset {args.preset}: the seed's model is a unidirectional GRU with additive attention")
    batch = synthetic_batch(args.batch, args.length)
    target_tokens = int((batch[1] != 0).sum())
    results = {"machine": machine_info(), "load_average_start": load_average(),
               "config": {"preset": args.preset, "embedding_dim": config.embedding_dim, "units": config.units,
                          "num_layers": config.num_layers, "vocab": V, "batch": args.batch, "length": args.length,
                          "target_tokens_per_batch": target_tokens}}
    builders = {"kerasplm": lambda: kerasplm_step(config, batch, False),
                "kerasplm_xla": lambda: kerasplm_xla_step(config, batch),
                "kerasplm_bf16": lambda: kerasplm_bf16_step(config, batch),
                "seed_keras": lambda: seed_keras_step(config, batch)}
    steps = {}
    for name in args.sides:
        steps[name], results[name] = builders[name]()
    for name, t in interleaved(steps, args.rounds, args.steps, args.warmup).items():
        results[name].update(t, target_tokens_per_second=target_tokens / t["seconds_per_step"])
    results["load_average_end"] = load_average()
    if "seed_keras" in steps:
        seed = results["seed_keras"]["target_tokens_per_second"]
        results["ratio_over_seed_keras"] = {name: results[name]["target_tokens_per_second"] / seed
                                            for name in steps if name != "seed_keras"}
    return results


def runner_rows(argv=()):
    """``benchmarks.run``'s rows: the Trainer step (tf.function) and the whole step under XLA against the
    seed's model in plain Keras; target tokens/s. No MFU (a recurrent model: 6·N + attention is a
    Transformer's count)."""
    args = build_parser().parse_args(argv)
    results = measure(args)
    return pair_rows(results, [("tf.function vs seed Keras", "kerasplm", "seed_keras"),
                               ("XLA vs seed Keras", "kerasplm_xla", "seed_keras")],
                     "target_tokens_per_second", {**results["config"], "rounds": args.rounds, "steps": args.steps})


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    write_results(measure(args, parser), args.json)


if __name__ == "__main__":
    main()
