"""Export a BERT question answerer (``kerasplm finetune bert-qa``) as a TF Serving SavedModel.

Signature ``serving_default``: ``question``, ``context`` tf.string [None] (one pair per row) ->

    answer  string  [batch]   the answer: the context's text between start and end ("" when the context has
                              no piece to answer from, e.g. an empty context)
    start   int64   [batch]   character offsets into the context string, end exclusive: Unicode code points,
    end     int64   [batch]   invalid UTF-8 counted as one U+FFFD each (the tagger export's convention)
    score   float32 [batch]   P(start) · P(end) under the chosen window's softmaxes over its context pieces

The whole pipeline runs in the graph: BERT tokenization with character offsets, the question cut to
``max_query_length`` pieces, the context in windows of ``sequence_length`` with ``doc_stride`` (padded to the
longest window of the request), the model, and the span search over every window of a row
(:func:`kerasplm.models.bert.question_answering.decode_answers`: ``n_best`` candidates, at most ``max_answer_length``
pieces). Variable tracking, metadata and the atomic versioned save are :mod:`kerasplm.export.base`'s.

>>> path = export_qa(load_run("runs/squad"), "export/squad")        # -> "export/squad/1"
"""
import keras
import tensorflow as tf

from kerasplm.export.base import ExportModule, save_version
from kerasplm.models.bert.question_answering import answer_questions
from kerasplm.runs import load_run

FAMILY = "bert_qa"
_STRING = tf.TensorSpec([None], tf.string)


class QAModule(ExportModule):
    """The exported question answerer: model + :class:`QuestionAnswerPreprocessor` (vocabulary an asset).

    ``qa``: the :class:`kerasplm.models.bert.question_answering.BertQuestionAnswerer` :func:`kerasplm.runs.load_run` gives (its
    preprocessor attached, its ``max_answer_length`` and ``n_best``), or anything with ``model``, ``preprocessor``,
    ``max_answer_length`` and ``n_best`` (:class:`kerasplm.models.bert.question_answering_job.BertQA`)."""

    family = FAMILY

    def __init__(self, qa):
        model = qa if isinstance(qa, keras.Model) else qa.model
        super().__init__(model, name="question_answerer")
        self.preprocessor = getattr(qa, "preprocessor", None)
        if self.preprocessor is None:
            raise ValueError("the question answerer has no preprocessor (load it with kerasplm.runs.load_run)")
        self.max_answer_length, self.n_best = int(qa.max_answer_length), int(qa.n_best)

    def signatures(self):
        return {"serving_default": self.answer}

    # autograph=False: straight-line code; autograph would rewrite the whole Keras model at every trace.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="question"),
                                  tf.TensorSpec([None], tf.string, name="context")], autograph=False)
    def answer(self, question, context):
        return answer_questions(self.model, self.preprocessor, question, context, self.max_answer_length, self.n_best)


def export_qa(qa, model_base_path, version=None, overwrite=False):
    """Writes ``model_base_path/<version>/`` for ``qa`` (``load_run(run_dir)``, or a
    :class:`kerasplm.models.bert.question_answering_job.BertQA`); returns the version directory."""
    module = QAModule(qa)
    p = module.preprocessor
    metadata = {"sequence_length": p.sequence_length, "doc_stride": p.doc_stride,
                "max_query_length": p.max_query_length, "max_answer_length": module.max_answer_length,
                "n_best": module.n_best, "lower_case": p.tokenizer.lower_case, "offsets": "characters"}
    return save_version(module, model_base_path, version=version, overwrite=overwrite, metadata=metadata)


def export_qa_run(run, to, version=None, overwrite=False):
    """``kerasplm export qa``: export a ``finetune bert-qa`` run; prints and returns the version directory."""
    qa = load_run(run, family=FAMILY, what="a BERT question answering run (written by `kerasplm finetune bert-qa`)")
    path = export_qa(qa, to, version=version, overwrite=overwrite)
    print(path)
    return path
