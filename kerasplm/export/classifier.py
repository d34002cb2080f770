"""Export a fine-tuned classifier as a SavedModel: strings in, labels out. Runs of ``kerasplm finetune
bert-classifier`` (family ``bert_classifier``) and of ``kerasplm finetune gpt-classifier`` (``gpt_classifier``: GPT-1's
input transformations, :mod:`kerasplm.models.gpt.preprocessor`) and of ``kerasplm finetune ulmfit-classifier``
(``ulmfit_classifier``: words in graph, :class:`kerasplm.text.word_vocab.WordSequencePreprocessor`, reversed for a
backward model) give the same signature.

``serving_default``: ``text`` tf.string [None] (and ``text_pair`` tf.string [None] when the model was trained on
sentence pairs) -> ``probabilities`` float32 [None, C] (softmax over the classes, in the order of ``labels`` in
the metadata) and ``label`` tf.string [None] (the most probable class's name, from the training file). A
regression model (``num_labels == 1``) answers ``score`` float32 [None] instead.

For TF Serving's Classify / Regress APIs (``:classify``, ``PredictionService.Classify``), over serialized
``tf.Example``\\ s whose feature ``text`` (bytes; and ``text_pair`` for a pair model) holds one string:

* ``classify`` (method ``tensorflow/serving/classify``): ``inputs`` tf.string [None] -> ``classes`` tf.string
  [None, C] (the label names, the same in every row) and ``scores`` float32 [None, C] (the probabilities);
* ``regress`` instead for a regression model (method ``tensorflow/serving/regress``): ``inputs`` -> ``outputs``
  float32 [None] (the score).

A missing feature, a feature of another type or a string that is not a serialized ``tf.Example`` fails with
INVALID_ARGUMENT from ``tf.io.parse_example`` (e.g. "Feature: text (data type: string) is required but could not
be found.").

>>> path = export_classifier("runs/sst2", "export/sst2")        # -> "export/sst2/1"
>>> export_classifier("runs/fwd", "export/sst2", ensemble_with="runs/bwd")   # ULMFiT's forward + backward

An ensemble export (``ensemble_with``) answers the same signatures with the mean of its classifiers' probabilities
(each reads the text with its own preprocessor: a backward ULMFiT model reversed); the metadata lists its runs
under ``ensemble``.

Tokenization and packing are the training's preprocessor (:class:`kerasplm.text.BertPreprocessor`,
:class:`kerasplm.models.gpt.preprocessor.GPTClassifierPreprocessor` or
:class:`kerasplm.text.word_vocab.WordSequencePreprocessor`; same cut at ``max_length``), padded to the longest row
of each request. Variable tracking, metadata and the atomic
versioned save are :mod:`kerasplm.export.base`'s.
"""
import os

import tensorflow as tf

from kerasplm.export import warmup
from kerasplm.export.base import CLASSIFY_METHOD, REGRESS_METHOD, ExportModule, save_version, tf_variable
from kerasplm.runs import RunDir, load_run
from kerasplm.text.bert_tokenizer import BertPreprocessor

FAMILY = "bert_classifier"
CLASSIFIER_FAMILIES = (FAMILY, "gpt_classifier", "ulmfit_classifier")
_TEXT = tf.TensorSpec([None], tf.string, name="text")
_PAIR = tf.TensorSpec([None], tf.string, name="text_pair")
_EXAMPLES = tf.TensorSpec([None], tf.string, name="inputs")
CLASSIFY_SIGNATURE, REGRESS_SIGNATURE = "classify", "regress"


def _batch_preprocessor(classifier):
    """The classifier's preprocessor padding each batch to its longest row (a ``BertPreprocessor``, or anything with
    ``with_padding(False)``)."""
    preprocessor = getattr(classifier, "preprocessor", None)
    if preprocessor is None:
        raise ValueError("the classifier has no preprocessor (load it with kerasplm.runs.load_run)")
    if isinstance(preprocessor, BertPreprocessor):
        return preprocessor.with_length(preprocessor.sequence_length, pad_to_length=False)
    return preprocessor.with_padding(False)


