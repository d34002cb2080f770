"""ULMFiT's three stages (Howard & Ruder 2018; seed ``002_*`` §3) as jobs on the fine-tuning rail.

1. ``kerasplm train ulmfit-lm`` (:func:`train_ulmfit_lm`): an AWD-LSTM language model (:mod:`kerasplm.models.ulmfit.awd_lstm`)
   on a general-domain corpus. The corpus' lines become ``words <eos>`` (:mod:`kerasplm.text.word_vocab`; the
   vocabulary is the corpus' words seen ``min_count`` times, ``max_vocab`` at most), the stream is cut into
   ``batch_size`` parallel streams read in variable-length BPTT windows (:mod:`kerasplm.data.lm_streams`), the
   recurrent state carried from window to window (zeroed at each epoch's start), and each window trained at the
   learning rate × ℓ / bptt (:class:`kerasplm.training.ScaledSchedule`). Held-out perplexity per word (the state
   carried through consecutive windows of ``bptt``) goes to ``metrics.json``.
2. ``kerasplm finetune ulmfit-lm --init RUN`` (:func:`finetune_ulmfit_lm`): the same on target-domain text, from the
   init run's weights and vocabulary, the vocabulary grown by the target text's words seen ``extend_vocab`` times
   that it lacks (their vectors and output biases start at the mean: :func:`grown_vocabulary_weights`), with
   discriminative learning rates (η^(l-1) = η^l / 2.6 over the model's layer groups) and slanted triangular rates
   by default, its preset's dropouts × ``drop_mult`` (each stage scales the preset's rates:
   :func:`fine_tuning_config`).
3. ``kerasplm finetune ulmfit-classifier --init RUN`` (:func:`finetune_ulmfit_classifier`): ULMFiT's classifier
   (concat pooling over the real positions, BPT3C chunks of ``bptt``) on the language model's backbone,
   discriminative and slanted triangular rates, ``--gradual-unfreezing`` (the head alone in the first epoch, then one
   more layer group per epoch from the top); ``--ensemble-with`` scores ``--dev`` also with the average of this
   classifier's and a classifier of the other direction's probabilities (:func:`ensemble_probabilities`).

A backward model (``train ulmfit-lm --backward``) reads every text from its end: the corpus stream reversed, the
classifier's rows reversed by its preprocessor. A run's direction is recorded (the RUN option ``backward``); a
fine-tuning job follows its init run's, and ``--backward`` on one from a forward language model is refused.

The train steps are not XLA-compiled unless ``jit_compile=True`` is asked for (window lengths and batch widths vary:
XLA would compile each). Every stage uses Adam with β = (0.7, 0.99) (the paper's §4) with decoupled weight decay, gradients clipped to
``clip_norm`` (0.25, the AWD-LSTM's) for the language models. Runs: family ``ulmfit_lm`` (task ``language_model``:
the :class:`AWDLSTMLanguageModel` with its :class:`WordTokenizer`) and ``ulmfit_classifier`` (task
``sequence_classification``: the :class:`ULMFiTClassifier` with its :class:`WordSequencePreprocessor`); the asset
``vocab`` (``vocab.txt``).

The carried state is the job's (variables beside the model), not the checkpoint's: a resumed run restarts it from
zero at its first window, its only difference from an uninterrupted run.
"""
import dataclasses
import math
import os

import numpy as np
import tensorflow as tf

from kerasplm.data.corpus import read_corpus
from kerasplm.data.lm_streams import make_eval_windows, make_stream_dataset
from kerasplm.models.ulmfit.manifest import ULMFiTClassifierOptions, ULMFiTFineTuneLMOptions, ULMFiTLanguageModelOptions
from kerasplm.jobs.finetuning import ClassificationJob, FineTuningJob, layerwise_decay
from kerasplm.models.ulmfit.awd_lstm import PRESETS, AWDLSTMBackbone, AWDLSTMConfig, AWDLSTMLanguageModel, ULMFiTClassifier
from kerasplm.models.presets import get_preset
from kerasplm.runs import RunDir, load_run
from kerasplm.runs.serialization import attach_preprocessor
from kerasplm.text.word_vocab import (EOS, SPECIAL_TOKENS, WordSequencePreprocessor, WordTokenizer, build_word_vocab,
                                      split_words, write_word_vocab)
