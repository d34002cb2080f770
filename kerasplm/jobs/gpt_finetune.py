"""Fine-tune a GPT run as GPT-1 did (Radford et al. 2018, sections 3.2–3.3, 4.1): ``kerasplm finetune gpt-classifier``.

The recipe (paper section 4.1, "Fine-tuning details"; the seed ``001_*`` lists the same numbers): the pretrained
GPT's token embedding grows by three rows for ``start``/``delim``/``extract`` (:mod:`kerasplm.text.gpt_inputs`,
:func:`kerasplm.models.gpt_tasks.grow_token_embedding`); a linear layer on the extract token's hidden state with
dropout 0.1; loss = task cross-entropy + 0.5 · LM loss (eq. 5); learning rate 6.25e-5, batch 32, 3 epochs, linear
warmup over 0.2 % of training then linear decay to 0; weight decay 0.01 on all but biases and LayerNorm gains
(the BERT job's optimizer, :func:`kerasplm.jobs.bert_finetune.make_optimizer`, whose Adam ε is 1e-6 where GPT-1's
code used 1e-8).

``--init`` is a GPT run directory: one trained by ``kerasplm train gpt`` (SentencePiece) or converted by
``kerasplm convert gpt2`` (GPT-2's BPE); its tokenizer files are copied into the new run. ``--random-init`` keeps
its architecture and tokenizer but draws fresh weights: the baseline without pretraining.

Data, options and outputs are the BERT classifier job's (:mod:`kerasplm.jobs.bert_finetune`: the same TSV reader,
dev accuracy/F1/MCC in ``metrics.json``, resumable) with ``--task`` choosing GPT-1's input transformation:
``classification`` (``start text extract``), ``entailment`` (``start premise delim hypothesis extract``, needs
``--pair-col``) or ``similarity`` (both orders, the two extract states added; needs ``--pair-col``). Multiple choice
(:class:`kerasplm.models.gpt_tasks.GPTClassifier` with ``task_type="multiple_choice"``) needs a variable number of
answers per example and is not a TSV job.

Run directory: family ``gpt_classifier``; ``model`` = the grown backbone's config, ``num_labels``, ``labels``,
``dropout``, ``task_type``, ``lm_weight``, ``special_ids``; the tokenizer assets of the init run.

>>> summary = finetune_gpt_classifier("runs/sst2-gpt", train="sst2/train.tsv", dev="sst2/dev.tsv", init="runs/gpt")
>>> summary["dev"]["accuracy"]
"""
import dataclasses
import os
import shutil

import keras

from kerasplm.models.gpt import GPTBackbone, GPTConfig, load_gpt_from_run
from kerasplm.models.gpt_tasks import GPTClassifier, grow_token_embedding
from kerasplm.jobs.bert_finetune import (classification_datasets, fine_tuning_schedule, fit_and_score,
                                          make_optimizer, plan_epochs, plan_schedule)
from kerasplm.families.gpt import GPTClassifierOptions
from kerasplm.jobs.job import open_run, restores_global_policy
from kerasplm.jobs.language_model import load_run_tokenizer
from kerasplm.options import RUN
from kerasplm.runs import RunDir
from kerasplm.text.gpt_inputs import GPTClassifierPreprocessor, special_token_ids
from kerasplm.training import Trainer

FAMILY = "gpt_classifier"
WHAT = "GPT classifier"


def _model_parts(run, config):
    """``(GPTConfig, labels, model section)`` of a stored run (one-line error naming config.json)."""
    model = config["model"]
    missing = [key for key in ("backbone", "labels", "num_labels", "dropout", "task_type", "lm_weight", "special_ids")
               if key not in model]
    try:
        if missing:
            raise KeyError(", ".join(missing))
        backbone_config = GPTConfig(**model["backbone"]).validate()
    except (KeyError, TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"'model' is not a GPT classifier config ({e})") from None
    return backbone_config, list(model["labels"]), model


