"""Train an ELMo biLM: the ``kerasplm train elmo`` job (:class:`ElmoJob`).

Data (bilm-tf's format, simplified): the corpus is whitespace-tokenized text; every line is cut into
sentences after ``.``, ``!`` and ``?`` tokens; each sentence becomes ``<S> words </S>``; the sentences are
concatenated into one token stream and cut into windows of ``window`` tokens (bilm-tf's ``unroll_steps``,
20), each window one training example (its LSTM state starts at zero: see :mod:`kerasplm.models.elmo.model`).
``--corpus`` is a text file (the last ``heldout_fraction`` of its sentences are held out) or a WikiText
directory (``wiki.valid.tokens`` trains, ``wiki.test.tokens`` is held out, as ``../shared/data/wikitext2``
has no train split). The word vocabulary (asset ``vocab.txt``, bilm-tf's format) is ``<S>``, ``</S>``,
``<UNK>`` and the ``vocab_size`` most frequent training words, sorted by frequency (the log-uniform sampler
of the sampled softmax assumes that order).

Optimisation as bilm-tf: Adagrad (learning rate 0.2, initial accumulator 1.0), global gradient norm
clipped to 10. Sampled-softmax steps are not XLA-compiled (its accidental-hit removal has no XLA kernel).
The held-out evaluation reports each direction's perplexity, exp(forward_loss) and
exp(backward_loss), exactly (sums over tokens, full softmax).

The run directory (family ``elmo``, task ``language_model``) stores the :class:`ElmoLanguageModel` and its
:class:`kerasplm.text.characters.ElmoPreprocessor` (the vocabulary file); :func:`kerasplm.runs.load_run` reads it
and ``load_elmo`` (:mod:`kerasplm.models.elmo.runs`, re-exported here) wraps it as an :class:`Elmo`. A resumed run
is rebuilt from its config.json (:meth:`ElmoJob.build_model`).

>>> summary = train_elmo("runs/elmo", corpus="../shared/data/wikitext2", preset="elmo_tiny", steps=200)
>>> elmo = load_elmo("runs/elmo")
>>> elmo.embed(["the play was good"])["elmo_layers"].shape      # (1, 3, 4, 2P)
"""
import functools
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf

from kerasplm.data.sentences import read_sentence_lines
from kerasplm.models.elmo.manifest import WIKITEXT_FILES, ElmoOptions
from kerasplm.jobs.job import Job
from kerasplm.models.elmo.model import ElmoBiLM, ElmoLanguageModel
from kerasplm.models.elmo.runs import ASSETS, BOS, EOS, FAMILY, SPECIALS, TASK, UNK, Elmo, load_elmo, vocab_text
from kerasplm.models.presets import get_preset
from kerasplm.runs import attach_run_info
from kerasplm.text.characters import BOS_CHAR, EOS_CHAR, ElmoPreprocessor, boundary_row, word_char_ids
from kerasplm.text.word_vocab import build_word_vocab

__all__ = ["ElmoJob", "ElmoOptions", "WindowedCorpus", "VOCABULARY", "corpus_splits", "load_elmo", "read_sentences",
           "train_elmo"]

SENTENCE_END = {".", "!", "?"}


# ------------------------------------------------------------------------------------------------ data
# ``read_sentences(path, max_sentences=None)``: the whitespace tokens of ``path``, cut into sentences after ., ! and ?
# (empty lines skipped; :func:`kerasplm.data.sentences.read_sentence_lines`).
read_sentences = functools.partial(read_sentence_lines, split_after=SENTENCE_END, too_few="no text")
# The word vocabulary (:func:`kerasplm.text.word_vocab.build_word_vocab` of the training sentences, ``max_words`` the
# ``vocab_size`` option): ``<S> </S> <UNK>`` + the most frequent words (ties: alphabetical).
VOCABULARY = dict(special_tokens=SPECIALS, split=None)


