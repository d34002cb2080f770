"""Fine-tune a BERT run on a sentence (pair) classification or regression task: ``kerasplm finetune bert-classifier``.

The recipe is the BERT paper's (section 4.1 and appendix A.3): the pooled ``[CLS]`` output, a dropout and one
dense layer; AdamW (weight decay 0.01, not on biases and LayerNorm, ε = 1e-6), learning rate 2e-5 … 5e-5 (3e-5
here) with linear warmup over 10% of the steps and linear decay to 0, 2–4 epochs, gradients clipped to norm 1.
The schedule spans ``--steps`` (else ``--epochs``); given ``--time-budget`` alone, the job times its first steps
and fits the schedule to the steps the budget allows (``--epochs``' worth at most), so the learning rate reaches
0 as the budget ends.
Optionally layer-wise learning-rate decay (ELECTRA, Clark et al. 2020, appendix A): a block ``k`` levels below
the head learns at ``lr · decay^k``. ``--random-init`` keeps the ``--init`` run's architecture and vocabulary but
draws fresh weights: the same job without pretraining, to measure what pretraining buys.

Data: tab-separated files, one example per line; ``--text-col``, ``--pair-col``, ``--label-col`` are column
names of the header line (``sentence``, ``label`` for GLUE's SST-2) or 0-based indices (with ``--no-header``).
The label names are those of the training file (sorted); the model's outputs follow that order, the exported
classifier answers with the names.

Run directory (:mod:`kerasplm.runs`): family ``bert_classifier``; ``model`` = the backbone's config,
``num_labels``, ``labels``, ``dropout``; asset ``vocab``; ``metrics.json`` = the training summary + ``dev``
(accuracy, F1, MCC; regression: MSE and Pearson's r). Resumable like every kerasplm job.

>>> summary = finetune_bert_classifier("runs/sst2", train="sst2/train.tsv", dev="sst2/dev.tsv",
...                                    init="runs/minilm", epochs=1)
>>> summary["dev"]["accuracy"]
"""
import dataclasses
import math
import os
import shutil
import time

import keras
import numpy as np
import tensorflow as tf

from kerasplm.models.bert import BertBackbone, BertConfig
from kerasplm.models.bert_tasks import POOLINGS, BertClassifier, classification_metrics
from kerasplm.families.bert import BertClassifierOptions
from kerasplm.jobs.job import (fit_scheduled, open_run, provisional_total_steps, restores_global_policy,
                               training_summary)
from kerasplm.options import RUN, resolve_options
from kerasplm.runs import RunDir
from kerasplm.text.bert_tokenizer import BertPreprocessor, BertTokenizer
from kerasplm.training import BudgetSchedule, Trainer
from kerasplm.training.optimizers import FusedAdamW

FAMILY = "bert_classifier"
ASSETS = {"vocab": "vocab.txt"}


# ------------------------------------------------------------------------------------------------ data
def _column(path, spec, header):
    """0-based index of column ``spec`` (a header name or an index)."""
    if spec.isdigit():
        return int(spec)
    if header is None:
        raise ValueError(f"{path}: column {spec!r} is a name but the file has no header (--no-header): give an index")
    if spec not in header:
        raise ValueError(f"{path}: no column {spec!r} in the header ({', '.join(header)})")
    return header.index(spec)


