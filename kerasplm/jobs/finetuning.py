"""The fine-tuning rail every family's ``kerasplm finetune ...`` job stands on.

:class:`FineTuningJob` is the :class:`kerasplm.jobs.job.Job` of a job that starts from a pretrained run (``--init``)
and scores held-out data once trained; :class:`ClassificationJob` adds tab-separated (text[, pair], label) files.
What they hold, so that a family's job module holds only its family's specifics:

* **epochs → steps** (:meth:`FineTuningJob.plan`): a job whose options have ``epochs`` reads its training data
  before the run opens (:meth:`FineTuningJob.read_examples`) and counts the steps of ``epochs`` epochs: the run's
  length when neither ``steps`` nor ``time_budget`` is given, and the longest schedule a time budget alone may be
  fitted to (``most_steps``);
* **the schedule** (options with ``schedule_steps``): BERT's linear warmup over ``warmup_fraction`` of the steps and
  linear decay to 0, or with ``--schedule stlr`` ULMFiT's slanted triangular rates (:func:`fine_tuning_schedule`;
  the options of :class:`kerasplm.options.FineTuningOptions`) over ``schedule_steps``, which is ``steps`` for a new
  run, the recorded length on a resume (:meth:`FineTuningJob.plan_schedule`), or, for a new run given
  ``time_budget`` alone, fitted to the budget by :func:`kerasplm.jobs.job.fit_scheduled` and recorded then;
* **the optimizer** (:func:`make_optimizer`): AdamW, ε 1e-6, weight decay not on biases and LayerNorm, optional
  layer-wise learning-rate decay (``--layer-decay``, ELECTRA's) or ULMFiT's discriminative rates
  (``--discriminative-lr 2.6``): :class:`kerasplm.training.optimizers.LayerwiseAdamW` over layer groups (BERT's
  depths: :func:`bert_layer_group`; a family may give its own);
  clip 1, a checkpoint every 500 steps, the loss logged every 25;
* **the pretrained backbone**: :meth:`copy_init_assets` (the ``--init`` run's tokenizer files into the new run),
  :meth:`starting_backbone` / :meth:`with_starting_weights` (the model on the pretrained backbone for a new run;
  a resume restores its checkpoint). A family reads its own init run: BERT's jobs stand on
  :mod:`kerasplm.models.bert.finetuning` (``start_from_bert``), GPT's, ELMo's and ULMFiT's read theirs;
* **scoring**: :meth:`FineTuningJob.score` (the family's held-out figures) and :meth:`dev_report` (their log
  line), timed and added to the summary, ``planned_steps`` (the schedule's length), the closing report
  ("trained to step S of T planned ...", then the dev line).

A fine-tuning job's hooks, beyond :class:`Job`'s: ``read_examples(options)`` (the training data; returns the
number of examples an epoch holds), ``build_data`` (call ``super().build_data()`` first: it reads the data and
makes the schedule; then the family's init run or resumed config, ``self.backbone_config`` and, for a new run,
``self.init_backbone``), ``build_model`` (through :meth:`starting_backbone` or :meth:`with_starting_weights`),
``score``, ``dev_report``.

The classification-data helpers (:func:`read_classification_tsv`, :func:`label_ids`,
:func:`make_classification_dataset`, :func:`classification_scores`) serve :class:`ClassificationJob` and any other
user of such files.

This module imports no family (``kerasplm.models.<family>``): families build on it.
"""
import math
import os
import shutil
import time

import numpy as np
import keras
import tensorflow as tf

from kerasplm.jobs.job import Job, provisional_total_steps
from kerasplm.options import DEFAULT_LENGTH_BUCKET, DEFAULT_SORTISH, resolve_options
from kerasplm.runs import RunDir
from kerasplm.text.preprocessing import trim_to_bucket
from kerasplm.training import BudgetSchedule, SlantedTriangular
from kerasplm.training.metrics import classification_metrics
# LayerwiseAdamW lives with the optimizers; importable from here as before.
from kerasplm.training.optimizers import (FusedAdamW, LayerwiseAdamW, discriminative_decay,  # noqa: F401
                                          layer_group_multiplier)

