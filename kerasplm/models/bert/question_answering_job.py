"""Fine-tune a BERT run on extractive question answering (SQuAD v1.1 files): ``kerasplm finetune bert-qa``.

    summary = finetune_bert_qa("runs/squad", train="dev-v1.1.json", holdout_fraction=0.2,
                               init="runs/minilm", steps=2000)
    summary["dev"]["exact_match"], summary["dev"]["f1"]

Recipe (BERT paper, section 4.2 and appendix A.3): windows of 384 pieces with a document stride of 128 and
questions of at most 64 pieces (:mod:`kerasplm.models.bert.question_answering`), the classifier's AdamW (ε 1e-6, weight decay
0.01 off biases and LayerNorm, clip 1) with warmup over 10% of the steps and linear decay, 5e-5, batch 32, 3
epochs (over the training questions) unless ``steps`` / ``time_budget`` say otherwise. Each training question
uses its first answer. The held-out questions (``dev``, or with ``holdout_fraction`` and no ``dev`` the
articles :func:`kerasplm.data.squad.split_by_article` holds out of ``train``) are answered with the spans
of :func:`kerasplm.models.bert.question_answering.decode_answers` and scored with the official v1.1 EM/F1
(:mod:`kerasplm.models.bert.squad_metrics`): printed and written to ``metrics.json`` (``dev``), the predictions
to ``predictions.json`` (``{id: answer}``, the official script's input). Resumable like every kerasplm job.

Run directory: family ``bert_qa``; ``model`` = the :class:`BertQuestionAnswerer` (its backbone, the decoding's
``max_answer_length`` and ``n_best``), ``preprocessor`` = the serving :class:`QuestionAnswerPreprocessor` (windows
padded to the longest of a request) over asset ``vocab``; :func:`load_bert_qa` gives a :class:`BertQA`.
"""
import dataclasses
import time

import numpy as np
import tensorflow as tf

from kerasplm.data.squad import read_squad, split_by_article
from kerasplm.models.bert.manifest import BertQAOptions
from kerasplm.jobs.finetuning import cut_padding
from kerasplm.models.bert.squad_metrics import squad_scores
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.finetuning import BERT_ASSETS, BertFineTuningJob
from kerasplm.models.bert.question_answering import INPUT_KEYS, BertQuestionAnswerer, QuestionAnswerPreprocessor, answer_questions
from kerasplm.runs import load_run

FAMILY = "bert_qa"
PREDICTIONS = "predictions.json"
LABEL_KEYS = ("start_positions", "end_positions")
__all__ = ["BertQAOptions", "BertQA", "finetune_bert_qa", "load_bert_qa", "make_qa_features"]


@dataclasses.dataclass
class BertQA:
    """A fine-tuned question answerer: ``model``, its ``preprocessor`` and the decoding options (by default the
    model's: what :func:`kerasplm.runs.load_run` attaches and its config holds)."""

    model: BertQuestionAnswerer
    preprocessor: QuestionAnswerPreprocessor = None
    max_answer_length: int = None
    n_best: int = None

    def __post_init__(self):
        self.preprocessor = self.preprocessor or self.model.preprocessor
        if self.preprocessor is None:
            raise ValueError("a BertQA needs a QuestionAnswerPreprocessor (the model has none attached)")
        self.max_answer_length = int(self.max_answer_length or self.model.max_answer_length)
        self.n_best = int(self.n_best or self.model.n_best)
        self._answer = tf.function(
            lambda q, c: answer_questions(self.model, self.preprocessor, q, c, self.max_answer_length, self.n_best),
            input_signature=[tf.TensorSpec([None], tf.string)] * 2, autograph=False)

    def answer(self, questions, contexts, batch_size=32):
        """Lists of strings -> ``{"answer": [str], "start", "end" (character offsets), "score"}`` (numpy)."""
        if len(questions) != len(contexts):
            raise ValueError(f"{len(questions)} questions for {len(contexts)} contexts")
        parts = [self._answer(tf.constant(list(questions[i:i + batch_size]), tf.string),
                              tf.constant(list(contexts[i:i + batch_size]), tf.string))
                 for i in range(0, len(questions), batch_size)]
        out = {k: np.concatenate([p[k].numpy() for p in parts]) if parts else np.zeros([0])
               for k in ("answer", "start", "end", "score")}
        out["answer"] = [a.decode("utf-8") for a in out["answer"]]
        return out


def make_qa_features(preprocessor, examples, chunk=256):
    """Training windows of ``examples`` (each with its first answer) as a dict of int32 numpy arrays ``(W, L)``
    / ``(W,)``: the model inputs and ``start_positions``/``end_positions``. Eager: tracing the ragged window
    arithmetic costs more than running it once over a SQuAD-sized file."""
    parts = []
    for i in range(0, len(examples), chunk):
        part = examples[i:i + chunk]
        features = preprocessor(tf.constant([e.question for e in part]), tf.constant([e.context for e in part]),
                         tf.constant([e.answers[0].start for e in part], tf.int64),
                         tf.constant([e.answers[0].end for e in part], tf.int64))
        parts.append({k: features[k].numpy().astype(np.int32) for k in INPUT_KEYS + LABEL_KEYS})
    return {k: np.concatenate([p[k] for p in parts]) for k in INPUT_KEYS + LABEL_KEYS}


