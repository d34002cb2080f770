"""Pretrain BERT from raw text: the ``kerasplm train bert`` job.

Corpus -> documents (:func:`kerasplm.data.pretraining.read_documents`) -> held-out documents split off
(or ``dev_corpus``) -> WordPiece vocabulary (``vocab`` file, or learned with tensorflow-text:
``vocab_size``; [PAD] [UNK] [CLS] [SEP] [MASK] first) -> NSP / SOP / single-segment instances -> masked
batches in the ``tf.data`` graph -> :class:`kerasplm.models.bert_pretraining.BertPretrainer` trained by the
:class:`kerasplm.training.Trainer` with AdamW (weight decay 0.01 except LayerNorm and biases, ε = 1e-6) and
BERT's warmup + linear decay (:class:`kerasplm.training.WarmupLinearDecay`).

The run directory is a ``bert`` run (family of :mod:`kerasplm.convert.bert`) with task ``"pretraining"``, the
vocabulary asset ``vocab`` = ``vocab.txt`` and ``options.sentence_task``. Its checkpoints hold the whole
pretrainer (``model`` = the :class:`BertPretrainer`, whose ``backbone`` is the encoder), so
``load_run(run)`` (the family's loader) returns the backbone restored from ``model/backbone`` and
:func:`load_bert_pretrainer` the whole pretrainer (fill-mask). ``metrics.json`` holds the held-out MLM
accuracy, NSP/SOP accuracy and MLM perplexity = exp(mean held-out MLM loss).

>>> summary = train_bert("runs/bert", corpus="../shared/data/wikitext2/wiki.valid.tokens",
...                      dev_corpus="../shared/data/wikitext2/wiki.test.tokens", steps=2000)
"""
import dataclasses
import math
import os
import time

from kerasplm.data.pretraining import (BERT_SPECIAL_TOKENS, create_instances, make_pretraining_dataset, masker_for_tokenizer,
                                       read_documents, tokenize_documents)
from kerasplm.models.bert import BertBackbone
from kerasplm.models.bert_pretraining import BertPretrainer
from kerasplm.models.bert_runs import (PRETRAINING_TASK, RUN_FAMILY, bert_model_config, bert_vocab_file)
from kerasplm.models.presets import get_preset
from kerasplm.families.bert import BertPretrainingOptions
from kerasplm.jobs.job import fit_recorded, open_run, restores_global_policy, training_summary
from kerasplm.options import RUN
from kerasplm.text import WordPieceTokenizer, build_wordpiece_vocab, read_vocab, write_vocab
from kerasplm.training import Trainer, WarmupLinearDecay
from kerasplm.training.optimizers import FusedAdamW

TASK = PRETRAINING_TASK
ASSETS = {"vocab": "vocab.txt"}
# AdamW's decay skips these variables (BERT's exclusion of LayerNorm and biases; Keras names: gamma/beta/bias).
NO_DECAY = ["gamma", "beta", "bias"]