__all__ = ["FineTuningJob", "ClassificationJob", "LayerwiseAdamW", "bert_layer_group",
           "classification_scores", "layerwise_decay",
           "fine_tuning_schedule", "cut_padding", "label_ids", "layer_decay_multiplier", "make_classification_dataset",
           "make_optimizer", "read_classification_tsv", "token_lengths"]

# The schedule length of a resumed run recorded before ``schedule_steps`` existed, when it gives no steps either.
LEGACY_SCHEDULE_STEPS = 1000


# ------------------------------------------------------------------------------------------------ classification data
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


def label_ids(path, labels, names, regression):
    """The labels of file ``path`` as model targets: indices into the class ``names`` (int64), or numbers
    (float32) for regression; one-line errors name the file."""
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


def make_classification_dataset(preprocessor, texts, pairs, labels, batch_size, shuffle=False, seed=0, repeat=False,
                                length_bucket=0, sortish=0, lengths=None):
    """``((inputs dict, labels), ...)`` batches: strings packed by ``preprocessor`` in the tf.data graph.

    Training batches (``shuffle``/``repeat``) all have ``batch_size`` rows (one traced step); a seeded shuffle
    replays the same order in every process, as the Trainer's exact resume needs. ``length_bucket`` > 0 cuts each
    batch's padding to its longest example rounded up to a multiple of it (:func:`trim_to_bucket`), 0 keeps the
    preprocessor's fixed width. ``sortish`` > 0 (a repeated dataset; fastai's SortishSampler, the ULMFiT classifier's
    batching; HuggingFace's ``group_by_length``): each run of ``sortish`` batches' worth of shuffled examples is sorted
    by length and cut into batches, whose order within the run is then shuffled (seeded), so that a batch holds texts
    of similar length and a model that pads each batch to its longest row (``length_bucket``, an RNN's steps) runs few
    padded positions. The length is ``lengths[i]`` (one number per example, e.g. :func:`token_lengths`) or, without
    it, the UTF-8 bytes of the text and its pair.
    """
    columns = (tf.constant(texts, tf.string), tf.constant(pairs if pairs is not None else texts, tf.string),
               tf.constant(labels))
    if sortish:
        if lengths is None:
            lengths = tf.strings.length(columns[0]) + (tf.strings.length(columns[1]) if pairs is not None else 0)
        elif len(lengths) != len(texts):
            raise ValueError(f"lengths: {len(lengths)} numbers for {len(texts)} examples")
        columns += (tf.cast(lengths, tf.int64),)
    ds = tf.data.Dataset.from_tensor_slices(columns)
    if shuffle:
        ds = ds.shuffle(len(texts), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    if sortish:
        if not repeat:
            raise ValueError("sortish batches are for a repeated (training) dataset")
        ds = _sortish_batches(ds, batch_size, sortish, seed)
    else:
        ds = ds.batch(batch_size, drop_remainder=repeat)

    @tf.autograph.experimental.do_not_convert
    def encode(text, pair, label, *sort_key):
        return preprocessor(text, pair if pairs is not None else None), label

    return cut_padding(ds.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True), length_bucket
                       ).prefetch(2)


def _sortish_batches(examples, batch_size, window_batches, seed):
    """Batches of ``examples`` (an endless stream of ``(text, pair, label, length)``): each window of
    ``window_batches`` batches' worth sorted by length, cut into batches, and those batches put in an order drawn from
    ``(seed, window index)``."""
    window = batch_size * window_batches

    @tf.autograph.experimental.do_not_convert
    def sort_by_length(index, element):
        by_length = tf.argsort(element[-1], stable=True)
        draws = tf.random.stateless_uniform([window_batches], tf.stack([tf.constant(seed, tf.int64), index]))
        shuffled = tf.argsort(draws)
        order = tf.reshape(tf.gather(tf.reshape(by_length, [window_batches, batch_size]), shuffled), [window])
        return tuple(tf.gather(column, order) for column in element)

    windows = examples.batch(window, drop_remainder=True).enumerate().map(sort_by_length)
    return windows.rebatch(batch_size, drop_remainder=True)


