"""Export a BERT tagger (:class:`kerasplm.models.bert.tagger.BertTokenClassifier`) as a TF Serving SavedModel.

Signature ``serving_default``: ``text`` tf.string [None] (one text per row) ->

    entity_text  string  [batch, N]   the text of each entity (between its offsets)
    entity_label string  [batch, N]   its type ("PER", "LOC", ...)
    start, end   int64   [batch, N]   character offsets into the input string (end exclusive; Unicode
                                      code points, invalid UTF-8 bytes counted as one U+FFFD each)
    score        float32 [batch, N]   mean over the entity's words of the chosen tag's probability (a
                                      CRF tagger: Viterbi tags, their marginal probabilities)
    count        int64   [batch]      entities in the row; N = the largest count of the batch, the rest of
                                      each row is padding ("" / 0)

Words are cut as BERT's basic tokenizer cuts them (whitespace and punctuation), each labelled at its first
word piece; a text longer than ``sequence_length`` pieces is tagged on its beginning only. Variable
tracking, metadata and the atomic versioned save are :mod:`kerasplm.export.base`'s.
"""
import tensorflow as tf

from kerasplm.export.base import ExportModule, save_version
from kerasplm.models.bert.tagger import tag_texts
from kerasplm.runs import load_run

FAMILY = "bert_tagger"
OUTPUTS = ("entity_text", "entity_label", "start", "end", "score")


class TaggerModule(ExportModule):
    """The exported tagger: model + :class:`BertTaggerPreprocessor` (its vocabulary an asset) + label names."""

    family = FAMILY

    def __init__(self, model, preprocessor, label_names):
        super().__init__(model, name="tagger")
        if len(label_names) != model.num_labels:
            raise ValueError(f"{len(label_names)} label names for a model with num_labels={model.num_labels}")
        self.preprocessor = preprocessor
        self.label_names = [str(name) for name in label_names]

    def signatures(self):
        return {"serving_default": self.tag}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def tag(self, text):
        spans = tag_texts(self.model, self.preprocessor, text, self.label_names)
        out = {name: spans[name].to_tensor() for name in OUTPUTS}     # padding: "" / 0
        out["count"] = spans["start"].row_lengths()
        return out


def export_tagger(model, preprocessor, label_names, model_base_path, version=None, overwrite=False):
    """Writes ``model_base_path/<version>/`` (see the module docstring); returns the version directory.
    ``model``: a :class:`BertTokenClassifier` (``load_run`` of a tagger run gives it with its ``preprocessor`` and
    ``labels``)."""
    module = TaggerModule(model, preprocessor, label_names)
    metadata = {"labels": module.label_names, "sequence_length": preprocessor.sequence_length,
                "lower_case": preprocessor.tokenizer.lower_case, "crf": getattr(model, "crf", None) is not None}
    return save_version(module, model_base_path, version=version, overwrite=overwrite, metadata=metadata)


def export_tagger_run(run, to, version=None, overwrite=False):
    """``kerasplm export tagger``: export a ``finetune bert-tagger`` run; prints and returns the version directory."""
    tagger = load_run(run, family=FAMILY, what="a BERT tagger run (written by `kerasplm finetune bert-tagger`)")
    path = export_tagger(tagger, tagger.preprocessor, tagger.labels, to, version=version, overwrite=overwrite)
    print(path)
    return path