from kerasplm.training import ScaledSchedule
from kerasplm.training.metrics import classification_metrics
from kerasplm.training.optimizers import FusedAdamW, LayerwiseAdamW, gradual_unfreezing, layer_group_multiplier

__all__ = ["ULMFiTLanguageModelJob", "ULMFiTClassifierJob", "train_ulmfit_lm", "finetune_ulmfit_lm",
           "finetune_ulmfit_classifier", "ensemble_probabilities", "load_ulmfit_classifier", "encode_lines",
           "grown_vocabulary_weights", "fine_tuning_config"]

LM_FAMILY, CLASSIFIER_FAMILY = "ulmfit_lm", "ulmfit_classifier"
ASSETS = {"vocab": "vocab.txt"}
ADAM = {"beta_1": 0.7, "beta_2": 0.99, "epsilon": 1e-6}   # ULMFiT §4 (the betas)


def encode_lines(tokenizer, text, backward=False, lines_per_call=4096):
    """The int32 ids of ``text``: each non-blank line's words then ``<eos>``; reversed whole for a backward model."""
    lines = [line for line in text.splitlines() if line.strip()]
    parts = []
    for i in range(0, len(lines), lines_per_call):
        ids = tokenizer.tokenize(tf.constant(lines[i:i + lines_per_call], tf.string))
        eos = tf.fill(tf.stack([ids.nrows(), 1]), tf.constant(tokenizer.token_to_id(EOS), tf.int64))
        parts.append(tf.concat([ids, eos], axis=1).flat_values.numpy().astype(np.int32))
    ids = np.concatenate(parts) if parts else np.zeros([0], np.int32)
    return ids[::-1].copy() if backward else ids


def _word_count(text, lines_per_call=4096):
    lines = [line for line in text.splitlines() if line.strip()]
    return sum(int(split_words(tf.constant(lines[i:i + lines_per_call])).row_lengths().numpy().sum())
               for i in range(0, len(lines), lines_per_call)) + len(lines)


def _optimizer(o, schedule, model_fn, top_group, frozen_until=None):
    """Adam (β 0.7, 0.99) with decoupled weight decay (not on biases and BatchNorm), and per-layer-group rates
    (``--discriminative-lr``) over the model's :meth:`layer_groups` (read when the optimizer is built)."""
    groups = {}

    def layer_group(variable):
        if not groups:
            groups["fn"] = model_fn().layer_groups()[0]
        return groups["fn"](variable)

    decay = layerwise_decay(o)
    kwargs = dict(learning_rate=schedule, weight_decay=o.weight_decay, **ADAM)
    if decay is None and frozen_until is None:
        optimizer = FusedAdamW(**kwargs)
    else:
        multiplier = (lambda v: 1.0) if decay is None else layer_group_multiplier(layer_group, top_group, decay)
        unfreeze = None if frozen_until is None else gradual_unfreezing(layer_group, top_group, frozen_until)
        optimizer = LayerwiseAdamW(multiplier, frozen_until=unfreeze, **kwargs)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta", "decoder_bias"])
    return optimizer


def grown_vocabulary_weights(model, new_words):
    """``model.get_weights()`` (an :class:`AWDLSTMLanguageModel`) for a vocabulary ``new_words`` longer: each weight
    indexed by word (the tied embedding's rows, the output biases, an untied decoder's columns) gets ``new_words``
    more, each the mean of the existing ones (fastai's start for a word the general corpus lacked)."""
    by_word = {model.backbone.embeddings.path: 0, model.decoder_bias.path: 0}
    if not model.backbone.config.tie_weights:
        by_word[model.decoder.kernel.path] = 1
    weights = []
    for variable in model.weights:
        value = variable.numpy()
        axis = by_word.get(variable.path)
        if axis is not None and new_words:
            mean = value.mean(axis=axis, keepdims=True)
            value = np.concatenate([value, np.repeat(mean, new_words, axis=axis)], axis=axis)
        weights.append(value)
    return weights