def token_lengths(preprocessor, texts, pairs=None, chunk=1024):
    """Each example's length in ``preprocessor``'s tokens (its ``padding_mask`` summed over every axis but the batch's:
    special tokens included; a ``[B, K, L]`` input such as GPT-1's similarity, both orders of a pair, counts all K
    sequences, the positions the model runs): the sort key of sortish batches of a subword model."""
    lengths = []
    for start in range(0, len(texts), chunk):
        pair = None if pairs is None else tf.constant(pairs[start:start + chunk], tf.string)
        inputs = preprocessor(tf.constant(texts[start:start + chunk], tf.string), pair)
        mask = tf.cast(inputs["padding_mask"], tf.int64)
        lengths.append(tf.reduce_sum(tf.reshape(mask, [tf.shape(mask)[0], -1]), axis=-1).numpy())
    return np.concatenate(lengths) if lengths else np.zeros([0], np.int64)


def cut_padding(dataset, length_bucket, mask_key="padding_mask"):
    """``dataset`` (batches of an inputs dict, or of ``(inputs, labels)``) with every batch cut to its longest example
    rounded up to a multiple of ``length_bucket`` (:func:`~kerasplm.text.preprocessing.trim_to_bucket`, the mask
    ``inputs[mask_key]``); unchanged when ``length_bucket`` is 0 or None."""
    if not length_bucket:
        return dataset

    def cut(*element):
        inputs = element[0]
        return trim_to_bucket(element if len(element) > 1 else inputs, inputs[mask_key], length_bucket)

    return dataset.map(cut, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def classification_scores(model, dataset, regression, num_labels):
    """A classifier's figures over a whole labelled ``dataset`` (exact, not averaged over batches): accuracy, F1
    and MCC (:func:`kerasplm.training.metrics.classification_metrics`), or for regression MSE and Pearson's r."""
    predictions, targets = [], []
    for inputs, labels in dataset:
        logits = model(inputs, training=False).numpy()
        predictions.append(logits[:, 0] if regression else logits.argmax(-1))
        targets.append(labels.numpy())
    predictions, targets = np.concatenate(predictions), np.concatenate(targets)
    if not regression:
        return classification_metrics(targets, predictions, num_labels)
    pearson = float(np.corrcoef(predictions, targets)[0, 1]) if len(targets) > 1 else 0.0
    return {"mse": float(np.mean((predictions - targets) ** 2)), "pearson": pearson, "examples": int(len(targets))}


# ------------------------------------------------------------------------------------------------ optimization
def bert_layer_group(num_layers):
    """ELECTRA's depths of a BERT model's variables, by path ``<backbone>/<embeddings|blockN|pooler>/...``:
    embeddings 0, block ``i`` (1-based) ``i``, pooler and head ``L + 1`` (ALBERT's one shared "block": the top)."""
    def group(variable):
        parts = variable.path.split("/")
        part = parts[1] if len(parts) > 2 else ""
        if part == "embeddings":
            return 0
        if part.startswith("block"):
            return int(part[len("block"):] or num_layers)
        return num_layers + 1
    return group


def layer_decay_multiplier(num_layers, decay):
    """ELECTRA's layer-wise decay: a variable at depth ``d`` (:func:`bert_layer_group`) learns at
    ``decay^(L + 1 - d)`` times the base rate."""
    return layer_group_multiplier(bert_layer_group(num_layers), num_layers + 1, decay)


def fine_tuning_schedule(o, total_steps):
    """The fine-tuning schedule ``o.schedule`` asks for (options without one: ``linear``) peaking at
    ``o.learning_rate`` over ``total_steps`` (None: a provisional length, refitted once a run with a time budget only
    has timed its first steps; both schedules have ``set_total_steps``):

    * ``linear``, BERT's: linear warmup over ``o.warmup_fraction`` of the steps, then linear decay to 0
      (:class:`BudgetSchedule`);
    * ``stlr``, ULMFiT's slanted triangular rates (:class:`kerasplm.training.SlantedTriangular`, eq. 3): a rise over
      ``o.stlr_cut_frac`` of the steps, then a decay to ``learning_rate / o.stlr_ratio``.

    Options whose ``learning_rate`` is None (a family that settles its default from the model, such as the BERT
    classifier's) must be settled first: ValueError otherwise.
    """
    if o.learning_rate is None:
        raise ValueError("fine_tuning_schedule needs a peak learning rate: options.learning_rate is None (a default "
                         "the job settles from the model; pass learning_rate= when building the options by hand)")
    if getattr(o, "schedule", "linear") == "stlr":
        return SlantedTriangular(o.learning_rate, total_steps or provisional_total_steps(o.stlr_cut_frac),
                                 cut_frac=o.stlr_cut_frac, ratio=o.stlr_ratio)
    return BudgetSchedule(o.learning_rate, total_steps or provisional_total_steps(o.warmup_fraction),
                          warmup_fraction=o.warmup_fraction)


def layerwise_decay(o):
    """The per-layer-group decay the options ask for: ``o.layer_decay`` (ELECTRA's), or ``1 / o.discriminative_lr``
    (ULMFiT's η^(l-1) = η^l / factor); None when neither is on."""
    decay = getattr(o, "layer_decay", None)
    if getattr(o, "discriminative_lr", None) is not None:
        decay = discriminative_decay(o.discriminative_lr)
    return None if decay is None or decay == 1.0 else decay


def make_optimizer(o, schedule, num_layers, layer_group=None, top_group=None, **adam):
    """The fine-tuning optimizer (every BERT task, GPT-1's, ULMFiT's): AdamW, ε 1e-6 (unless ``adam`` says
    otherwise, e.g. ULMFiT's β1 0.7), weight decay ``o.weight_decay`` not on biases and LayerNorm, learning rate
    ``schedule`` (:func:`fine_tuning_schedule`), and with ``o.layer_decay`` or ``o.discriminative_lr``
    (:func:`layerwise_decay`) a rate per layer group: ``layer_group(variable)`` in ``[0, top_group]`` (default:
    BERT's depths over ``num_layers`` blocks, :func:`bert_layer_group`)."""
    kwargs = dict(learning_rate=schedule, weight_decay=o.weight_decay, epsilon=1e-6, **adam)
    decay = layerwise_decay(o)
    if decay is None:
        optimizer = FusedAdamW(**kwargs)
    else:
        if layer_group is None:
            layer_group, top_group = bert_layer_group(num_layers), num_layers + 1
        optimizer = LayerwiseAdamW(layer_group_multiplier(layer_group, top_group, decay), **kwargs)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer


# ------------------------------------------------------------------------------------------------ the jobs
class FineTuningJob(Job):
    """A :class:`Job` that fine-tunes a pretrained run and scores held-out data (see the module docstring)."""

    checkpoint_every = 500
    clip_norm = 1.0
    log_every = 25
    scoring_seconds_key = "dev_seconds"   # metrics.json's name for the time the held-out scoring took

    def __init__(self, out, options=None, log=print, **overrides):
        super().__init__(out, options, log, **overrides)
        self.planned_steps = None     # the steps of options.epochs epochs (jobs with an epochs option)
        self.init_backbone = None     # the backbone a new run starts from (pretrained, or fresh: --random-init)
        self.backbone_config = None   # the backbone's config (its depth: layer-wise learning-rate decay)
        self.dev_scores = None        # what score() added to the summary
        self._examples_read = False

    @property
    def builds_model_in_build_data(self):
        """The pretrained backbone is loaded in ``build_data``, under the strategy's scope so that its variables are
        the strategy's; but MultiWorkerMirroredStrategy's scope cannot hold the tokenizers loaded beside it (their
        string tables would be made collective, and no collective op takes strings). Under ``multi-worker``,
        ``build_data`` runs outside the scope and :meth:`starting_backbone` copies the loaded weights into a backbone
        built under it (in ``build_model``)."""
        return getattr(self.options, "distribute", "default") != "multi-worker"

    # ------------------------------------------------------------------ hooks of a fine-tuning job
    def read_examples(self, options):
        """Read the training data (keep what :meth:`build_data` needs); return the examples an epoch holds."""
        raise NotImplementedError

    def score(self, trained):
        """The held-out figures of ``trained`` (:meth:`result`) to add to the summary; None: nothing scored."""
        return None

    def dev_report(self, summary):
        """The log line of the figures :meth:`score` added to ``summary``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the rail
    def plan(self, options, overrides):
        """Options with ``epochs``: read the training data before the run opens and count the steps of ``epochs``
        epochs (``self.planned_steps``); without ``steps`` and ``time_budget`` the run trains that many."""
        if not hasattr(self.options_class, "epochs"):
            return overrides
        run = RunDir(self.out)
        stored = run.read_config(family=self.family, what=self.what)["options"] if run.exists() else None
        planned, _ = resolve_options(self.options_class, options, overrides, stored=stored, where=self.out)
        count = self.read_examples(planned)
        self._examples_read = True
        self.planned_steps = max(1, math.ceil(planned.epochs * count / planned.batch_size))
        if planned.steps is None and planned.time_budget is None:
            overrides = {**overrides, "steps": self.planned_steps}
        return overrides

    def plan_schedule(self, o):
        """``o`` with ``schedule_steps``, the steps the learning-rate schedule spans: ``o.steps`` for a new run (None
        for a new run given a time budget only: :func:`kerasplm.jobs.job.fit_scheduled` fits it to the budget),
        the recorded length on a resume; a run recorded before the option existed keeps the length it was trained
        with (its epochs' steps, or its steps)."""
        if o.schedule_steps is not None:
            return o
        if not self.resumed:
            return o.replace(schedule_steps=o.steps)
        return o.replace(schedule_steps=max(self.planned_steps or 0, o.steps or 0) or LEGACY_SCHEDULE_STEPS)

    def build_data(self):
        """The training data (unless :meth:`plan` read it) and, for options with ``schedule_steps``, the
        warmup/linear-decay schedule. A family's ``build_data`` calls this first."""
        if not self._examples_read:
            self.read_examples(self.options)
            self._examples_read = True
        # New runs cut their batches' padding; a run recorded before the option padded to --max-length and keeps
        # doing so (the dropout masks of a step depend on the batch's width: exact resume).
        self.settle_batching_option("length_bucket", DEFAULT_LENGTH_BUCKET)
        if hasattr(self.options, "schedule_steps"):
            self.options = self.plan_schedule(self.options)
            self.most_steps = self.planned_steps
            if self.options.learning_rate is not None:   # else the family settles it from its model, then builds it
                self.build_schedule()

    def build_schedule(self):
        """``self.schedule``: the options' warmup/linear-decay (or slanted triangular) schedule over their
        ``schedule_steps``."""
        self.schedule = fine_tuning_schedule(self.options, self.options.schedule_steps)

    def settle_batching_option(self, name, new_run_value):
        """Give option ``name``, when the options have it unset (None), its value: ``new_run_value`` for a new run,
        0 (off: the batching it was trained with) for a run recorded before the option existed."""
        if getattr(self.options, name, 0) is None:
            self.options = self.options.replace(**{name: 0 if self.resumed else new_run_value})

    def copy_init_assets(self, assets=None):
        """Copy the ``--init`` run's assets into the new run: ``assets`` = ``{key: file name in the new run}``
        (default: every asset, under its own name). Returns ``(assets, the init run's config)``."""
        init_run = RunDir(self.options.init)
        init_config = init_run.read_config()
        assets = dict(init_config["assets"] if assets is None else assets)
        if self.run_dir.writer:
            os.makedirs(self.out, exist_ok=True)
            for key, name in assets.items():
                shutil.copyfile(init_run.asset(init_config, key), self.run_dir.file(name))
        return assets, init_config

    def starting_backbone(self, backbone_class):
        """The backbone to build the model on: a new run's ``init_backbone`` itself, or on a resume a fresh
        ``backbone_class`` of the stored config (its weights come from the run's checkpoint)."""
        if self.init_backbone is None:
            return backbone_class.from_config_object(self.backbone_config)
        if self.builds_model_in_build_data:
            return self.init_backbone
        # Loaded outside the strategy's scope (multi-worker): the same backbone, its variables made under the scope.
        backbone = backbone_class.from_config_object(self.backbone_config, name=self.init_backbone.name)
        backbone.set_weights(self.init_backbone.get_weights())
        # The copy's random initial draws are overwritten: reseed (as the Trainer did just before build_model), so
        # that the head draws what it draws in one process.
        keras.utils.set_random_seed(self.options.seed)
        return backbone

    def with_starting_weights(self, model):
        """``model``, built whole by :meth:`build_model` (under the strategy's scope), with ``init_backbone``'s
        weights copied into its backbone when the run is new; a resumed run's weights come from its checkpoint.

        (The other way, :meth:`starting_backbone`, builds the model on the starting backbone object itself; the
        classifier, QA and GPT jobs use it, the tagger and SimCSE jobs this one: each keeps the random draws
        of its head and dropout, hence the results, of the runs it made before.)"""
        if self.init_backbone is not None:
            model.backbone.set_weights(self.init_backbone.get_weights())
        return model

    def build_optimizer(self):
        return make_optimizer(self.options, self.schedule, self.backbone_config.num_layers)

    def evaluate(self, trainer, summary):
        if self.schedule is not None:
            summary["planned_steps"] = self.schedule.total_steps
        started = time.time()
        self.dev_scores = self.score(self.result(trainer))
        if self.dev_scores:
            summary.update(self.dev_scores)
            summary[self.scoring_seconds_key] = round(time.time() - started, 1)

    def describe(self, summary):
        planned = f" of {summary['planned_steps']} planned" if "planned_steps" in summary else ""
        self.log(f"trained to step {summary['step']}{planned} ({summary['stop_reason']}) in "
                 f"{summary['train_seconds']:.0f}s")
        if self.dev_scores:
            self.log(self.dev_report(summary))


class ClassificationJob(FineTuningJob):
    """A fine-tuning job on tab-separated files: ``--text-col`` [``--pair-col``] ``--label-col`` by header name or
    0-based index, class names from the training file (sorted), ``--dev`` scored with accuracy/F1/MCC (MSE and
    Pearson's r for ``--task regression``); the summary's ``labels`` and ``dev``, and "classifier" the trained
    model (whose config holds ``labels`` and ``pair_input``).

    A family's ``build_data`` sets ``self.labels`` (:meth:`new_labels` for a new run; a resumed run's model
    has them) and ends with :meth:`classification_data` (its preprocessor); its ``build_model`` gives the classifier
    ``labels`` and ``pair_input`` (:attr:`pair_input`).
    """

    result_key = "classifier"
    # Sortish batches (the options' ``sortish``) sort by the preprocessor's tokens; False: by the texts' UTF-8 bytes.
    sortish_by_tokens = True

    def __init__(self, out, options=None, log=print, **overrides):
        super().__init__(out, options, log, **overrides)
        self.texts = self.pairs = self.raw_labels = None   # the training file's columns (read_examples)
        self.labels = self.preprocessor = self.dev_dataset = None

    def build_data(self):
        super().build_data()
        # New runs train on sortish batches; a run recorded before the option replays plain shuffled ones.
        self.settle_batching_option("sortish", DEFAULT_SORTISH)

    @property
    def regression(self):
        return getattr(self.options, "task", None) == "regression"

    def read_tsv(self, o, path, max_examples=None):
        return read_classification_tsv(path, o.text_col, o.label_col, getattr(o, "pair_col", None), o.header,
                                       max_examples)

    def read_examples(self, o):
        if o.train is None:
            raise ValueError("give the training file (train / --train)")
        self.texts, self.pairs, self.raw_labels = self.read_tsv(o, o.train, o.max_examples)
        return len(self.texts)

    def new_labels(self):
        """A new run's class names: the training file's labels, sorted (none for regression)."""
        if self.regression:
            return []
        labels = sorted(set(self.raw_labels))
        if len(labels) < 2:
            raise ValueError(f"{self.options.train}: one label only ({labels[0]!r}); a classifier needs at least two")
        return labels

    @property
    def num_labels(self):
        return 1 if self.regression else len(self.labels)

    @property
    def pair_input(self):
        """True when the examples are sentence pairs (a ``pair_col``)."""
        return self.pairs is not None

    def classification_data(self, preprocessor, details=None):
        """The training batches (seeded shuffle, repeated) and the ``--dev`` ones of ``preprocessor``'s inputs."""
        o = self.options
        self.preprocessor = preprocessor
        train_labels = label_ids(o.train, self.raw_labels, self.labels, self.regression)
        kind = "pairs" if self.pairs is not None else "single texts"
        classes = "regression" if self.regression else f"{len(self.labels)} labels: " + ", ".join(self.labels)
        bucket = getattr(o, "length_bucket", 0) or 0
        sortish = getattr(o, "sortish", 0) or 0
        shape = []
        if sortish:
            key = "tokens" if self.sortish_by_tokens else "UTF-8 bytes"
            shape.append(f"sortish batches (windows of {sortish} batches sorted by {key})")
        if bucket:
            shape.append(f"batches padded to their longest example, rounded up to a multiple of {bucket} tokens")
        details = "; ".join(([details] if details else []) + shape) or None
        self.log(f"data: {len(self.texts)} training examples ({kind}), {classes}" + (f"; {details}" if details else ""))
        texts, pairs = self.texts, self.pairs
        lengths = token_lengths(preprocessor, texts, pairs) if sortish and self.sortish_by_tokens else None

        def train_dataset():
            return make_classification_dataset(preprocessor, texts, pairs, train_labels, o.batch_size, shuffle=True,
                                               seed=o.seed, repeat=True, length_bucket=bucket, sortish=sortish,
                                               lengths=lengths)

        self.train_dataset = train_dataset
        if o.dev is not None:
            dev_texts, dev_pairs, dev_raw = self.read_tsv(o, o.dev)
            self.dev_dataset = make_classification_dataset(
                preprocessor, dev_texts, dev_pairs, label_ids(o.dev, dev_raw, self.labels, self.regression),
                o.eval_batch_size, length_bucket=bucket)

    def evaluate(self, trainer, summary):
        summary["labels"] = self.labels
        super().evaluate(trainer, summary)

    def score(self, model):
        if self.dev_dataset is None:
            return None
        return {"dev": classification_scores(model, self.dev_dataset, self.regression, self.num_labels)}

    def dev_report(self, summary):
        dev = summary["dev"]
        shown = ("mse", "pearson") if self.regression else ("accuracy", "f1", "mcc")
        return "dev " + " ".join(f"{k} {dev[k]:.4f}" for k in shown) + f" ({dev['examples']} examples)"

    def result(self, trainer):
        return trainer.model   # its labels and pair_input are constructor arguments, in its config