def _start_run(run, o, raw_labels, log):
    """A fresh run: the init run's tokenizer files, the grown backbone (pretrained or fresh weights), config.json.
    Returns ``(options with max_length set, config, backbone, tokenizer)``."""
    if o.init is None:
        raise ValueError("give the GPT run to start from (init / --init; with random_init / --random-init only its "
                         "architecture and tokenizer are used)")
    init_run = RunDir(o.init)
    init_config = init_run.read_config(family="gpt", what="GPT")
    tokenizer = load_run_tokenizer(init_run, init_config)   # a clear error for a run without one
    keras.utils.set_random_seed(o.seed)
    pretrained = load_gpt_from_run(init_run, init_config).backbone
    positions = pretrained.config.max_positions
    o = o.replace(max_length=o.max_length or min(128, positions))
    if o.max_length > positions:
        raise ValueError(f"max_length={o.max_length} exceeds the model's {positions} positions")
    special_ids = special_token_ids(pretrained.config.vocab_size)
    backbone = grow_token_embedding(pretrained)
    if o.random_init:
        backbone = GPTBackbone.from_config_object(backbone.config, name=backbone.name)
    labels = sorted(set(raw_labels))
    if len(labels) < 2:
        raise ValueError(f"{o.train}: one label only ({labels[0]!r}); a classifier needs at least two")
    os.makedirs(run.path, exist_ok=True)
    assets = dict(init_config["assets"])
    for key in assets:
        shutil.copyfile(init_run.asset(init_config, key), run.file(assets[key]))
    model = {"backbone": dataclasses.asdict(backbone.config), "num_labels": len(labels), "labels": labels,
             "dropout": o.dropout, "task_type": o.task, "lm_weight": o.lm_weight, "special_ids": special_ids}
    config = run.write_config(FAMILY, o.task, init_config.get("preset", "custom"), model, o.stored(RUN), assets=assets)
    log(f"started from {o.init} ({'fresh weights' if o.random_init else 'pretrained'}; {tokenizer.vocab_size} "
        f"tokens + start/delim/extract at ids {special_ids['start']}..{special_ids['extract']})")
    return o, config, backbone, tokenizer


@restores_global_policy
def finetune_gpt_classifier(out, options=None, log=print, **overrides):
    """Fine-tune (or resume) a GPT-1-style classifier in run directory ``out``; score ``dev``; returns the summary.

    ``options``: a :class:`GPTClassifierOptions`; keyword ``overrides`` replace single options. Without ``steps``
    and ``time_budget`` it trains ``epochs`` epochs. The summary (also ``metrics.json``) has the training figures
    (the "loss" is L_3 = task + λ·LM, "loss_task"/"loss_lm" its terms) and ``dev`` (accuracy, F1, MCC);
    "classifier" is the trained :class:`GPTClassifier`.
    """
    examples, planned, overrides = plan_epochs(out, FAMILY, GPTClassifierOptions, options, overrides, WHAT)
    run, o, config, previous_history = open_run(out, FAMILY, GPTClassifierOptions, options, overrides, what=WHAT,
                                                check_config=_model_parts)
    o = plan_schedule(o, resumed=config is not None, legacy_steps=max(planned, o.steps or 0))
    if config is None:
        o, config, backbone, tokenizer = _start_run(run, o, examples[2], log)
    else:
        log(f"resuming run in {out}")
        backbone = GPTBackbone.from_config_object(_model_parts(run, config)[0])   # weights: the run's checkpoint
        tokenizer = load_run_tokenizer(run, config)
    _, labels, model = _model_parts(run, config)
    preprocessor = GPTClassifierPreprocessor(tokenizer, model["special_ids"], o.max_length, o.task)
    train_ds, dev_ds = classification_datasets(o, preprocessor, examples, labels, False, log)
    schedule = fine_tuning_schedule(o, o.schedule_steps)
    trainer = Trainer(
        model=lambda: GPTClassifier(backbone, len(labels), task_type=o.task, dropout=o.dropout,
                                    lm_weight=o.lm_weight, preprocessor=preprocessor),
        optimizer=lambda: make_optimizer(o, schedule, backbone.config.num_layers),
        compute_loss=GPTClassifier.trainer_loss, jit_compile=o.jit_compile, clip_norm=1.0,
        checkpoint_dir=run.checkpoint_dir, checkpoint_every=500, log_dir=run.log_dir, seed=o.seed, verbose=o.verbose)
    return fit_and_score(run, trainer, previous_history, train_ds, o, schedule, planned, labels,
                         o.pair_col is not None, dev_ds, False, len(labels), log)


def load_gpt_classifier_run(run, config):
    """The loader of family ``gpt_classifier``: a :class:`GPTClassifier` with its checkpoint restored, its
    ``preprocessor`` (strings -> inputs), ``labels`` (class names) and ``pair_input``."""
    backbone_config, labels, model = _model_parts(run, config)
    options = config["options"]
    preprocessor = GPTClassifierPreprocessor(load_run_tokenizer(run, config), model["special_ids"],
                                             int(options.get("max_length") or 128), model["task_type"])
    classifier = GPTClassifier(GPTBackbone.from_config_object(backbone_config), int(model["num_labels"]),
                               task_type=model["task_type"], dropout=float(model["dropout"]),
                               lm_weight=float(model["lm_weight"]), preprocessor=preprocessor)
    run.restore(model=classifier)
    classifier.labels, classifier.pair_input = labels, preprocessor.pair_input
    return classifier


def load_gpt_classifier(run_dir):
    run = RunDir(run_dir)
    return load_gpt_classifier_run(run, run.read_config(family=FAMILY, what=WHAT))
