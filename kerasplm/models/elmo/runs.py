"""ELMo run directories (family ``elmo``: trained by ``kerasplm train elmo`` or converted from bilm-tf) and their use.

A run's ``config.json`` has task ``language_model``; its ``model`` is the :class:`ElmoLanguageModel`'s Keras config
(the biLM's :class:`ElmoConfig` fields as its backbone, ``vocab_size``, ``num_sampled``; ``vocab_size`` None is a
converted biLM without its softmax) and its ``preprocessor`` an
:class:`kerasplm.text.characters.ElmoPreprocessor` naming the word vocabulary, the asset ``vocab`` = ``vocab.txt``
in bilm-tf's format (one token per line, ``<S>``, ``</S>`` and ``<UNK>`` among them). The checkpoint holds ``model``
(the :class:`ElmoLanguageModel`; without a softmax only its ``backbone``, the :class:`ElmoBiLM`) and ``step``.
:func:`kerasplm.runs.load_run` reads any of them; :func:`load_elmo` wraps what it returns as an :class:`Elmo`.

Writing softmax-less runs (:func:`save_bilm_run`) lives with the models so that the converter
(:mod:`kerasplm.models.elmo.convert`) and the tests reach it without importing the job.

>>> elmo = load_elmo("runs/elmo")
>>> elmo.embed(["the play was good"])["elmo_layers"].shape      # (1, L+1, 4, 2P)
"""
import os

import numpy as np
import tensorflow as tf

from kerasplm.models.elmo.model import ElmoBiLM, ElmoEmbedder, ElmoLanguageModel
from kerasplm.runs import RunDir, load_run
from kerasplm.text.characters import (BOS_TOKEN, EOS_TOKEN, SPECIAL_TOKENS, UNK_TOKEN, ElmoPreprocessor,
                                      read_word_vocab, word_vocab_text, write_word_vocab)

__all__ = ["FAMILY", "TASK", "ASSETS", "BOS", "EOS", "UNK", "SPECIALS", "Elmo", "ElmoPreprocessor", "load_elmo",
           "plot_mix_weights", "read_vocab_file", "save_bilm_run", "vocab_text", "write_vocab_file"]

FAMILY = "elmo"
TASK = "language_model"
ASSETS = {"vocab": "vocab.txt"}
BOS, EOS, UNK, SPECIALS = BOS_TOKEN, EOS_TOKEN, UNK_TOKEN, SPECIAL_TOKENS
# bilm-tf's vocabulary file (kept under the names this module always had).
vocab_text, write_vocab_file, read_vocab_file = word_vocab_text, write_word_vocab, read_word_vocab


