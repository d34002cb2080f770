"""ELMo run directories (family ``elmo``: trained by ``kerasplm train elmo`` or converted from bilm-tf) and their use.

A run's ``config.json`` has task ``language_model`` and ``config["model"] = {"bilm": ElmoConfig fields,
"vocab_size": V or None, "num_sampled": n}``; ``vocab_size`` None is a converted biLM without its softmax. The
word vocabulary is the asset ``vocab`` = ``vocab.txt`` in bilm-tf's format (one token per line, ``<S>``, ``</S>``
and ``<UNK>`` among them). The checkpoint holds ``model`` (the :class:`ElmoLanguageModel`, or a checkpoint whose
``backbone`` is the :class:`ElmoBiLM` when there is no softmax: the same paths) and ``step``.

Reading and writing runs lives with the models so that the job (:mod:`kerasplm.jobs.elmo`), the converter
(:mod:`kerasplm.convert.elmo`) and the exporter all reach it without importing one another.

>>> elmo = load_elmo("runs/elmo")
>>> elmo.embed(["the play was good"])["elmo_layers"].shape      # (1, L+1, 4, 2P)
"""
import dataclasses
import os

import numpy as np
import tensorflow as tf

from kerasplm.models.elmo import ElmoBiLM, ElmoConfig, ElmoEmbedder, ElmoLanguageModel
from kerasplm.runs import RunDir
from kerasplm.text.characters import sentence_char_ids

__all__ = ["FAMILY", "TASK", "ASSETS", "BOS", "EOS", "UNK", "SPECIALS", "Elmo", "build_elmo_model", "elmo_model_config",
           "elmo_vocab", "load_elmo", "load_elmo_from_run", "plot_mix_weights", "read_vocab_file", "save_bilm_run",
           "vocab_text", "write_vocab_file"]

FAMILY = "elmo"
TASK = "language_model"
ASSETS = {"vocab": "vocab.txt"}
BOS, EOS, UNK = "<S>", "</S>", "<UNK>"
SPECIALS = (BOS, EOS, UNK)


# ------------------------------------------------------------------------------------------------ vocabulary
def vocab_text(vocab):
    """The vocabulary file's text: one token per line."""
    return "".join(w + "\n" for w in vocab)


def write_vocab_file(vocab, path):
    with open(path, "w", encoding="utf-8") as f:
        f.write(vocab_text(vocab))


def read_vocab_file(path):
    """bilm-tf's vocabulary file: one token per line; must hold ``<S>``, ``</S>`` and ``<UNK>``."""
    with open(path, encoding="utf-8") as f:
        vocab = [line.rstrip("\n") for line in f]
    missing = [s for s in SPECIALS if s not in vocab]
    if missing:
        raise ValueError(f"{path}: vocabulary lacks {', '.join(missing)}")
    if len(set(vocab)) != len(vocab):
        raise ValueError(f"{path}: duplicate tokens")
    return vocab


# ------------------------------------------------------------------------------------------------ the run's parts
def elmo_model_config(run, config):
    """``(ElmoConfig, vocab_size or None, num_sampled)`` of a run (a one-line ``RunDirError`` when malformed)."""
    model = config["model"]
    try:
        bilm = ElmoConfig(**model["bilm"]).validate()
        vocab_size = model.get("vocab_size")
        if vocab_size is not None and (not isinstance(vocab_size, int) or vocab_size <= 0):
            raise ValueError(f"vocab_size {vocab_size!r}")
        return bilm, vocab_size, int(model.get("num_sampled", 0))
    except (KeyError, TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"bad ELMo model config ({e})") from None


def elmo_vocab(run, config, expected=None):
    """The run's word list, checked to have ``expected`` words (the softmax's size) when given."""
    path = run.asset(config, "vocab")
    try:
        vocab = read_vocab_file(path)
    except (UnicodeDecodeError, ValueError) as e:
        raise run.error(config["assets"]["vocab"], f"bad vocabulary ({e})") from None
    if expected is not None and len(vocab) != expected:
        raise run.error(config["assets"]["vocab"], f"{len(vocab)} tokens, but the model has {expected}")
    return vocab


def build_elmo_model(bilm_config, vocab_size, num_sampled, name):
    """The run's model: an :class:`ElmoLanguageModel` over a fresh biLM, or the bare :class:`ElmoBiLM` when
    ``vocab_size`` is None (a converted biLM)."""
    bilm = ElmoBiLM.from_config_object(bilm_config, name=name)
    return ElmoLanguageModel(bilm, vocab_size, num_sampled) if vocab_size else bilm


# ------------------------------------------------------------------------------------------------ the loaded run
class Elmo:
    """A trained or converted biLM with its vocabulary: ``embed`` sentences, or make an :class:`ElmoEmbedder`.

    ``model`` is the :class:`ElmoLanguageModel` (None for a converted biLM without softmax), ``bilm`` the
    :class:`ElmoBiLM`, ``vocab`` the word list.
    """

    def __init__(self, bilm, vocab, model=None, config=None, step=None):
        self.bilm, self.vocab, self.model = bilm, vocab, model
        self.config, self.step = config or {}, step

    def char_ids(self, sentences):
        """Whitespace-tokenized ``sentences`` -> ``(char_ids (batch, n + 2, C) with <S>/</S>, tokens list)``."""
        tokens = tf.strings.split(tf.constant(list(sentences), tf.string))
        return sentence_char_ids(tokens, self.bilm.config.max_characters_per_token), tokens

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
    """Bar chart of a :class:`kerasplm.models.elmo.ScalarMix`'s softmax-normalised layer weights s_j (γ in the
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


def load_elmo_from_run(run, config):
    """The loader of family ``elmo`` runs (``kerasplm.runs.load_run``): an :class:`Elmo`."""
    bilm_config, vocab_size, num_sampled = elmo_model_config(run, config)
    vocab = elmo_vocab(run, config, vocab_size)
    model = build_elmo_model(bilm_config, vocab_size, num_sampled, config["preset"])
    step = tf.Variable(0, dtype=tf.int64)
    if vocab_size:
        run.restore(model=model, step=step)
        return Elmo(model.backbone, vocab, model, config, int(step.numpy()))
    run.restore(model=tf.train.Checkpoint(backbone=model), step=step)  # same paths as an LM's backbone
    return Elmo(model, vocab, None, config, int(step.numpy()))


def load_elmo(run_dir):
    """The :class:`Elmo` of run directory ``run_dir`` (trained or converted)."""
    run = RunDir(run_dir)
    return load_elmo_from_run(run, run.read_config(family=FAMILY, what="ELMo"))


def save_bilm_run(bilm, vocab, out, options=None, preset="custom"):
    """Write run directory ``out`` (family ``elmo``, no softmax) holding ``bilm``'s weights and the word list
    ``vocab`` (what ``kerasplm convert elmo`` writes; ``load_elmo(out)`` reads it back). Returns the RunDir."""
    run = RunDir(out)
    os.makedirs(out, exist_ok=True)
    write_vocab_file(vocab, run.file(ASSETS["vocab"]))
    checkpoint = tf.train.Checkpoint(model=tf.train.Checkpoint(backbone=bilm), step=tf.Variable(0, dtype=tf.int64))
    tf.train.CheckpointManager(checkpoint, run.checkpoint_dir, max_to_keep=1).save()
    run.write_config(FAMILY, TASK, preset,
                     {"bilm": dataclasses.asdict(bilm.config), "vocab_size": None, "num_sampled": 0},
                     dict(options or {}), assets=ASSETS)
    return run