def fine_tuning_config(init_model, drop_mult, vocab_size=None):
    """The backbone config of a stage fine-tuned from ``init_model`` (a loaded ulmfit-lm run): its sizes (the
    vocabulary ``vocab_size`` words when given), and its preset's dropout rates × ``drop_mult``, not the init run's
    own rates × ``drop_mult``: the general LM's 1.0, the target LM's 0.3 and the classifier's 0.5 each scale the
    architecture's rates, as fastai's stages do, instead of compounding to 0.15 at the classifier."""
    config = init_model.backbone.config
    if vocab_size is not None:
        config = dataclasses.replace(config, vocab_size=vocab_size)
    preset = PRESETS.get(init_model.run_info.config.get("preset"), AWDLSTMConfig(vocab_size=config.vocab_size))
    return config.scaled_dropout(drop_mult, base=preset).validate()


def _init_language_model(init, backward):
    """The ``--init`` language-model run (the model, its tokenizer attached) and its direction; a one-line error when
    the direction asked for is not the run's."""
    if init is None:
        raise ValueError("give the language-model run to start from (init / --init)")
    model = load_run(init, family=LM_FAMILY, what="an ulmfit-lm run (kerasplm train ulmfit-lm / finetune ulmfit-lm)")
    init_backward = bool(model.run_info.config["options"].get("backward", False))
    if backward is not None and backward != init_backward:
        raise ValueError(f"{init} is a {'backward' if init_backward else 'forward'} language model; a "
                         f"{'backward' if backward else 'forward'} model needs a "
                         f"{'backward' if backward else 'forward'} language model (train ulmfit-lm"
                         f"{' --backward' if backward else ''})")
    return model, init_backward


class _ULMFiTRail:
    """What the language-model and classifier jobs share: no XLA unless asked for."""

    def settle_jit(self):
        """``jit_compile="auto"`` (XLA on a GPU) becomes off: every window length (the LMs) and every batch width (the
        classifier) is a new shape, which XLA would compile anew, dozens of times. ``jit_compile=True`` still asks."""
        if self.options.jit_compile == "auto":
            self.options = self.options.replace(jit_compile=False)