def corpus_splits(options):
    """(training sentences, held-out sentences) of ``options.corpus``."""
    o = options
    if o.corpus is None:
        raise ValueError("give a corpus (corpus= / --corpus PATH)")
    if os.path.isdir(o.corpus):
        train, heldout = (read_sentences(os.path.join(o.corpus, f), o.max_sentences) for f in WIKITEXT_FILES)
        return train, heldout
    sentences = read_sentences(o.corpus, o.max_sentences)
    cut = len(sentences) - max(1, int(len(sentences) * o.heldout_fraction))
    if cut < 1:
        raise ValueError(f"{o.corpus}: {len(sentences)} sentence(s); need at least 2 to hold some out")
    return sentences[:cut], sentences[cut:]


def char_ids_of_types(types, max_characters):
    """Character rows of token strings (``<S>``/``</S>`` as their boundary rows): int32 numpy (n, C)."""
    table = word_char_ids(tf.constant(types, tf.string), max_characters).numpy()
    for i, t in enumerate(types):
        if t in (BOS, EOS):
            table[i] = boundary_row(BOS_CHAR if t == BOS else EOS_CHAR, max_characters).numpy()
    return table


class WindowedCorpus:
    """Sentences as windows of one ``<S> s1 </S> <S> s2 </S> ...`` stream, ready for ``tf.data``.

    ``types`` (n_windows, window) indexes ``type_chars`` (row 0: padding, all 0) and ``type_ids`` (word id,
    −1 at padding, ``<UNK>`` for out-of-vocabulary words).
    """

    def __init__(self, sentences, vocab, window, max_characters):
        index = {w: i for i, w in enumerate(vocab)}
        stream = [t for s in sentences for t in (BOS, *s, EOS)]
        type_names = sorted(set(stream))
        position = {t: i + 1 for i, t in enumerate(type_names)}
        self.type_chars = np.concatenate([np.zeros((1, max_characters), np.int32),
                                          char_ids_of_types(type_names, max_characters)])
        self.type_ids = np.array([-1] + [index.get(t, index[UNK]) for t in type_names], np.int32)
        flat = np.array([position[t] for t in stream], np.int32)
        flat = np.concatenate([flat, np.zeros(-len(flat) % window, np.int32)])
        self.types = flat.reshape(-1, window)
        self.num_tokens = len(stream)

    def dataset(self, batch_size, shuffle=False, seed=0, repeat=False, limit=None):
        chars, ids = tf.constant(self.type_chars), tf.constant(self.type_ids)
        ds = tf.data.Dataset.from_tensor_slices(self.types if limit is None else self.types[:limit])
        if shuffle:
            ds = ds.shuffle(len(self.types), seed=seed, reshuffle_each_iteration=True)
        if repeat:
            ds = ds.repeat()
        ds = ds.batch(batch_size, drop_remainder=repeat)
        return ds.map(lambda t: {"char_ids": tf.gather(chars, t), "token_ids": tf.gather(ids, t)}).prefetch(2)