def _documents(o, log):
    """Training and held-out documents (lists of sentence strings)."""
    documents = read_documents(o.corpus, o.corpus_format)
    if o.dev_corpus:
        return documents, read_documents(o.dev_corpus, o.corpus_format)
    # NSP's random next segments need 2 documents on each side.
    held = o.dev_documents or max(2 if o.sentence_task == "nsp" else 1, len(documents) // 20)
    if held >= len(documents):
        raise ValueError(f"{o.corpus}: {len(documents)} document(s); holding {held} out leaves none to train on "
                         f"(give more documents, a smaller dev_documents or a dev_corpus)")
    log(f"holding out the last {held} of {len(documents)} documents for evaluation")
    return documents[:-held], documents[-held:]


def _optimizer(o, schedule_steps):
    warmup = o.warmup_steps if o.warmup_steps is not None else schedule_steps // 10
    schedule = WarmupLinearDecay(o.learning_rate, min(warmup, schedule_steps), schedule_steps)
    optimizer = FusedAdamW(schedule, weight_decay=o.weight_decay, beta_1=0.9, beta_2=0.999,
                                       epsilon=1e-6)
    optimizer.exclude_from_weight_decay(var_names=NO_DECAY)
    return optimizer


@restores_global_policy
def train_bert(out, options=None, log=print, **overrides):
    """Pretrain (or resume) a BERT in run directory ``out``; returns a summary dict (also metrics.json, without
    the objects) whose ``"pretrainer"`` and ``"tokenizer"`` are the trained model and its tokenizer.

    ``options``: :class:`BertPretrainingOptions`; keyword ``overrides`` replace single options. Stops at
    ``steps`` (absolute), after ``time_budget`` seconds or on SIGTERM; a resumed run continues with its stored
    RUN options (a different one raises :class:`kerasplm.options.OptionsConflict`).
    """
    run, o, config, previous_history = open_run(out, RUN_FAMILY, BertPretrainingOptions, options, overrides,
                                                what="BERT pretraining", check_config=bert_model_config)
    if o.corpus is None:
        raise ValueError("option corpus: give the text to pretrain on (--corpus PATH)")
    if config is not None and config.get("task") != TASK:
        raise run.error(run.CONFIG, f"task {config.get('task')!r}: {out} is not a pretraining run")
    t0 = time.time()
    train_docs, dev_docs = _documents(o, log)
    vocab_path = run.file(ASSETS["vocab"])
    if config is not None:
        log(f"resuming run in {out} (preset {config['preset']})")
        model_config = bert_model_config(run, config)
        vocab_path = bert_vocab_file(run, config, model_config)
    else:
        os.makedirs(out, exist_ok=True)
        if o.vocab:
            write_vocab(read_vocab(o.vocab), vocab_path)
        else:
            sentences = [s.replace(o.span_separator, " ") if o.span_separator else s for d in train_docs for s in d]
            write_vocab(build_wordpiece_vocab(sentences, vocab_size=o.vocab_size,
                                              reserved_tokens=BERT_SPECIAL_TOKENS), vocab_path)
    tokenizer = WordPieceTokenizer(vocab_path)
    if config is None:
        model_config = get_preset(o.preset, vocab_size=tokenizer.vocab_size)
        if model_config.max_positions < o.max_seq_length:
            raise ValueError(f"max_seq_length={o.max_seq_length} exceeds preset {o.preset}'s "
                             f"{model_config.max_positions} positions")
        if o.schedule_steps is None:
            if o.steps is None:
                raise ValueError("give schedule_steps (--schedule-steps) when training by time budget only: "
                                 "the learning rate decays linearly over it")
            o = dataclasses.replace(o, schedule_steps=o.steps)
    masker = masker_for_tokenizer(tokenizer, max_seq_length=o.max_seq_length,
                                  max_predictions_per_seq=o.max_predictions_per_seq, mask_rate=o.mask_rate,
                                  masking=o.masking, max_ngram=o.max_ngram)
    instances = {name: create_instances(tokenize_documents(docs, tokenizer, span_separator=o.span_separator),
                                        o.max_seq_length, o.sentence_task, o.short_seq_prob, seed=o.seed + i)
                 for i, (name, docs) in enumerate((("train", train_docs), ("dev", dev_docs)))}
    log(f"data: {len(instances['train'])} training and {len(instances['dev'])} held-out instances, "
        f"vocabulary {tokenizer.vocab_size}; {time.time() - t0:.1f}s")
    train_ds = make_pretraining_dataset(instances["train"], masker, o.batch_size, seed=o.seed,
                                        dynamic_masking=not o.static_masking)
    dev_ds = make_pretraining_dataset(instances["dev"], masker, o.batch_size, seed=o.seed + 1, shuffle=False,
                                      repeat=False, dynamic_masking=False)
    if config is None:  # the run is valid: from now on this directory holds a run to resume
        config = run.write_config(RUN_FAMILY, TASK, o.preset, dataclasses.asdict(model_config), o.stored(RUN),
                                  assets=ASSETS)
    trainer = Trainer(
        model=lambda: BertPretrainer(BertBackbone.from_config_object(model_config),
                                     sentence_task=o.sentence_task, name=config["preset"]),
        optimizer=lambda: _optimizer(o, o.schedule_steps), compute_loss=BertPretrainer.trainer_loss,
        jit_compile=o.jit_compile, checkpoint_dir=run.checkpoint_dir, checkpoint_every=1000,
        log_dir=run.log_dir, seed=o.seed, verbose=o.verbose)
    history, train_seconds = fit_recorded(run, trainer, previous_history, train_ds, o, eval_dataset=dev_ds)
    log(f"trained to step {trainer.step} ({trainer.stop_reason}) in {train_seconds:.0f}s")
    summary = training_summary(trainer, history, train_seconds)
    if trainer.stop_reason != "sigterm" and history.get("eval_step"):
        for key in ("mlm_loss", "mlm_accuracy", f"{o.sentence_task}_loss", f"{o.sentence_task}_accuracy"):
            if history.get(f"eval_{key}"):
                summary[f"eval_{key}"] = history[f"eval_{key}"][-1]
        summary["eval_mlm_perplexity"] = math.exp(min(summary["eval_mlm_loss"], 700.0))
        summary["train_tokens_per_second"] = round(
            (trainer.step - trainer.start_step) * o.batch_size * o.max_seq_length / max(train_seconds, 1e-9))
        run.write_json(run.METRICS, summary)
        log(f"held-out MLM accuracy {summary['eval_mlm_accuracy']:.4f}, perplexity "
            f"{summary['eval_mlm_perplexity']:.2f}" + (f", {o.sentence_task.upper()} accuracy "
                                                      f"{summary[f'eval_{o.sentence_task}_accuracy']:.4f}"
                                                      if o.sentence_task != "none" else ""))
    trainer.close()
    return {**summary, "pretrainer": trainer.model, "tokenizer": tokenizer}
