"""Subprocess entry points for the training tests: `python -m tests.training.train_script MODE ...`.

Modes print one JSON line starting with "RESULT " and write weights to --out (.npz).
"""
import argparse
import json
import sys
import time


def _dump(path, model):
    import numpy as np
    np.savez(path, *[np.array(v) for v in model.trainable_variables])


def run_toy(args):
    """Single-device training with a slowed-down input pipeline (for SIGTERM tests)."""
    import keras
    import tensorflow as tf
    from kerasplm.training import Trainer
    from tests.training import toy

    def slow(x, y):
        tf.py_function(lambda: time.sleep(args.sleep), [], [])
        return x, y

    dataset = toy.make_dataset().map(slow)
    trainer = Trainer(toy.make_model, lambda: keras.optimizers.Adam(1e-2), toy.compute_loss,
                      checkpoint_dir=args.ckpt, checkpoint_every=args.checkpoint_every, verbose=0)
    trainer.fit(dataset, steps=args.steps, log_every=0)
    _dump(args.out, trainer.model)
    print("RESULT " + json.dumps({"step": trainer.step, "stop_reason": trainer.stop_reason}),
          flush=True)


def run_mirrored(args):
    """Compare one step under MirroredStrategy (2 logical CPUs) with the default strategy."""
    from kerasplm.training import configure_logical_cpus, get_strategy
    configure_logical_cpus(2)
    import keras
    import numpy as np
    import tensorflow as tf
    from kerasplm.training import Trainer
    from kerasplm.training.optimizers import FusedAdam, FusedAdamW
    from tests.training import toy

    # One global batch of 8: the first half (replica 0) long, the second half (replica 1) short,
    # so per-replica means would NOT equal the global masked mean.
    x, y = toy.make_arrays(8, 12, seed=3)
    x[4:, 3:] = 0
    y[4:, 3:] = 0
    batch_ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    keras.utils.set_random_seed(0)
    initial = toy.make_model(dropout=0.0)
    initial.build((None, None))
    init_weights = initial.get_weights()

    results = {}
    for name in ("default", "mirrored"):
        for clip in (None, 0.05):
            strategy = get_strategy(name)
            with strategy.scope():
                model = toy.make_model(dropout=0.0)
                model.set_weights(init_weights)
                optimizer = keras.optimizers.SGD(0.5)
            trainer = Trainer(model, optimizer, toy.compute_loss, strategy=strategy,
                              clip_norm=clip, verbose=0)
            history = trainer.fit(batch_ds, steps=1, log_every=1)
            results[(name, clip)] = (history["loss"][0], [np.array(v) for v in model.variables])
        results[name + "_replicas"] = strategy.num_replicas_in_sync
        # The fused Adam kernel under each strategy (per-replica variable handles inside strategy.update).
        with strategy.scope():
            model = toy.make_model(dropout=0.0)
            model.set_weights(init_weights)
            optimizer = FusedAdamW(0.01, weight_decay=0.1)
        Trainer(model, optimizer, toy.compute_loss, strategy=strategy, verbose=0).fit(batch_ds.repeat(), steps=3,
                                                                                      log_every=0)
        results[name + "_fused"] = [np.array(v) for v in model.variables]

        # Adam on learned positions: each replica's gradient for a position row is summed over its examples (one
        # IndexedSlices row per replica), which Keras' Adam, fed slices, would square one by one.
        keras.utils.set_random_seed(1)
        with strategy.scope():
            model = toy.make_position_model()
            model.build((None, None))
        if name == "default":
            position_init = model.get_weights()
        with strategy.scope():
            model.set_weights(position_init)
            optimizer = keras.optimizers.Adam(0.05)
        Trainer(model, optimizer, toy.compute_loss, strategy=strategy, verbose=0).fit(batch_ds.repeat(), steps=2,
                                                                                      log_every=0)
        results[name + "_positions"] = [np.array(v) for v in model.variables]

    report = {"replicas": results["mirrored_replicas"]}
    report["position_weight_diff"] = max(float(np.abs(a - b).max())
                                         for a, b in zip(results["default_positions"], results["mirrored_positions"]))
    report["position_update"] = max(float(np.abs(a - b).max())
                                    for a, b in zip(results["default_positions"], position_init))
    for clip in (None, 0.05):
        loss_d, w_d = results[("default", clip)]
        loss_m, w_m = results[("mirrored", clip)]
        report[f"loss_diff_{clip}"] = abs(loss_d - loss_m)
        report[f"weight_diff_{clip}"] = max(float(np.abs(a - b).max()) for a, b in zip(w_d, w_m))
        report[f"update_{clip}"] = max(float(np.abs(a - b).max()) for a, b in zip(w_d, init_weights))
    report["fused_weight_diff"] = max(float(np.abs(a - b).max())
                                      for a, b in zip(results["default_fused"], results["mirrored_fused"]))
    report["fused_update"] = max(float(np.abs(a - b).max()) for a, b in zip(results["default_fused"], init_weights))
    # Clipping changed the update (and the two strategies agree on it).
    # A short mirrored training run must make progress.
    strategy = get_strategy("mirrored")
    trainer = Trainer(lambda: toy.make_model(), lambda: FusedAdam(1e-2), toy.compute_loss, strategy=strategy,
                      verbose=0)
    history = trainer.fit(toy.make_dataset(), steps=40, log_every=10)
    report["losses"] = history["loss"]
    report["trace_count"] = trainer.trace_count
    print("RESULT " + json.dumps(report), flush=True)