# ------------------------------------------------------------------------------------------------ the job
class ElmoJob(Job):
    """``kerasplm train elmo``: a biLM on a text corpus, scored by held-out forward and backward perplexity."""

    family, task, options_class, what, result_key = FAMILY, TASK, ElmoOptions, "ELMo", "elmo"
    checkpoint_every = 1000
    clip_norm = 10.0

    def plan(self, options, overrides):
        # The corpus is stored absolute, so that a resume from another directory finds it.
        if overrides.get("corpus"):
            overrides["corpus"] = os.path.abspath(overrides["corpus"])
        if options is not None and options.corpus:
            self.given_options = options.replace(corpus=os.path.abspath(options.corpus))
        return overrides

    def build_data(self):
        o, run, t0 = self.options, self.run_dir, time.time()
        train_sentences, heldout_sentences = corpus_splits(o)
        if self.resumed:   # the stored model's config and vocabulary (its weights: the checkpoint)
            stored = self.stored_model()
            self.bilm_config, self.preprocessor = stored.backbone.config, stored.preprocessor
        else:
            vocab = build_word_vocab(train_sentences, max_words=o.vocab_size, **VOCABULARY)
            if run.writer:   # the vocabulary file, read back (a multi-worker job's other workers keep it in memory)
                run.write_text(ASSETS["vocab"], vocab_text(vocab))
                vocab = run.file(ASSETS["vocab"])
            self.bilm_config = get_preset(o.preset, **({} if o.dropout is None else {"dropout": o.dropout}))
            self.preprocessor = ElmoPreprocessor(vocab, self.bilm_config.max_characters_per_token)
        self.vocab = self.preprocessor.vocabulary
        chars = self.bilm_config.max_characters_per_token
        self.train = WindowedCorpus(train_sentences, self.vocab, o.window, chars)
        self.heldout = WindowedCorpus(heldout_sentences, self.vocab, o.window, chars)
        self.log(f"data: {self.train.num_tokens} training tokens ({len(self.train.types)} windows of {o.window}), "
                 f"{self.heldout.num_tokens} held-out tokens; vocabulary {len(self.vocab)} words; "
                 f"{time.time() - t0:.1f}s")
        if not self.resumed:  # the run is valid: config.json is written once build_model made the model
            self.write_config(o.preset, assets=ASSETS)
        self.sampled = 0 < o.num_sampled < len(self.vocab)
        if self.sampled:   # the sampled softmax's accidental-hit removal has no XLA kernel
            self.options = o.replace(jit_compile=False)
        self.train_dataset = lambda: self.train.dataset(o.batch_size, shuffle=True, seed=o.seed, repeat=True)
        self.eval_dataset = lambda: self.heldout.dataset(o.batch_size, limit=o.eval_windows)

    def build_model(self):
        bilm = ElmoBiLM.from_config_object(self.bilm_config, name=self.config["preset"])
        return ElmoLanguageModel(bilm, len(self.vocab), self.options.num_sampled, preprocessor=self.preprocessor)

    def build_optimizer(self):
        return keras.optimizers.Adagrad(self.options.learning_rate, initial_accumulator_value=1.0)

    def compute_loss(self, model, batch, training):
        return ElmoLanguageModel.trainer_loss(model, batch, training)

    def evaluate(self, trainer, summary):
        history = trainer.history
        if history.get("eval_step") and history["eval_step"][-1] == trainer.step:   # fit evaluated at its end
            metrics = {k: history[f"eval_{k}"][-1] for k in ("forward_loss", "backward_loss")}
        else:
            metrics = trainer.evaluate(self.eval_dataset)
        summary.update({"heldout_forward_loss": metrics["forward_loss"],
                        "heldout_backward_loss": metrics["backward_loss"],
                        "forward_perplexity": math.exp(metrics["forward_loss"]),
                        "backward_perplexity": math.exp(metrics["backward_loss"]),
                        "training_tokens": self.train.num_tokens, "vocab_size": len(self.vocab),
                        "sampled_softmax": self.sampled})

    def describe(self, summary):
        self.log(f"step {summary['step']}: held-out perplexity forward {summary['forward_perplexity']:.1f}, "
                 f"backward {summary['backward_perplexity']:.1f}")

    def result(self, trainer):
        return Elmo(attach_run_info(trainer.model, self.run_dir.path, self.config, trainer.step))


def train_elmo(out, options=None, log=print, **overrides):
    """Train (or resume) a biLM in run directory ``out``; report held-out forward/backward perplexity.

    ``options``: an :class:`ElmoOptions`; keyword ``overrides`` replace single options
    (``train_elmo(out, corpus=..., preset="elmo_tiny", steps=100)``). Stops at ``steps`` (absolute) or after
    ``time_budget`` seconds or on SIGTERM; an existing run in ``out`` is resumed with its stored options.
    Returns the summary (also metrics.json) with ``"elmo"``: the trained :class:`Elmo`.
    """
    return ElmoJob(out, options, log, **overrides).run()
