"""``kerasplm finetune elmo-classifier``: a BiLSTM sentence classifier with static word embeddings, with or
without ELMo features from a trained biLM (:mod:`kerasplm.models.elmo.classifier`; Peters et al. 2018, §3.3).

Data: tab-separated files read by :func:`kerasplm.jobs.finetuning.read_classification_tsv` (``--text-col``,
``--label-col`` by header name or 0-based index); sentences are split on whitespace (GLUE's SST-2 is already
tokenized and lower-cased). The word vocabulary is ``<PAD> <UNK>`` + the training words seen at least
``min_count`` times (most frequent first, at most ``max_vocab``); ELMo reads the characters, so it has no
out-of-vocabulary words. With ``--elmo RUN_DIR`` (an ``elmo`` run: ``kerasplm train elmo`` / ``convert elmo``)
the biLM is frozen and only its scalar mix(es) train, with the classifier; ``--no-elmo`` is the static baseline.
Adam (learning rate 1e-3), gradients clipped to norm 5, dev accuracy/F1/MCC
(:func:`kerasplm.training.metrics.classification_metrics`) printed and in ``metrics.json``.

Run directory: family ``elmo_classifier``; ``model`` = the :class:`ElmoClassifier`'s Keras config (its sizes,
``labels`` and its embedder: the biLM's ``ElmoConfig`` fields, ``num_mixes``, ``layer_norm``; null without ELMo),
``preprocessor`` = the :class:`ClassifierPreprocessor`'s (``max_length``, and the word vocabulary by its file name:
asset ``words.txt``). The checkpoint holds the whole model, biLM included, so the run loads without the biLM's run
(:func:`kerasplm.runs.load_run`, or :func:`load_elmo_classifier`); a resume rebuilds it from config.json.

>>> summary = finetune_elmo_classifier("runs/sst2_elmo", train="sst2/train.tsv", dev="sst2/dev.tsv",
...                                    elmo="runs/elmo", steps=1000)
>>> summary["dev"]["accuracy"]
"""
import os

from kerasplm.models.elmo.manifest import ElmoClassifierOptions
from kerasplm.jobs.finetuning import ClassificationJob
from kerasplm.models.elmo.model import ElmoConfig, ElmoEmbedder
from kerasplm.models.elmo.classifier import PAD, UNK, ClassifierPreprocessor, ElmoClassifier
from kerasplm.models.elmo.runs import load_elmo
from kerasplm.runs import attach_run_info, load_run
from kerasplm.text.word_vocab import build_word_vocab, word_vocab_text
from kerasplm.training.optimizers import FusedAdam

FAMILY = "elmo_classifier"
ASSETS = {"vocab": "words.txt"}


# The word vocabulary (:func:`kerasplm.text.word_vocab.build_word_vocab`): ``<PAD> <UNK>`` + the training texts'
# whitespace words seen ``min_count``+ times, most frequent first (ties: alphabetical), at most ``max_vocab`` of them.
VOCABULARY = dict(special_tokens=(PAD, UNK), split="whitespace")


def load_elmo_classifier(run_dir):
    """The :class:`ElmoClassifier` of a run (:func:`kerasplm.runs.load_run`): checkpoint restored, biLM included;
    its ``preprocessor`` and ``labels``."""
    return load_run(run_dir, family=FAMILY, what="an ELMo classifier run (kerasplm finetune elmo-classifier)")


class ElmoClassifierJob(ClassificationJob):
    """``kerasplm finetune elmo-classifier``: the BiLSTM classifier, ``[x; ELMo]`` from a frozen biLM or static
    embeddings only; Adam at a constant learning rate, gradients clipped to norm 5."""

    family, task, options_class, what = FAMILY, "sequence_classification", ElmoClassifierOptions, "ELMo classifier"
    clip_norm = 5.0

    def plan(self, options, overrides):
        if overrides.get("elmo"):  # stored absolute, so a resume from another directory finds it
            overrides = {**overrides, "elmo": os.path.abspath(overrides["elmo"])}
        return super().plan(options, overrides)

    def build_data(self):
        super().build_data()   # the training file
        o, run = self.options, self.run_dir
        if self.resumed:   # under the strategy's scope (a fine-tuning job): this is the model the checkpoint restores
            stored = self.stored_model()
            self.labels, preprocessor = list(stored.labels), stored.preprocessor
            uses_elmo = stored.backbone is not None
        else:
            self.labels = self.new_labels()
            self.bilm = None
            if o.use_elmo:
                if o.elmo is None:
                    raise ValueError("give the ELMo run (elmo / --elmo RUN_DIR), or --no-elmo for static embeddings "
                                     "only")
                self.bilm = load_elmo(o.elmo).bilm
            vocab = build_word_vocab(self.texts, max_words=o.max_vocab, min_count=o.min_count, **VOCABULARY)
            if run.writer:   # the preprocessor reads the file back, so the run's config names it
                run.write_text(ASSETS["vocab"], word_vocab_text(vocab))
                vocab = run.file(ASSETS["vocab"])
            max_chars = (self.bilm.config if self.bilm is not None else ElmoConfig()).max_characters_per_token
            preprocessor = ClassifierPreprocessor(vocab, o.max_length, max_chars)
            uses_elmo = self.bilm is not None
            self.write_config("custom", assets=ASSETS)
        self.classification_data(preprocessor, f"{preprocessor.vocab_size} words, "
                                 + (f"ELMo from {o.elmo}" if uses_elmo else "static embeddings only"))

    def build_model(self):
        o = self.options
        embedder = None
        if self.bilm is not None:
            embedder = ElmoEmbedder(self.bilm, num_mixes=2 if o.elmo_at_output else 1, layer_norm=o.mix_layer_norm)
        return ElmoClassifier(self.preprocessor.vocab_size, embedder=embedder, embedding_dim=o.embedding_dim,
                              lstm_units=o.lstm_units, dropout=o.dropout, labels=self.labels,
                              preprocessor=self.preprocessor)

    def build_optimizer(self):
        return FusedAdam(self.options.learning_rate)

    def evaluate(self, trainer, summary):
        if trainer.model.backbone is not None:   # the learned s_j and γ of each mix
            summary["mix_weights"] = [{"s": [float(s) for s in mix.layer_weights.numpy()],
                                       "gamma": float(mix.gamma.numpy())} for mix in trainer.model.backbone.mixes]
        super().evaluate(trainer, summary)

    def result(self, trainer):
        """The trained :class:`ElmoClassifier` (its labels in its config), with ``run_info``."""
        return attach_run_info(trainer.model, self.run_dir.path, self.config, trainer.step)


def finetune_elmo_classifier(out, options=None, log=print, **overrides):
    """Train (or resume) the classifier in run directory ``out``; score ``dev``; return the summary.

    ``options``: an :class:`ElmoClassifierOptions`; keyword ``overrides`` replace single options. Needs ``steps``
    or ``time_budget``. The summary (also ``metrics.json``) has the training figures, ``dev`` (accuracy, F1, MCC)
    and, with ELMo, ``mix_weights`` (s_j and γ of each mix); ``"classifier"`` is the trained model.
    """
    return ElmoClassifierJob(out, options, log, **overrides).run()