def read_classification_tsv(path, text_col="sentence", label_col="label", pair_col=None, header=True,
                            max_examples=None):
    """``(texts, pairs or None, labels)`` (lists of str) of a tab-separated file; errors name file and line."""
    with open(path, encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    names = lines[0].rstrip("\r").split("\t") if header and lines else None
    first = 2 if header else 1
    columns = [_column(path, str(spec), names) for spec in (text_col, label_col, pair_col) if spec is not None]
    rows = ([], [], [])
    for lineno, line in enumerate(lines[first - 1:], start=first):
        if max_examples is not None and len(rows[0]) >= max_examples:
            break
        fields = line.rstrip("\r").split("\t")
        if len(fields) <= max(columns):
            raise ValueError(f"{path}:{lineno}: {len(fields)} column(s), column {max(columns)} needed")
        for values, index in zip(rows, columns):
            values.append(fields[index])
    if not rows[0]:
        raise ValueError(f"{path}: no examples")
    texts, labels, pairs = rows
    return texts, (pairs if pair_col is not None else None), labels


def _label_ids(path, labels, names, regression):
    if regression:
        try:
            return np.asarray([float(x) for x in labels], np.float32)
        except ValueError as e:
            raise ValueError(f"{path}: a regression label is not a number ({e})") from None
    index = {name: i for i, name in enumerate(names)}
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise ValueError(f"{path}: label(s) {', '.join(map(repr, unknown[:5]))} not among the training labels "
                         f"({', '.join(names)})")
    return np.asarray([index[x] for x in labels], np.int64)


def make_classification_dataset(preprocessor, texts, pairs, labels, batch_size, shuffle=False, seed=0, repeat=False):
    """``((inputs dict, labels), ...)`` batches: strings packed by ``preprocessor`` in the tf.data graph.

    Training batches (``shuffle``/``repeat``) all have ``batch_size`` rows (one traced step); a seeded shuffle
    replays the same order in every process, as the Trainer's exact resume needs.
    """
    columns = (tf.constant(texts, tf.string), tf.constant(pairs if pairs is not None else texts, tf.string),
               tf.constant(labels))
    ds = tf.data.Dataset.from_tensor_slices(columns)
    if shuffle:
        ds = ds.shuffle(len(texts), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=repeat)

    @tf.autograph.experimental.do_not_convert
    def encode(text, pair, label):
        return preprocessor(text, pair if pairs is not None else None), label

    return ds.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(2)


# ------------------------------------------------------------------------------------------------ model
class LayerwiseAdamW(FusedAdamW):
    """AdamW with a learning-rate multiplier per variable: ``multiplier(variable) -> float`` (read once, at build)."""

    def __init__(self, multiplier, **kwargs):
        super().__init__(**kwargs)
        self._multiplier = multiplier
        self._lr_multipliers = []

    def build(self, variables):
        super().build(variables)
        self._lr_multipliers = [float(self._multiplier(v)) for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        factor = self._lr_multipliers[self._get_variable_index(variable)]
        return super().update_step(gradient, variable, learning_rate * factor)


def layer_decay_multiplier(num_layers, decay):
    """ELECTRA's depths: embeddings 0, block ``i`` (1-based) ``i``, pooler and head ``L + 1``; a variable at depth
    ``d`` learns at ``decay^(L + 1 - d)`` (by its path ``<backbone>/<embeddings|blockN|pooler>/...``)."""
    def multiplier(variable):
        parts = variable.path.split("/")
        part = parts[1] if len(parts) > 2 else ""
        depth = num_layers + 1
        if part == "embeddings":
            depth = 0
        elif part.startswith("block"):
            depth = int(part[len("block"):] or num_layers)   # ALBERT's shared "block": the top
        return decay ** (num_layers + 1 - depth)
    return multiplier


def bert_init_parts(init, length, length_option="max_length"):
    """``(backbone, tokenizer, options)`` of the BERT run ``init`` that a fine-tuning job starts from; one-line
    errors for a missing --init and for a sequence length beyond the model's positions."""
    if init is None:
        raise ValueError("give the BERT run to start from (init / --init)")
    from kerasplm.export.embedder import bert_run_parts

    backbone, tokenizer, options = bert_run_parts(init)
    if length > backbone.config.max_positions:
        raise ValueError(f"{length_option}={length} exceeds the model's {backbone.config.max_positions} positions")
    return backbone, tokenizer, options


def plan_schedule(o, resumed, legacy_steps):
    """``o`` with ``schedule_steps``, the steps the learning-rate schedule spans: the run's recorded length on a
    resume, else ``o.steps``; None for a new run given a time budget only (:func:`fit_scheduled` fits it to the
    budget). A run recorded before the option existed keeps the length it was trained with, ``legacy_steps``."""
    if o.schedule_steps is not None:
        return o
    return o.replace(schedule_steps=legacy_steps if resumed else o.steps)


def fine_tuning_schedule(o, total_steps):
    """BERT's fine-tuning schedule: linear warmup over ``o.warmup_fraction`` of ``total_steps`` to
    ``o.learning_rate``, then linear decay to 0 at ``total_steps`` (a :class:`BudgetSchedule`, so that a run with
    a time budget only can refit its length once its first steps are timed; None: that provisional length)."""
    return BudgetSchedule(o.learning_rate, total_steps or provisional_total_steps(o.warmup_fraction),
                          warmup_fraction=o.warmup_fraction)


def make_optimizer(o, schedule, num_layers):
    """The BERT fine-tuning optimizer (every BERT task): AdamW, ε 1e-6, weight decay not on biases and LayerNorm,
    learning rate ``schedule`` (:func:`fine_tuning_schedule`), optional layer-wise decay."""
    kwargs = dict(learning_rate=schedule, weight_decay=o.weight_decay, epsilon=1e-6)
    if o.layer_decay is None or o.layer_decay == 1.0:
        optimizer = FusedAdamW(**kwargs)
    else:
        optimizer = LayerwiseAdamW(layer_decay_multiplier(num_layers, o.layer_decay), **kwargs)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer


def _model_parts(run, config):
    model = config["model"]
    try:
        backbone_config = BertConfig(**model["backbone"]).validate()
        labels, num_labels, dropout = list(model["labels"]), int(model["num_labels"]), float(model["dropout"])
        pooling = model.get("pooling", "cls")             # runs written before the option pooled [CLS]
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r} is not one of {', '.join(POOLINGS)}")
    except (KeyError, TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"'model' is not a BERT classifier config ({e})") from None
    return backbone_config, labels, num_labels, dropout, pooling


def load_bert_classifier_run(run, config):
    """The loader of family ``bert_classifier``: a :class:`BertClassifier` with its checkpoint restored, its
    ``preprocessor`` (strings -> inputs) and ``labels`` (class names; empty for regression)."""
    backbone_config, labels, num_labels, dropout, pooling = _model_parts(run, config)
    options = config["options"]
    tokenizer = BertTokenizer(run.asset(config, "vocab"), lower_case=bool(options.get("lower_case", True)))
    preprocessor = BertPreprocessor(tokenizer, int(options.get("max_length", 128)))
    model = BertClassifier(BertBackbone.from_config_object(backbone_config), num_labels, preprocessor=preprocessor,
                           dropout=dropout, pooling=pooling)
    run.restore(model=model)
    model.labels = labels
    model.pair_input = options.get("pair_col") is not None
    return model


def load_bert_classifier(run_dir):
    run = RunDir(run_dir)
    return load_bert_classifier_run(run, run.read_config(family=FAMILY, what="BERT classifier"))


# ------------------------------------------------------------------------------------------------ job
def _read(o, path, max_examples=None):
    return read_classification_tsv(path, o.text_col, o.label_col, o.pair_col, o.header, max_examples)


def _evaluate(model, dev_ds, regression, num_labels):
    predictions, targets = [], []
    for inputs, labels in dev_ds:
        logits = model(inputs, training=False).numpy()
        predictions.append(logits[:, 0] if regression else logits.argmax(-1))
        targets.append(labels.numpy())
    predictions, targets = np.concatenate(predictions), np.concatenate(targets)
    if not regression:
        return classification_metrics(targets, predictions, num_labels)
    pearson = float(np.corrcoef(predictions, targets)[0, 1]) if len(targets) > 1 else 0.0
    return {"mse": float(np.mean((predictions - targets) ** 2)), "pearson": pearson, "examples": int(len(targets))}


@restores_global_policy
def finetune_bert_classifier(out, options=None, log=print, **overrides):
    """Fine-tune (or resume) a BERT classifier in run directory ``out``; score ``dev``; returns the summary.

    ``options``: a :class:`BertClassifierOptions`; keyword ``overrides`` replace single options. Without
    ``steps`` and ``time_budget`` it trains ``epochs`` epochs. The summary (also ``metrics.json``) has the
    training figures and ``dev`` (accuracy, F1, MCC), and "classifier" is the trained :class:`BertClassifier`.
    """
    (texts, pairs, raw_labels), planned, overrides = plan_epochs(out, FAMILY, BertClassifierOptions, options,
                                                                 overrides, "BERT classifier")
    run, o, config, previous_history = open_run(out, FAMILY, BertClassifierOptions, options, overrides,
                                                what="BERT classifier", check_config=_model_parts)
    regression = o.task == "regression"
    o = plan_schedule(o, resumed=config is not None, legacy_steps=max(planned, o.steps or 0))
    if config is None:
        backbone, tokenizer, init_options = bert_init_parts(o.init, o.max_length)
        if o.random_init:
            keras.utils.set_random_seed(o.seed)
            backbone = BertBackbone.from_config_object(backbone.config, name=backbone.name)
        log(f"started from {o.init} ({'fresh weights' if o.random_init else 'pretrained'})")
        labels = [] if regression else sorted(set(raw_labels))
        num_labels = 1 if regression else len(labels)
        if not regression and num_labels < 2:
            raise ValueError(f"{o.train}: one label only ({labels[0]!r}); a classifier needs at least two")
        lower_case = bool(init_options.get("lower_case", True))
        os.makedirs(out, exist_ok=True)
        init_run = RunDir(o.init)
        shutil.copyfile(init_run.asset(init_run.read_config(), "vocab"), run.file(ASSETS["vocab"]))
        model_config = {"backbone": dataclasses.asdict(backbone.config), "num_labels": num_labels, "labels": labels,
                        "dropout": o.dropout, "pooling": o.pooling}
        config = run.write_config(FAMILY, "sequence_classification", "custom", model_config,
                                  {**o.stored(RUN), "lower_case": lower_case}, assets=ASSETS)
    else:
        log(f"resuming run in {out}")
        backbone_config, labels, num_labels, _, _ = _model_parts(run, config)
        backbone = BertBackbone.from_config_object(backbone_config)    # weights come from the run's checkpoint
        tokenizer = BertTokenizer(run.asset(config, "vocab"), lower_case=bool(config["options"].get("lower_case")))
    preprocessor = BertPreprocessor(tokenizer, o.max_length)
    train_ds, dev_ds = classification_datasets(o, preprocessor, (texts, pairs, raw_labels), labels, regression, log)
    schedule = fine_tuning_schedule(o, o.schedule_steps)
    trainer = Trainer(
        model=lambda: BertClassifier(backbone, num_labels, preprocessor=preprocessor, dropout=o.dropout,
                                     pooling=o.pooling),
        optimizer=lambda: make_optimizer(o, schedule, backbone.config.num_layers),
        compute_loss=BertClassifier.trainer_loss, jit_compile=o.jit_compile, clip_norm=1.0,
        checkpoint_dir=run.checkpoint_dir, checkpoint_every=500, log_dir=run.log_dir, seed=o.seed, verbose=o.verbose)
    return fit_and_score(run, trainer, previous_history, train_ds, o, schedule, planned, labels,
                         pairs is not None, dev_ds, regression, num_labels, log)


def classification_datasets(o, preprocessor, examples, labels, regression, log):
    """``(train_ds () -> dataset, dev_ds or None)`` of a classification job's options ``o``; ``examples`` are the
    training file's ``(texts, pairs, raw labels)``, ``labels`` the class names."""
    texts, pairs, raw_labels = examples
    train_labels = _label_ids(o.train, raw_labels, labels, regression)
    log(f"data: {len(texts)} training examples ({'pairs' if pairs is not None else 'single texts'}), "
        f"{'regression' if regression else f'{len(labels)} labels: ' + ', '.join(labels)}")

    def train_ds():
        return make_classification_dataset(preprocessor, texts, pairs, train_labels, o.batch_size, shuffle=True,
                                           seed=o.seed, repeat=True)

    dev_ds = None
    if o.dev is not None:
        dev_texts, dev_pairs, dev_raw = _read(o, o.dev)
        dev_ds = make_classification_dataset(preprocessor, dev_texts, dev_pairs,
                                             _label_ids(o.dev, dev_raw, labels, regression), o.eval_batch_size)
    return train_ds, dev_ds


def plan_epochs(out, family, options_cls, options, overrides, what):
    """What a classification job knows before :func:`open_run`: ``(the training examples (texts, pairs, labels),
    the steps of options.epochs epochs, overrides)``; with neither steps nor time_budget, ``overrides`` gain
    ``steps`` = those steps. (Shared with :mod:`kerasplm.jobs.gpt_finetune`.)"""
    run = RunDir(out)
    stored = run.read_config(family=family, what=what)["options"] if run.exists() else None
    planned_options, _ = resolve_options(options_cls, options, overrides, stored=stored, where=out)
    if planned_options.train is None:
        raise ValueError("give the training file (train / --train)")
    examples = _read(planned_options, planned_options.train, planned_options.max_examples)
    planned = max(1, math.ceil(planned_options.epochs * len(examples[0]) / planned_options.batch_size))
    overrides = dict(overrides)
    if planned_options.steps is None and planned_options.time_budget is None:
        overrides["steps"] = planned
    return examples, planned, overrides


def fit_and_score(run, trainer, previous_history, train_ds, o, schedule, planned, labels, pair_input, dev_ds,
                  regression, num_labels, log):
    """A classification job's end: fit under ``schedule`` (fitted to the time budget when ``o.schedule_steps`` is
    None, ``planned`` steps at most), score ``dev_ds`` (accuracy/F1/MCC, or MSE/Pearson), write metrics.json;
    returns the summary with "classifier" = the trained model (``labels``, ``pair_input`` set on it)."""
    history, train_seconds = fit_scheduled(run, trainer, previous_history, train_ds, o, schedule,
                                           log, most=planned, log_every=25)
    total_steps = schedule.total_steps
    log(f"trained to step {trainer.step} of {total_steps} planned ({trainer.stop_reason}) in {train_seconds:.0f}s")
    model = trainer.model
    model.labels, model.pair_input = labels, pair_input
    summary = training_summary(trainer, history, train_seconds)
    summary.update(planned_steps=total_steps, labels=labels)
    if trainer.stop_reason != "sigterm" and dev_ds is not None:
        t0 = time.time()
        summary["dev"] = _evaluate(model, dev_ds, regression, num_labels)
        summary["dev_seconds"] = round(time.time() - t0, 1)
        shown = ("mse", "pearson") if regression else ("accuracy", "f1", "mcc")
        log("dev " + " ".join(f"{k} {summary['dev'][k]:.4f}" for k in shown) + f" ({summary['dev']['examples']} examples)")
    if trainer.stop_reason != "sigterm":
        run.write_json(run.METRICS, summary)
    trainer.close()
    summary["classifier"] = model
    return summary
