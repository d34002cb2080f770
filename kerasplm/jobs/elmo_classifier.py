"""``kerasplm finetune elmo-classifier``: a BiLSTM sentence classifier with static word embeddings, with or
without ELMo features from a trained biLM (:mod:`kerasplm.models.elmo_classifier`; Peters et al. 2018, §3.3).

Data: tab-separated files read by :func:`kerasplm.jobs.finetuning.read_classification_tsv` (``--text-col``,
``--label-col`` by header name or 0-based index); sentences are split on whitespace (GLUE's SST-2 is already
tokenized and lower-cased). The word vocabulary is ``<PAD> <UNK>`` + the training words seen at least
``min_count`` times (most frequent first, at most ``max_vocab``); ELMo reads the characters, so it has no
out-of-vocabulary words. With ``--elmo RUN_DIR`` (an ``elmo`` run: ``kerasplm train elmo`` / ``convert elmo``)
the biLM is frozen and only its scalar mix(es) train, with the classifier; ``--no-elmo`` is the static baseline.
Adam (learning rate 1e-3), gradients clipped to norm 5, dev accuracy/F1/MCC
(:func:`kerasplm.models.bert_tasks.classification_metrics`) printed and in ``metrics.json``.

Run directory: family ``elmo_classifier``; ``model`` = the classifier's sizes, ``labels`` and ``elmo`` (the
biLM's ``ElmoConfig`` fields, ``num_mixes``, ``layer_norm``; null without ELMo); asset ``words.txt`` (the word
vocabulary). The checkpoint holds the whole model, biLM included, so the run loads without the biLM's run.

>>> summary = finetune_elmo_classifier("runs/sst2_elmo", train="sst2/train.tsv", dev="sst2/dev.tsv",
...                                    elmo="runs/elmo", steps=1000)
>>> summary["dev"]["accuracy"]
"""
import collections
import dataclasses
import os

from kerasplm.families.elmo import ElmoClassifierOptions
from kerasplm.jobs.elmo import load_elmo
from kerasplm.jobs.finetuning import ClassificationJob
from kerasplm.models.elmo import ElmoBiLM, ElmoConfig, ElmoEmbedder
from kerasplm.models.elmo_classifier import PAD, UNK, ClassifierPreprocessor, ElmoClassifier
from kerasplm.runs import RunDir
from kerasplm.training.optimizers import FusedAdam

FAMILY = "elmo_classifier"
ASSETS = {"vocab": "words.txt"}


def build_word_vocab(texts, max_vocab, min_count=1):
    """``<PAD> <UNK>`` + whitespace words of ``texts`` seen ``min_count``+ times, most frequent first (ties:
    alphabetical), at most ``max_vocab`` of them."""
    counts = collections.Counter(w for t in texts for w in t.split() if w not in (PAD, UNK))
    kept = sorted((kv for kv in counts.items() if kv[1] >= min_count), key=lambda kv: (-kv[1], kv[0]))
    return [PAD, UNK] + [w for w, _ in kept[:max_vocab]]


