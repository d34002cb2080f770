"""Pretrain BERT from raw text: the ``kerasplm train bert`` job (:class:`BertPretrainingJob`).

Corpus -> documents (:func:`kerasplm.data.pretraining.read_documents`) -> held-out documents split off
(or ``dev_corpus``) -> WordPiece vocabulary (``vocab`` file, or learned with tensorflow-text:
``vocab_size``; [PAD] [UNK] [CLS] [SEP] [MASK] first) -> NSP / SOP / single-segment instances -> masked
batches in the ``tf.data`` graph -> :class:`kerasplm.models.bert.pretrainer.BertPretrainer` trained by the
:class:`kerasplm.training.Trainer` with AdamW (weight decay 0.01 except LayerNorm and biases, ε = 1e-6) and
BERT's warmup + linear decay (:class:`kerasplm.training.WarmupLinearDecay`).

The run directory is a ``bert`` run (family of :mod:`kerasplm.models.bert.convert`) with task ``"pretraining"`` and the
vocabulary asset ``vocab`` = ``vocab.txt``. config.json's ``model`` is the :class:`BertPretrainer` (its backbone,
``sentence_task``) and ``preprocessor`` a :class:`kerasplm.text.BertPreprocessor` over the tokenizer the corpus
was tokenized with; its checkpoints hold the whole pretrainer (``model``, whose ``backbone`` is the encoder), so
``load_run(run)`` gives the pretrainer (fill-mask) and ``load_run(run).backbone`` the encoder. ``metrics.json``
holds the held-out MLM accuracy, NSP/SOP accuracy and MLM perplexity = exp(mean held-out MLM loss).

>>> summary = train_bert("runs/bert", corpus="../shared/data/wikitext2/wiki.valid.tokens",
...                      dev_corpus="../shared/data/wikitext2/wiki.test.tokens", steps=2000)
"""
import math
import time

from kerasplm.data.pretraining import (BERT_SPECIAL_TOKENS, create_instances, make_pretraining_dataset,
                                       masker_for_tokenizer, read_documents, tokenize_documents)
from kerasplm.models.bert.manifest import BertPretrainingOptions
from kerasplm.jobs.job import Job
from kerasplm.models.bert.backbone import RUN_FAMILY, BertBackbone, bert_run_preprocessor
from kerasplm.models.bert.pretrainer import PRETRAINING_TASK, BertPretrainer
from kerasplm.models.presets import get_preset
from kerasplm.runs.serialization import attach_preprocessor
from kerasplm.text import WordPieceTokenizer, build_wordpiece_vocab, read_vocab
from kerasplm.training import WarmupLinearDecay
from kerasplm.training.optimizers import FusedAdamW

__all__ = ["BertPretrainingJob", "BertPretrainingOptions", "train_bert"]

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
    optimizer = FusedAdamW(schedule, weight_decay=o.weight_decay, beta_1=0.9, beta_2=0.999, epsilon=1e-6)
    optimizer.exclude_from_weight_decay(var_names=NO_DECAY)
    return optimizer