class ClassifierModule(ExportModule):
    """The exported classifier: a classifier task model (``model(preprocessor(text[, text_pair])) -> logits``), as
    :func:`kerasplm.runs.load_run` gives it: its ``preprocessor`` (a ``BertPreprocessor``, or anything with
    ``with_padding(False)``: a copy padding each batch to its longest row), ``labels`` (class names; empty for
    regression), ``pair_input`` and ``num_labels``. ``family`` names the run's family (default: the run's, else
    ``bert_classifier``).

    ``ensemble_with``: more classifiers with the same labels and inputs, each read by its own preprocessor (ULMFiT
    §3.3: a forward and a backward model); the module answers the mean of every member's probabilities (a regression
    ensemble: the mean score)."""

    family = FAMILY

    def __init__(self, classifier, family=None, ensemble_with=()):
        run_info = getattr(classifier, "run_info", None)
        family = family or (run_info.config.get("family") if run_info else None) or FAMILY
        super().__init__(classifier, family=family, name="classifier")
        self.preprocessor = _batch_preprocessor(classifier)
        self.regression = classifier.num_labels == 1
        labels = list(classifier.labels)
        if not self.regression and len(labels) != classifier.num_labels:
            raise ValueError(f"{len(labels)} label names for a model of {classifier.num_labels} classes")
        self.label_names = labels
        self.labels = tf.constant(labels or [""], tf.string)
        self.pair_input = bool(classifier.pair_input)
        for other in ensemble_with:
            if (list(other.labels), other.num_labels, bool(other.pair_input)) != (labels, classifier.num_labels,
                                                                                   self.pair_input):
                raise ValueError(f"an ensemble's classifiers must share labels and inputs: {labels or 'a score'}"
                                 f"{' (text pairs)' if self.pair_input else ''} vs {list(other.labels) or 'a score'}"
                                 f"{' (text pairs)' if other.pair_input else ''}")
        # Untracked models, tracked tf.Variables (see ExportModule); the preprocessors are tracked as usual.
        self.__dict__["ensemble_models"] = list(ensemble_with)
        self.ensemble_variables = [tf_variable(v) for other in ensemble_with for v in other.variables]
        self.ensemble_preprocessors = [_batch_preprocessor(other) for other in ensemble_with]
        # autograph=False: straight-line code; autograph would rewrite the whole Keras model at every trace.
        if self.pair_input:
            self.serving = tf.function(self._classify, input_signature=[_TEXT, _PAIR], autograph=False)
        else:
            self.serving = tf.function(lambda text: self._classify(text), input_signature=[_TEXT], autograph=False)
        self.examples = tf.function(self._from_examples, input_signature=[_EXAMPLES], autograph=False)

    def _classify(self, text, text_pair=None):
        members = zip([self.model, *self.ensemble_models], [self.preprocessor, *self.ensemble_preprocessors])
        outputs = [model(preprocessor(text, text_pair), training=False) for model, preprocessor in members]
        if self.regression:
            return {"score": tf.add_n([logits[:, 0] for logits in outputs]) / len(outputs)}
        probabilities = tf.add_n([tf.nn.softmax(logits, axis=-1) for logits in outputs]) / len(outputs)
        return {"probabilities": probabilities, "label": tf.gather(self.labels, tf.argmax(probabilities, axis=-1))}

    def _from_examples(self, inputs):
        """Serialized ``tf.Example``\\ s [B] -> ``classes`` [B, C] and ``scores`` [B, C], or ``outputs`` [B]."""
        features = {"text": tf.io.FixedLenFeature([], tf.string)}
        if self.pair_input:
            features["text_pair"] = tf.io.FixedLenFeature([], tf.string)
        parsed = tf.io.parse_example(inputs, features)
        outputs = self._classify(parsed["text"], parsed.get("text_pair"))
        if self.regression:
            return {"outputs": outputs["score"]}
        scores = outputs["probabilities"]
        classes = tf.tile(self.labels[tf.newaxis], tf.stack([tf.shape(scores)[0], 1]))
        return {"classes": classes, "scores": scores}

    @property
    def example_signature(self):
        """The name of the signature over ``tf.Example``\\ s: ``regress`` or ``classify``."""
        return REGRESS_SIGNATURE if self.regression else CLASSIFY_SIGNATURE

    def signatures(self):
        return {"serving_default": self.serving, self.example_signature: self.examples}

    def signature_methods(self):
        return {self.example_signature: REGRESS_METHOD if self.regression else CLASSIFY_METHOD}

    def warmup_requests(self):
        """Every predict signature (the base's), then the classification / regression signature over serialized
        ``tf.Example``\\ s (a ``classify_log`` / ``regress_log`` record, as TF Serving replays them)."""
        features = ("text", "text_pair") if self.pair_input else ("text",)
        method = self.signature_methods()[self.example_signature]
        return super().warmup_requests() + warmup.example_requests(self.example_signature, method, features)


def _load_classifier(run_dir):
    family = RunDir(run_dir).read_config()["family"]
    if family not in CLASSIFIER_FAMILIES:
        raise ValueError(f"{run_dir} is a {family!r} run, not a classifier ({', '.join(CLASSIFIER_FAMILIES)}: "
                         f"kerasplm finetune bert-classifier / gpt-classifier / ulmfit-classifier)")
    return load_run(run_dir, family=CLASSIFIER_FAMILIES)


def export_classifier(run_dir, model_base_path, version=None, overwrite=False, ensemble_with=None):
    """Export the classifier run ``run_dir`` to ``model_base_path/<version>/``; returns the version directory.
    ``ensemble_with``: a second classifier run (or a list of them) whose probabilities the export averages with
    this run's (:class:`ClassifierModule`)."""
    classifier = _load_classifier(run_dir)
    others = [ensemble_with] if isinstance(ensemble_with, str) else list(ensemble_with or [])
    module = ClassifierModule(classifier, ensemble_with=[_load_classifier(other) for other in others])
    metadata = {"labels": module.label_names, "regression": module.regression, "pair_input": module.pair_input,
                "sequence_length": module.preprocessor.sequence_length}
    if others:
        metadata["ensemble"] = [os.path.abspath(run_dir)] + [os.path.abspath(other) for other in others]
    return save_version(module, model_base_path, version=version, overwrite=overwrite, metadata=metadata)


def export_classifier_run(run, to, ensemble_with=None, version=None, overwrite=False):
    """``kerasplm export classifier``: prints and returns the version directory."""
    path = export_classifier(run, to, version=version, overwrite=overwrite, ensemble_with=ensemble_with)
    print(path)
    return path