def _read_vocab(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _model_parts(run, config):
    """(labels, classifier sizes, ElmoConfig or None, elmo entry) of a stored config; one-line error otherwise."""
    model = config["model"]
    try:
        labels = [str(x) for x in model["labels"]]
        sizes = {k: model[k] for k in ("vocab_size", "embedding_dim", "lstm_units", "dropout")}
        elmo = model["elmo"]
        bilm_config = ElmoConfig(**elmo["bilm"]).validate() if elmo else None
    except (KeyError, TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"'model' is not an ELMo classifier config ({e})") from None
    return labels, sizes, bilm_config, elmo


def build_classifier(sizes, num_labels, bilm=None, num_mixes=1, layer_norm=False, preprocessor=None):
    embedder = None if bilm is None else ElmoEmbedder(bilm, num_mixes=num_mixes, layer_norm=layer_norm)
    return ElmoClassifier(num_labels=num_labels, embedder=embedder, preprocessor=preprocessor, **sizes)


def load_elmo_classifier_run(run, config):
    """The loader of family ``elmo_classifier``: the :class:`ElmoClassifier` with its checkpoint restored (biLM
    included), its ``preprocessor`` and ``labels``."""
    labels, sizes, bilm_config, elmo = _model_parts(run, config)
    vocab = _read_vocab(run.asset(config, "vocab"))
    if len(vocab) != sizes["vocab_size"]:
        raise run.error(config["assets"]["vocab"], f"{len(vocab)} words, but the model has {sizes['vocab_size']}")
    max_chars = bilm_config.max_characters_per_token if bilm_config else ElmoConfig().max_characters_per_token
    preprocessor = ClassifierPreprocessor(vocab, int(config["options"]["max_length"]), max_chars)
    if elmo:
        model = build_classifier(sizes, len(labels), ElmoBiLM.from_config_object(bilm_config), elmo["num_mixes"],
                                 elmo["layer_norm"], preprocessor=preprocessor)
    else:
        model = build_classifier(sizes, len(labels), preprocessor=preprocessor)
    run.restore(model=model)
    model.labels = labels
    return model


def load_elmo_classifier(run_dir):
    run = RunDir(run_dir)
    return load_elmo_classifier_run(run, run.read_config(family=FAMILY, what="ELMo classifier"))


class ElmoClassifierJob(ClassificationJob):
    """``kerasplm finetune elmo-classifier``: the BiLSTM classifier, ``[x; ELMo]`` from a frozen biLM or static
    embeddings only; Adam at a constant learning rate, gradients clipped to norm 5."""

    family, task, options_class, what = FAMILY, "sequence_classification", ElmoClassifierOptions, "ELMo classifier"
    clip_norm = 5.0

    def plan(self, options, overrides):
        if overrides.get("elmo"):  # stored absolute, so a resume from another directory finds it
            overrides = {**overrides, "elmo": os.path.abspath(overrides["elmo"])}
        return super().plan(options, overrides)

    def check_config(self, run, config):
        _model_parts(run, config)

    def build_data(self):
        super().build_data()   # the training file
        o, run = self.options, self.run_dir
        self.num_mixes = 2 if o.elmo_at_output else 1
        if self.resumed:
            self.labels, self.sizes, bilm_config, _ = _model_parts(run, self.config)
            vocab = _read_vocab(run.asset(self.config, "vocab"))
            self.bilm = ElmoBiLM.from_config_object(bilm_config) if bilm_config else None  # weights: the checkpoint
        else:
            self.labels = self.new_labels()
            self.bilm, elmo_entry = None, None
            if o.use_elmo:
                if o.elmo is None:
                    raise ValueError("give the ELMo run (elmo / --elmo RUN_DIR), or --no-elmo for static embeddings "
                                     "only")
                self.bilm = load_elmo(o.elmo).bilm
                elmo_entry = {"bilm": dataclasses.asdict(self.bilm.config), "num_mixes": self.num_mixes,
                              "layer_norm": o.mix_layer_norm}
            vocab = build_word_vocab(self.texts, o.max_vocab, o.min_count)
            run.write_text(ASSETS["vocab"], "".join(w + "\n" for w in vocab))
            self.sizes = {"vocab_size": len(vocab), "embedding_dim": o.embedding_dim, "lstm_units": o.lstm_units,
                          "dropout": o.dropout}
            self.write_config("custom", {**self.sizes, "labels": self.labels, "elmo": elmo_entry}, assets=ASSETS)
        max_chars = (self.bilm.config if self.bilm is not None else ElmoConfig()).max_characters_per_token
        self.classification_data(ClassifierPreprocessor(vocab, o.max_length, max_chars),
                                 f"{len(vocab)} words, " + (f"ELMo from {o.elmo}" if self.bilm is not None
                                                            else "static embeddings only"))

    def build_model(self):
        o = self.options
        return build_classifier(self.sizes, len(self.labels), self.bilm, self.num_mixes, o.mix_layer_norm,
                                self.preprocessor)

    def build_optimizer(self):
        return FusedAdam(self.options.learning_rate)

    def evaluate(self, trainer, summary):
        if trainer.model.backbone is not None:   # the learned s_j and γ of each mix
            summary["mix_weights"] = [{"s": [float(s) for s in mix.layer_weights.numpy()],
                                       "gamma": float(mix.gamma.numpy())} for mix in trainer.model.backbone.mixes]
        super().evaluate(trainer, summary)


def finetune_elmo_classifier(out, options=None, log=print, **overrides):
    """Train (or resume) the classifier in run directory ``out``; score ``dev``; return the summary.

    ``options``: an :class:`ElmoClassifierOptions`; keyword ``overrides`` replace single options. Needs ``steps``
    or ``time_budget``. The summary (also ``metrics.json``) has the training figures, ``dev`` (accuracy, F1, MCC)
    and, with ELMo, ``mix_weights`` (s_j and γ of each mix); ``"classifier"`` is the trained model.
    """
    return ElmoClassifierJob(out, options, log, **overrides).run()