def _dataset(features, batch_size, seed, length_bucket=0):
    """Shuffled (seeded, the same order in every process: exact resume), repeated, full batches; ``length_bucket``
    > 0 cuts each batch to its longest window rounded up to a multiple of it (:func:`cut_padding`: a SQuAD window
    holds ~150 real pieces of its 384, and the span logits mask the padding, so the loss is unchanged)."""
    count = len(features["token_ids"])
    ds = tf.data.Dataset.from_tensor_slices(features).shuffle(count, seed=seed, reshuffle_each_iteration=True)
    return cut_padding(ds.repeat().batch(batch_size, drop_remainder=True), length_bucket).prefetch(2)


def _examples(o):
    """``(train, held_out)`` questions from the options (held_out empty when nothing is to be scored)."""
    train = read_squad(o.train)
    held_out = read_squad(o.dev) if o.dev else []
    if o.holdout_fraction is not None:
        train, held_out = split_by_article(train, o.holdout_fraction, seed=o.seed)
    return (train[:o.max_examples] if o.max_examples else train), held_out


def evaluate_qa(qa, examples, batch_size=32):
    """Official v1.1 EM/F1 of ``qa`` (a :class:`BertQA`) on ``examples``; returns ``(scores, {id: answer})``."""
    answers = qa.answer([e.question for e in examples], [e.context for e in examples], batch_size)["answer"]
    predictions = {e.id: a for e, a in zip(examples, answers)}
    return squad_scores(predictions, {e.id: [g.text for g in e.answers] for e in examples}), predictions


class BertQAJob(BertFineTuningJob):
    """``kerasplm finetune bert-qa``: start/end logits over SQuAD windows on a BERT run, scored with EM/F1."""

    family, task, options_class, what, result_key = (FAMILY, "question_answering", BertQAOptions,
                                                     "BERT question answering", "qa")

    def read_examples(self, o):
        if o.train is None:
            raise ValueError("give the training file (train / --train)")
        self.train, self.held_out = _examples(o)
        return len(self.train)

    def build_data(self):
        super().build_data()   # the questions, the schedule
        o = self.options
        if self.resumed:
            stored = self.stored_model()
            self.backbone_config = stored.backbone.config
            serving = stored.preprocessor
        else:
            tokenizer, _ = self.start_from_bert(o.sequence_length, "sequence_length", wordpiece_only=True)
            self.write_config("custom", assets=BERT_ASSETS)
            # What the run stores with the model: windows padded to the longest of each request.
            serving = QuestionAnswerPreprocessor(tokenizer, o.sequence_length, o.doc_stride, o.max_query_length,
                                                 pad_to_length=False)
        self.preprocessor = serving
        preprocessor = QuestionAnswerPreprocessor(serving.tokenizer, o.sequence_length, o.doc_stride,
                                                  o.max_query_length)
        t0 = time.time()
        features = make_qa_features(preprocessor, self.train)
        self.windows = len(features["token_ids"])
        self.log(f"data: {len(self.train)} training questions -> {self.windows} windows "
                 f"({int((features['start_positions'] > 0).sum())} holding their answer) in {time.time() - t0:.0f}s; "
                 f"{len(self.held_out)} held-out questions")
        self.train_dataset = lambda: _dataset(features, o.batch_size, o.seed, o.length_bucket)
        self.qa = None

    def build_model(self):
        o = self.options
        return BertQuestionAnswerer(self.starting_backbone(BertBackbone), preprocessor=self.preprocessor,
                                    max_answer_length=o.max_answer_length, n_best=o.n_best)

    def result(self, trainer):
        """The trained :class:`BertQA` (made once: its answering function is traced when it scores)."""
        if self.qa is None:
            self.qa = BertQA(trainer.model, self.preprocessor)
        return self.qa

    def evaluate(self, trainer, summary):
        summary.update(train_questions=len(self.train), train_windows=self.windows)
        super().evaluate(trainer, summary)

    def score(self, qa):
        o = self.options
        scored = self.held_out[:o.max_dev_examples] if o.max_dev_examples else self.held_out
        if not scored:
            return None
        dev, predictions = evaluate_qa(qa, scored, o.eval_batch_size)
        self.run_dir.write_json(PREDICTIONS, predictions)
        return {"dev": dev}

    def dev_report(self, summary):
        dev = summary["dev"]
        return (f"dev exact match {dev['exact_match']:.2f} F1 {dev['f1']:.2f} ({dev['questions']} questions, "
                f"step {summary['step']})")


def finetune_bert_qa(out, options=None, log=print, **overrides):
    """Fine-tunes (or resumes) a question answering run in ``out``; scores the held-out questions; returns the
    summary (also ``metrics.json``), with ``"qa"`` the trained :class:`BertQA`."""
    return BertQAJob(out, options, log, **overrides).run()


def load_bert_qa(run_dir):
    """The :class:`BertQA` of a ``bert_qa`` run (:func:`kerasplm.runs.load_run`: the model, its preprocessor and
    decoding options, its latest checkpoint)."""
    return BertQA(load_run(run_dir, family=FAMILY, what="a BERT question answering run (kerasplm finetune bert-qa)"))