# ------------------------------------------------------------------------------------------------ the loaded run
class Elmo:
    """A trained or converted biLM with its vocabulary: ``embed`` sentences, or make an :class:`ElmoEmbedder`.

    Args:
      model: the :class:`ElmoLanguageModel` of a run (what :func:`kerasplm.runs.load_run` returns, its
        preprocessor and ``run_info`` attached; ``vocab_size`` None for a converted biLM without softmax), or a bare
        :class:`ElmoBiLM` (wrapped in a softmax-less one).
      preprocessor: an :class:`ElmoPreprocessor`, or a word list / vocabulary file to make one (default: the
        model's own).
    ``model`` is the language model, ``bilm`` the :class:`ElmoBiLM`, ``vocab`` the word list, ``config`` and
    ``step`` the run's config.json and training step (empty and None for a model that did not come from a run).
    """

    def __init__(self, model, preprocessor=None):
        if isinstance(model, ElmoBiLM):
            model = ElmoLanguageModel(model, vocab_size=None)
        self.model = model
        preprocessor = getattr(model, "preprocessor", None) if preprocessor is None else preprocessor
        if preprocessor is None:
            raise ValueError("an Elmo needs a word vocabulary (an ElmoPreprocessor); the model has none attached")
        if not isinstance(preprocessor, ElmoPreprocessor):
            preprocessor = ElmoPreprocessor(preprocessor, model.backbone.config.max_characters_per_token)
        self.preprocessor = preprocessor
        run_info = getattr(model, "run_info", None)   # set by load_run and by the job
        self.config = run_info.config if run_info else {}
        self.step = run_info.step if run_info else None

    @property
    def bilm(self):
        return self.model.backbone

    @property
    def vocab(self):
        return self.preprocessor.vocabulary

    def char_ids(self, sentences):
        """Whitespace-tokenized ``sentences`` -> ``(char_ids (batch, n + 2, C) with <S>/</S>, tokens list)``."""
        tokens = self.preprocessor.tokenize(tf.constant(list(sentences), tf.string))
        return self.preprocessor.char_ids(tokens), tokens

    def embed(self, sentences):
        """``{"elmo_layers": (batch, L+1, n, 2P), "mask": (batch, n), "tokens": list of lists}`` (numpy;
        ``<S>``/``</S>`` dropped, 0 past each sentence's end)."""
        ids, tokens = self.char_ids(sentences)
        out = self.bilm(ids, training=False)
        n = ids.shape[1] - 2
        mask = tf.sequence_mask(tokens.row_lengths(), n)
        layers = out["layers"][:, :, 1:n + 1] * tf.cast(mask, out["layers"].dtype)[:, None, :, None]
        return {"elmo_layers": layers.numpy(), "mask": mask.numpy(),
                "tokens": [[t.decode("utf-8", "replace") for t in row] for row in tokens.to_list()]}

    def embedder(self, num_mixes=1, layer_norm=False):
        """A fresh :class:`ElmoEmbedder` (trainable mixes) over this frozen biLM."""
        return ElmoEmbedder(self.bilm, num_mixes=num_mixes, layer_norm=layer_norm)

    def nearest_contexts(self, word, query, sentences, layer=-1, k=5, center=False):
        """The paper's "play" example (table 4): the ``k`` sentences whose use of ``word`` is closest (cosine of
        ``layer``'s representation, default the top biLSTM layer) to its use in ``query``.

        ``center``: subtract the mean of the word's vectors (query and sentences) first. A small biLM's vectors of
        one word share a large common direction (raw cosines all near 1); centring compares what the contexts add.
        Returns ``[(similarity, sentence)]``, best first, over the sentences of ``sentences`` containing ``word``
        (its first occurrence in each).
        """
        def vectors(texts):
            out = self.embed(texts)
            rows = []
            for i, tokens in enumerate(out["tokens"]):
                rows.append(out["elmo_layers"][i, layer, tokens.index(word)] if word in tokens else None)
            return rows

        (q,) = vectors([query])
        if q is None:
            raise ValueError(f"{word!r} is not a token of the query {query!r}")
        hits = [(s, v) for s, v in zip(sentences, vectors(sentences)) if v is not None]
        if center:
            mean = np.mean([q] + [v for _, v in hits], axis=0)
            q, hits = q - mean, [(s, v - mean) for s, v in hits]
        scored = [(float(v @ q / (np.linalg.norm(v) * np.linalg.norm(q) + 1e-12)), s) for s, v in hits]
        return sorted(scored, key=lambda pair: -pair[0])[:k]


def plot_mix_weights(mix, ax=None, title=None):
    """Bar chart of a :class:`kerasplm.models.elmo.model.ScalarMix`'s softmax-normalised layer weights s_j (γ in the
    title); layer 0 is the character-CNN token layer. Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt  # noqa: PLC0415  (plotting only: matplotlib is no dependency of the models)

    if ax is None:
        _, ax = plt.subplots(figsize=(4, 3))
    weights = mix.layer_weights.numpy()
    labels = ["token"] + [f"biLSTM {j}" for j in range(1, len(weights))]
    ax.bar(labels, weights)
    ax.set_ylabel("s_j")
    ax.set_ylim(0, max(1.0, float(weights.max())))
    ax.set_title(title or f"ELMo layer weights (γ = {float(mix.gamma.numpy()):.2f})")
    return ax


def load_elmo(run_dir):
    """The :class:`Elmo` of run directory ``run_dir`` (trained or converted; :func:`kerasplm.runs.load_run`)."""
    return Elmo(load_run(run_dir, family=FAMILY, what="an ELMo run (kerasplm train elmo / convert elmo)"))


def save_bilm_run(bilm, vocab, out, options=None, preset="custom"):
    """Write run directory ``out`` (family ``elmo``, no softmax) holding ``bilm``'s weights and the word list
    ``vocab`` (what ``kerasplm convert elmo`` writes; ``load_elmo(out)`` reads it back). Returns the RunDir.

    The checkpoint's ``model`` is ``backbone`` alone, as a softmax-less :class:`ElmoLanguageModel` holds it."""
    run = RunDir(out)
    os.makedirs(out, exist_ok=True)
    write_vocab_file(vocab, run.file(ASSETS["vocab"]))
    preprocessor = ElmoPreprocessor(run.file(ASSETS["vocab"]), bilm.config.max_characters_per_token)
    checkpoint = tf.train.Checkpoint(model=tf.train.Checkpoint(backbone=bilm), step=tf.Variable(0, dtype=tf.int64))
    tf.train.CheckpointManager(checkpoint, run.checkpoint_dir, max_to_keep=1).save()
    run.write_config(FAMILY, TASK, preset, ElmoLanguageModel(bilm, vocab_size=None), dict(options or {}),
                     assets=ASSETS, preprocessor=preprocessor)
    return run