def run_multiterm(args):
    """Two loss terms with different denominators: one SGD step on 1 device and on 2 replicas, each
    compared with the exact global objective computed by hand (and with the naive mean of means)."""
    from kerasplm.training import configure_logical_cpus, get_strategy
    configure_logical_cpus(2)
    import keras
    import numpy as np
    import tensorflow as tf
    from kerasplm.training import Trainer
    from tests.training import toy

    # Replica 0 gets long rows, replica 1 short ones: counts per replica are very uneven.
    x, y = toy.make_arrays(8, 12, seed=4)
    x[4:, 3:] = 0
    y[4:, 3:] = 0
    keras.utils.set_random_seed(0)
    reference = toy.make_model(dropout=0.0)
    reference.build((None, None))
    init_weights = reference.get_weights()
    lr = 0.5
    _, grads, means = toy.two_term_reference(reference, x, y)
    expected = [w - lr * np.asarray(tf.convert_to_tensor(g)) for w, g in zip(init_weights, grads)]
    # The naive alternative: each replica's own objective on its half, averaged.
    naive = [toy.two_term_reference(reference, x[i:i + 4], y[i:i + 4])[1] for i in (0, 4)]
    naive = [(np.asarray(tf.convert_to_tensor(a)) + np.asarray(tf.convert_to_tensor(b))) / 2 for a, b in zip(*naive)]
    report = {"naive_grad_diff": max(float(np.abs(np.asarray(tf.convert_to_tensor(g)) - n).max())
                                     for g, n in zip(grads, naive))}
    for name in ("default", "mirrored"):
        strategy = get_strategy(name)
        with strategy.scope():
            model = toy.make_model(dropout=0.0)
            model.set_weights(init_weights)
            optimizer = keras.optimizers.SGD(lr)
        trainer = Trainer(model, optimizer, toy.two_term_loss, strategy=strategy, verbose=0)
        history = trainer.fit(tf.data.Dataset.from_tensors((x, y)), steps=1, log_every=1)
        report[f"{name}_replicas"] = strategy.num_replicas_in_sync
        report[f"{name}_weight_diff"] = max(float(np.abs(a - b).max())
                                            for a, b in zip(model.get_weights(), expected))
        report[f"{name}_metric_diff"] = max(abs(history[k][0] - v) for k, v in means.items())
        # evaluate() of the updated model, against the hand computation on the updated weights.
        reference.set_weights(model.get_weights())
        evaluated = trainer.evaluate(tf.data.Dataset.from_tensors((x, y)))
        report[f"{name}_eval_diff"] = max(abs(evaluated[k] - v)
                                          for k, v in toy.two_term_reference(reference, x, y)[2].items())
        report[f"{name}_keys"] = sorted(evaluated)
    report["update"] = max(float(np.abs(a - b).max()) for a, b in zip(expected, init_weights))
    print("RESULT " + json.dumps(report), flush=True)


def run_multiworker(args):
    """One worker of a 2-worker MultiWorkerMirroredStrategy cluster described by TF_CONFIG."""
    import keras
    from kerasplm.training import Trainer, get_strategy
    from tests.training import toy

    strategy = get_strategy("multiworker")
    trainer = Trainer(lambda: toy.make_model(), lambda: keras.optimizers.Adam(1e-2),
                      toy.compute_loss, strategy=strategy, checkpoint_dir=args.ckpt, verbose=0)
    history = trainer.fit(toy.make_dataset(), steps=args.steps, log_every=1)
    _dump(args.out, trainer.model)
    trainer.close()
    print("RESULT " + json.dumps({"losses": history["loss"], "step": trainer.step,
                                  "replicas": strategy.num_replicas_in_sync,
                                  "is_chief": trainer.is_chief}), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["toy", "mirrored", "multiterm", "multiworker"])
    parser.add_argument("--ckpt")
    parser.add_argument("--out")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--checkpoint-every", type=int, default=None)
    args = parser.parse_args(argv)
    {"toy": run_toy, "mirrored": run_mirrored, "multiterm": run_multiterm,
     "multiworker": run_multiworker}[args.mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