class ULMFiTLanguageModelJob(_ULMFiTRail, FineTuningJob):
    """``kerasplm train ulmfit-lm`` and ``finetune ulmfit-lm`` (see the module docstring)."""

    family, task, what, result_key = LM_FAMILY, "language_model", "ULMFiT language model", "language_model"
    options_class = ULMFiTLanguageModelOptions
    checkpoint_every, log_every = 500, 25
    scoring_seconds_key = "eval_seconds"

    @property
    def clip_norm(self):
        return self.options.clip_norm

    @property
    def fine_tuning(self):
        return hasattr(self.options_class, "init")

    def read_examples(self, o):
        """Read the corpus; return the bptt-long rows an epoch holds (its words / bptt), so that ``epochs`` counts
        passes over the text (an epoch is words / (batch_size · bptt) steps)."""
        self.train_text, self.held_out_text = read_corpus(o)
        return max(1, _word_count(self.train_text) // o.bptt)

    def build_data(self):
        super().build_data()   # the corpus, the schedule
        self.settle_jit()
        o = self.options
        self.schedule = ScaledSchedule(self.schedule)
        if self.resumed:
            stored = self.stored_model()
            self.tokenizer, self.model_config = stored.preprocessor, stored.backbone.config
            self.init_model = None
        elif self.fine_tuning:
            self.init_model, backward = _init_language_model(o.init, o.backward)
            self.options = o = o.replace(backward=backward)
            self.tokenizer, self.new_words = self.target_vocabulary(self.init_model)
            vocab_size = self.init_model.backbone.config.vocab_size + len(self.new_words)
            self.model_config = fine_tuning_config(self.init_model, o.drop_mult, vocab_size)
            self.write_config(self.init_model.run_info.config.get("preset"), assets=ASSETS)
        else:
            self.init_model = None
            vocab = build_word_vocab(self.train_text.splitlines(), max_size=o.max_vocab, min_count=o.min_count)
            self.tokenizer = self.run_vocabulary(vocab)
            sizes = {name: getattr(o, name) for name in ("embedding_dim", "hidden_dim", "num_layers")
                     if getattr(o, name) is not None}
            self.model_config = get_preset(o.preset, vocab_size=len(vocab), **sizes).scaled_dropout(o.drop_mult)
            self.model_config = self.model_config.validate()
            self.write_config(o.preset, assets=ASSETS)
        backward = bool(o.backward)
        train_ids = encode_lines(self.tokenizer, self.train_text, backward)
        self.held_out_ids = encode_lines(self.tokenizer, self.held_out_text, backward)
        unknown = float(np.mean(self.held_out_ids == self.tokenizer.unk_id)) if len(self.held_out_ids) else 0.0
        self.log(f"data: {len(train_ids):,} training and {len(self.held_out_ids):,} held-out words "
                 f"({self.tokenizer.vocab_size:,}-word vocabulary, {unknown:.1%} of the held-out words <unk>; "
                 f"{'backward' if backward else 'forward'})")
        self.train_dataset = lambda: make_stream_dataset(train_ids, o.batch_size, o.bptt, seed=o.seed)
        units = self.model_config.layer_units()
        self.state = [(tf.Variable(tf.zeros([o.batch_size, u]), trainable=False),
                       tf.Variable(tf.zeros([o.batch_size, u]), trainable=False)) for u in units]

    def target_vocabulary(self, init_model):
        """The init run's vocabulary, then (``--extend-vocab N``) the target text's words seen N times or more that
        it lacks, most frequent first, ``--max-vocab`` tokens at most in all: fastai's vocabulary transfer, without
        which a target-domain word missing from the general corpus (a review's "boring", "worst") is ``<unk>`` to
        the target LM and the classifier. Writes it to the new run; returns ``(its tokenizer, the added words)``."""
        o = self.options
        init_tokenizer = init_model.preprocessor      # a language model's preprocessor is its WordTokenizer
        vocab, new_words = list(init_tokenizer.vocab), []
        if o.extend_vocab:
            known = set(vocab)
            target = build_word_vocab(self.train_text.splitlines(), min_count=o.extend_vocab,
                                      lowercase=init_tokenizer.lowercase)
            new_words = [w for w in target[len(SPECIAL_TOKENS):] if w not in known][:max(0, o.max_vocab - len(vocab))]
            self.log(f"vocabulary: the init run's {len(vocab):,} words and {len(new_words):,} of the target text's "
                     f"(seen {o.extend_vocab} times or more)")
        return self.run_vocabulary(vocab + new_words, init_tokenizer.lowercase), new_words

    def run_vocabulary(self, vocab, lowercase=True):
        """A tokenizer over ``vocab``, written to the new run's ``vocab.txt`` (by the worker that writes)."""
        if not self.run_dir.writer:
            return WordTokenizer(vocab, lowercase=lowercase)
        os.makedirs(self.run_dir.path, exist_ok=True)
        write_word_vocab(vocab, self.run_dir.file(ASSETS["vocab"]))
        return WordTokenizer(self.run_dir.file(ASSETS["vocab"]), lowercase=lowercase)

    def build_model(self):
        backbone = AWDLSTMBackbone.from_config_object(self.model_config, name=self.config["preset"] or "awd_lstm")
        model = attach_preprocessor(AWDLSTMLanguageModel(backbone), self.tokenizer)
        if self.init_model is not None:
            model.set_weights(grown_vocabulary_weights(self.init_model, len(self.new_words)))
        return model

    def build_optimizer(self):
        return _optimizer(self.options, self.schedule, lambda: self.trainer.model, self.model_config.num_layers)

    @tf.autograph.experimental.do_not_convert
    def compute_loss(self, model, batch, training):
        """A window from the state the previous one left (zero where ``reset``), its learning rate × ℓ / bptt."""
        tokens = batch["tokens"]
        keep = (1.0 - batch["reset"])[:, tf.newaxis]
        state = [(h * keep, c * keep) for h, c in self.state]
        sums, new_state = model.loss_sums(tokens, initial_state=state, training=training)
        for (h_var, c_var), (h, c) in zip(self.state, new_state):
            h_var.assign(tf.stop_gradient(h))
            c_var.assign(tf.stop_gradient(c))
        self.schedule.scale.assign(tf.cast(tf.shape(tokens)[1] - 1, tf.float32) / self.options.bptt)
        return sums

    def score(self, model):
        """Held-out loss and perplexity per word: consecutive windows of bptt, the state carried through them."""
        o = self.options
        if len(self.held_out_ids) < 2 * o.eval_batch_size:
            return None
        step = tf.function(lambda window, state: model.loss_sums(window, initial_state=state, training=False))
        state = model.backbone.zero_state(o.eval_batch_size)
        loss = count = 0.0
        for window in make_eval_windows(self.held_out_ids, o.eval_batch_size, o.bptt):
            sums, state = step(tf.constant(window), state)
            loss, count = loss + float(sums["loss"]), count + float(sums["weight"])
        mean = loss / max(count, 1.0)
        return {"held_out_loss": round(mean, 4), "held_out_perplexity": round(math.exp(min(mean, 50.0)), 3),
                "held_out_words": int(count)}

    def dev_report(self, summary):
        return (f"held-out loss {summary['held_out_loss']:.4f} nats per word, perplexity "
                f"{summary['held_out_perplexity']} ({summary['held_out_words']:,} words)")


class ULMFiTFineTuneLMJob(ULMFiTLanguageModelJob):
    options_class = ULMFiTFineTuneLMOptions


def train_ulmfit_lm(out, options=None, log=print, **overrides):
    """Train (or resume) an AWD-LSTM language model in run directory ``out`` (ULMFiT's first stage); report the
    held-out perplexity. ``options``: a :class:`ULMFiTLanguageModelOptions`; keyword ``overrides`` replace single
    options. Returns the summary (also in metrics.json without "language_model", the trained model)."""
    return ULMFiTLanguageModelJob(out, options, log, **overrides).run()


def finetune_ulmfit_lm(out, options=None, log=print, **overrides):
    """Fine-tune the language model of run ``init`` on target-domain text (ULMFiT's second stage) in ``out``."""
    return ULMFiTFineTuneLMJob(out, options, log, **overrides).run()


# ------------------------------------------------------------------------------------------------ the classifier
def load_ulmfit_classifier(run_dir):
    """The :class:`ULMFiTClassifier` of a run (:func:`kerasplm.runs.load_run`), its preprocessor attached."""
    return load_run(run_dir, family=CLASSIFIER_FAMILY, what="an ulmfit-classifier run (kerasplm finetune "
                                                            "ulmfit-classifier)")


def ensemble_probabilities(classifiers, texts, batch_size=64):
    """The average of the classifiers' class probabilities for ``texts`` (ULMFiT §3.3: a forward and a backward
    classifier); they must share their labels. Returns float32 ``(n, num_labels)``."""
    labels = [list(c.labels) for c in classifiers]
    if any(names != labels[0] for names in labels):
        raise ValueError(f"the classifiers' labels differ ({' vs '.join(map(str, labels))}); an ensemble averages "
                         f"the probabilities of the same classes")
    probabilities = [tf.nn.softmax(c.predict_texts(list(texts), batch_size)).numpy() for c in classifiers]
    return np.mean(probabilities, axis=0)


class ULMFiTClassifierJob(_ULMFiTRail, ClassificationJob):
    """``kerasplm finetune ulmfit-classifier`` (see the module docstring)."""

    family, task, options_class, what = CLASSIFIER_FAMILY, "sequence_classification", ULMFiTClassifierOptions, \
        "ULMFiT classifier"
    # fastai's SortishSampler sorts by the text's length (here its UTF-8 bytes); recorded runs replay that order.
    sortish_by_tokens = False

    def new_tokenizer_from_init(self, init_model):
        """The language model's vocabulary copied into the new run, and its tokenizer over the copy."""
        self.init_assets, _ = self.copy_init_assets(ASSETS)
        tokenizer = init_model.preprocessor           # a language model's preprocessor is its WordTokenizer
        if self.run_dir.writer:
            tokenizer = WordTokenizer(self.run_dir.file(ASSETS["vocab"]), lowercase=tokenizer.lowercase)
        return tokenizer

    def build_data(self):
        super().build_data()   # the training file, the schedule
        self.settle_jit()
        o = self.options
        self.init_model = None
        if self.resumed:
            stored = self.stored_model()
            self.model_config, self.labels = stored.backbone.config, list(stored.labels)
            preprocessor = stored.preprocessor
        else:
            self.init_model, backward = _init_language_model(o.init, o.backward)
            self.options = o = o.replace(backward=backward)
            tokenizer = self.new_tokenizer_from_init(self.init_model)
            self.model_config = fine_tuning_config(self.init_model, o.drop_mult)
            self.labels = self.new_labels()
            self.write_config(self.init_model.run_info.config.get("preset"), assets=self.init_assets)
            preprocessor = WordSequencePreprocessor(tokenizer, o.max_length, reverse=backward, pad=False)
            self.log(f"started from {o.init} ({'backward' if backward else 'forward'})")
        self.backbone_config = self.model_config
        self.classification_data(preprocessor, details=f"BPT3C chunks of {o.bptt} words")

    def build_model(self):
        o = self.options
        backbone = AWDLSTMBackbone.from_config_object(self.model_config, name="awd_lstm")
        if self.init_model is not None:
            backbone.set_weights(self.init_model.backbone.get_weights())
        return ULMFiTClassifier(backbone, self.num_labels, preprocessor=self.preprocessor, labels=self.labels,
                                bptt=o.bptt, head_units=o.head_units, pool_dropout=min(0.4 * o.drop_mult, 0.99),
                                head_dropout=min(0.1 * o.drop_mult, 0.99))

    def build_optimizer(self):
        o = self.options
        steps_per_epoch = math.ceil(len(self.texts) / o.batch_size) if o.gradual_unfreezing else None
        return _optimizer(o, self.schedule, lambda: self.trainer.model, self.model_config.num_layers + 1,
                          frozen_until=steps_per_epoch)

    def score(self, model):
        scores = super().score(model)
        o = self.options
        if scores is None or not o.ensemble_with:
            return scores
        other = load_ulmfit_classifier(o.ensemble_with)
        if bool(other.preprocessor.reverse) == bool(model.preprocessor.reverse):
            raise ValueError(f"{o.ensemble_with}: an ensemble needs a classifier of the other direction (this one is "
                             f"{'backward' if model.preprocessor.reverse else 'forward'}, and so is that one)")
        texts, _, raw = self.read_tsv(o, o.dev)
        probabilities = ensemble_probabilities([model, other], texts, o.eval_batch_size)
        index = {name: i for i, name in enumerate(self.labels)}
        targets = np.asarray([index[x] for x in raw])
        scores["dev_ensemble"] = classification_metrics(targets, probabilities.argmax(-1), self.num_labels)
        return scores

    def dev_report(self, summary):
        line = super().dev_report(summary)
        if "dev_ensemble" in summary:
            e = summary["dev_ensemble"]
            line += f"; forward+backward ensemble accuracy {e['accuracy']:.4f} f1 {e['f1']:.4f} mcc {e['mcc']:.4f}"
        return line


def finetune_ulmfit_classifier(out, options=None, log=print, **overrides):
    """Fine-tune (or resume) ULMFiT's classifier from language-model run ``init`` in ``out``; score ``dev``. The
    summary (also metrics.json) holds ``dev`` (accuracy, F1, MCC) and, with ``ensemble_with``, ``dev_ensemble``;
    "classifier" is the trained :class:`ULMFiTClassifier`."""
    return ULMFiTClassifierJob(out, options, log, **overrides).run()