class BertPretrainingJob(Job):
    """``kerasplm train bert``: MLM + NSP/SOP on a plain-text corpus; held-out MLM accuracy and perplexity."""

    family, task, options_class, what, result_key = (RUN_FAMILY, TASK, BertPretrainingOptions, "BERT pretraining",
                                                     "pretrainer")
    checkpoint_every = 1000

    def check_config(self, run, config):
        if config.get("task") != self.task:
            raise run.error(run.CONFIG, f"task {config.get('task')!r}: {self.out} is not a {self.what} run")

    def build_data(self):
        o, run, t0 = self.options, self.run_dir, time.time()
        if o.corpus is None:
            raise ValueError("option corpus: give the text to pretrain on (--corpus PATH)")
        train_docs, dev_docs = _documents(o, self.log)
        if self.resumed:
            # Read here, outside the strategy's scope (its tokenizer's string tables cannot be made collective); the
            # base rebuilds the model to train under the scope, with this preprocessor.
            stored = self.stored_model()
            self.model_config = stored.backbone.config
            self.preprocessor = stored.preprocessor
            self.tokenizer = self.preprocessor.tokenizer
        else:
            if o.vocab:
                vocab = read_vocab(o.vocab)
            else:
                sentences = [s.replace(o.span_separator, " ") if o.span_separator else s
                             for d in train_docs for s in d]
                vocab = build_wordpiece_vocab(sentences, vocab_size=o.vocab_size, reserved_tokens=BERT_SPECIAL_TOKENS)
            # The run's vocabulary file; a multi-worker job's other workers write nothing (a temporary copy).
            run.write_text(ASSETS["vocab"], "".join(token + "\n" for token in vocab))
            self.tokenizer = WordPieceTokenizer(run.file(ASSETS["vocab"]) if run.writer else vocab)
            self.model_config = get_preset(o.preset, vocab_size=self.tokenizer.vocab_size, **self.preset_overrides())
            if self.model_config.max_positions < o.max_seq_length:
                raise ValueError(f"max_seq_length={o.max_seq_length} exceeds preset {o.preset}'s "
                                 f"{self.model_config.max_positions} positions")
            if o.schedule_steps is None:
                if o.steps is None:
                    raise ValueError("give schedule_steps (--schedule-steps) when training by time budget only: "
                                     "the learning rate decays linearly over it")
                self.options = o = o.replace(schedule_steps=o.steps)
            # What the run stores with the model: the corpus' tokenizer, packed for the backbone's inputs.
            self.preprocessor = bert_run_preprocessor(self.tokenizer, self.model_config)
        masker = masker_for_tokenizer(self.tokenizer, max_seq_length=o.max_seq_length,
                                      max_predictions_per_seq=o.max_predictions_per_seq, mask_rate=o.mask_rate,
                                      masking=o.masking, max_ngram=o.max_ngram)
        instances = {name: create_instances(tokenize_documents(docs, self.tokenizer, span_separator=o.span_separator),
                                            o.max_seq_length, o.sentence_task, o.short_seq_prob, seed=o.seed + i)
                     for i, (name, docs) in enumerate((("train", train_docs), ("dev", dev_docs)))}
        self.log(f"data: {len(instances['train'])} training and {len(instances['dev'])} held-out instances, "
                 f"vocabulary {self.tokenizer.vocab_size}; {time.time() - t0:.1f}s")
        self.train_dataset = make_pretraining_dataset(instances["train"], masker, o.batch_size, seed=o.seed,
                                                      dynamic_masking=not o.static_masking)
        self.eval_dataset = make_pretraining_dataset(instances["dev"], masker, o.batch_size, seed=o.seed + 1,
                                                     shuffle=False, repeat=False, dynamic_masking=False)
        if not self.resumed:  # the run is valid: from now on this directory holds a run to resume
            self.write_config(o.preset, assets=ASSETS)

    def preset_overrides(self):
        """The preset's fields a new run's options replace (``--dropout``)."""
        o = self.options
        return {} if o.dropout is None else {"dropout": o.dropout, "attention_dropout": o.dropout}

    def reported_metrics(self):
        """The held-out metrics the summary and ``metrics.json`` report (as ``eval_<name>``)."""
        task = self.options.sentence_task
        return ("mlm_loss", "mlm_accuracy", f"{task}_loss", f"{task}_accuracy")

    def build_model(self):
        model = BertPretrainer(BertBackbone.from_config_object(self.model_config),
                               sentence_task=self.options.sentence_task, name=self.config["preset"])
        return attach_preprocessor(model, self.preprocessor)

    def build_optimizer(self):
        return _optimizer(self.options, self.options.schedule_steps)

    def evaluate(self, trainer, summary):
        o, history = self.options, trainer.history
        if history.get("eval_step") and history["eval_step"][-1] == trainer.step:   # fit evaluated at its end
            metrics = {key[len("eval_"):]: values[-1] for key, values in history.items() if key.startswith("eval_")}
        else:   # this session trained no step: evaluate the run as it stands
            metrics = trainer.evaluate(self.eval_dataset)
        for key in self.reported_metrics():
            if key in metrics:
                summary[f"eval_{key}"] = metrics[key]
        summary["eval_mlm_perplexity"] = math.exp(min(summary["eval_mlm_loss"], 700.0))
        summary["train_tokens_per_second"] = round(summary["steps_this_run"] * o.batch_size * o.max_seq_length
                                                   / max(summary["train_seconds"], 1e-9))

    def describe(self, summary):
        o = self.options
        super().describe(summary)
        self.log(f"held-out MLM accuracy {summary['eval_mlm_accuracy']:.4f}, perplexity "
                 f"{summary['eval_mlm_perplexity']:.2f}" + (f", {o.sentence_task.upper()} accuracy "
                                                           f"{summary[f'eval_{o.sentence_task}_accuracy']:.4f}"
                                                           if o.sentence_task != "none" else ""))

    def run(self):
        summary = super().run()
        summary["tokenizer"] = self.tokenizer
        return summary


def train_bert(out, options=None, log=print, **overrides):
    """Pretrain (or resume) a BERT in run directory ``out``; returns a summary dict (also metrics.json, without
    the objects) whose ``"pretrainer"`` and ``"tokenizer"`` are the trained model and its tokenizer.

    ``options``: :class:`BertPretrainingOptions`; keyword ``overrides`` replace single options. Stops at
    ``steps`` (absolute), after ``time_budget`` seconds or on SIGTERM; a resumed run continues with its stored
    RUN options (a different one raises :class:`kerasplm.options.OptionsConflict`).
    """
    return BertPretrainingJob(out, options, log, **overrides).run()
