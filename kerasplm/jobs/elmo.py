"""Train, reload and use an ELMo biLM; the ``kerasplm train elmo`` job.

Data (bilm-tf's format, simplified): the corpus is whitespace-tokenized text; every line is cut into
sentences after ``.``, ``!`` and ``?`` tokens; each sentence becomes ``<S> words </S>``; the sentences are
concatenated into one token stream and cut into windows of ``window`` tokens (bilm-tf's ``unroll_steps``,
20), each window one training example (its LSTM state starts at zero: see :mod:`kerasplm.models.elmo`).
``--corpus`` is a text file (the last ``heldout_fraction`` of its sentences are held out) or a WikiText
directory (``wiki.valid.tokens`` trains, ``wiki.test.tokens`` is held out, as ``../shared/data/wikitext2``
has no train split). The word vocabulary (asset ``vocab.txt``, bilm-tf's format) is ``<S>``, ``</S>``,
``<UNK>`` and the ``vocab_size`` most frequent training words, sorted by frequency (the log-uniform sampler
of the sampled softmax assumes that order).

Optimisation as bilm-tf: Adagrad (learning rate 0.2, initial accumulator 1.0), global gradient norm
clipped to 10. Sampled-softmax steps are not XLA-compiled (its accidental-hit removal has no XLA kernel).
The held-out evaluation reports each direction's perplexity, exp(forward_loss) and
exp(backward_loss), exactly (sums over tokens, full softmax).

Run directory: family ``elmo``, task ``language_model``, ``config["model"] = {"bilm": ElmoConfig fields,
"vocab_size": V or None, "num_sampled": n}``; ``vocab_size`` None is a converted biLM without its softmax.

>>> summary = train_elmo("runs/elmo", corpus="../shared/data/wikitext2", preset="elmo_tiny", steps=200)
>>> elmo = load_elmo("runs/elmo")
>>> elmo.embed(["the play was good"])["elmo_layers"].shape      # (1, 3, 4, 2P)
"""
import collections
import dataclasses
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf

from kerasplm.models.elmo import ElmoBiLM, ElmoConfig, ElmoEmbedder, ElmoLanguageModel
from kerasplm.models.presets import get_preset
from kerasplm.families.elmo import WIKITEXT_FILES, ElmoOptions
from kerasplm.jobs.job import fit_recorded, open_run, restores_global_policy, training_summary
from kerasplm.options import RUN
from kerasplm.runs import RunDir
from kerasplm.text.characters import BOS_CHAR, EOS_CHAR, boundary_row, sentence_char_ids, word_char_ids

FAMILY = "elmo"
ASSETS = {"vocab": "vocab.txt"}
BOS, EOS, UNK = "<S>", "</S>", "<UNK>"
SPECIALS = (BOS, EOS, UNK)
SENTENCE_END = {".", "!", "?"}


# ------------------------------------------------------------------------------------------------ data
def read_sentences(path, max_sentences=None):
    """Whitespace tokens of ``path``, cut into sentences after ., ! and ? (empty lines skipped)."""
    sentences = []
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, 1):
            current = []
            for token in line.split():
                current.append(token)
                if token in SENTENCE_END:
                    sentences.append(current)
                    current = []
            if current:
                sentences.append(current)
            if max_sentences and len(sentences) >= max_sentences:
                return sentences[:max_sentences]
    if not sentences:
        raise ValueError(f"{path}: no text")
    return sentences


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


def build_vocab(sentences, vocab_size):
    """``<S> </S> <UNK>`` + the ``vocab_size`` most frequent words (ties: alphabetical)."""
    counts = collections.Counter(w for s in sentences for w in s if w not in SPECIALS)
    return list(SPECIALS) + [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:vocab_size]]


def write_vocab_file(vocab, path):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(w + "\n" for w in vocab))


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


# ------------------------------------------------------------------------------------------------ trained model
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
    import matplotlib.pyplot as plt  # noqa: PLC0415

    if ax is None:
        _, ax = plt.subplots(figsize=(4, 3))
    weights = mix.layer_weights.numpy()
    labels = ["token"] + [f"biLSTM {j}" for j in range(1, len(weights))]
    ax.bar(labels, weights)
    ax.set_ylabel("s_j")
    ax.set_ylim(0, max(1.0, float(weights.max())))
    ax.set_title(title or f"ELMo layer weights (γ = {float(mix.gamma.numpy()):.2f})")
    return ax


def _model_config(run, config):
    model = config["model"]
    try:
        bilm = ElmoConfig(**model["bilm"]).validate()
        vocab_size = model.get("vocab_size")
        if vocab_size is not None and (not isinstance(vocab_size, int) or vocab_size <= 0):
            raise ValueError(f"vocab_size {vocab_size!r}")
        return bilm, vocab_size, int(model.get("num_sampled", 0))
    except (KeyError, TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"bad ELMo model config ({e})") from None


def _vocab(run, config, expected=None):
    path = run.asset(config, "vocab")
    try:
        vocab = read_vocab_file(path)
    except (UnicodeDecodeError, ValueError) as e:
        raise run.error(config["assets"]["vocab"], f"bad vocabulary ({e})") from None
    if expected is not None and len(vocab) != expected:
        raise run.error(config["assets"]["vocab"], f"{len(vocab)} tokens, but the model has {expected}")
    return vocab


def build_model(bilm_config, vocab_size, num_sampled, name):
    bilm = ElmoBiLM.from_config_object(bilm_config, name=name)
    return ElmoLanguageModel(bilm, vocab_size, num_sampled) if vocab_size else bilm


def load_elmo_from_run(run, config):
    """The loader of family ``elmo`` runs (``kerasplm.runs.load_run``): an :class:`Elmo`."""
    bilm_config, vocab_size, num_sampled = _model_config(run, config)
    vocab = _vocab(run, config, vocab_size)
    model = build_model(bilm_config, vocab_size, num_sampled, config["preset"])
    step = tf.Variable(0, dtype=tf.int64)
    if vocab_size:
        run.restore(model=model, step=step)
        return Elmo(model.backbone, vocab, model, config, int(step.numpy()))
    run.restore(model=tf.train.Checkpoint(backbone=model), step=step)  # same paths as an LM's backbone
    return Elmo(model, vocab, None, config, int(step.numpy()))


def save_bilm_run(bilm, vocab, out, options=None, preset="custom"):
    """Write run directory ``out`` (family ``elmo``, no softmax) holding ``bilm``'s weights and the word list
    ``vocab`` (what ``kerasplm convert elmo`` writes; ``load_elmo(out)`` reads it back). Returns the RunDir."""
    run = RunDir(out)
    os.makedirs(out, exist_ok=True)
    write_vocab_file(vocab, run.file(ASSETS["vocab"]))
    checkpoint = tf.train.Checkpoint(model=tf.train.Checkpoint(backbone=bilm), step=tf.Variable(0, dtype=tf.int64))
    tf.train.CheckpointManager(checkpoint, run.checkpoint_dir, max_to_keep=1).save()
    run.write_config(FAMILY, "language_model", preset,
                     {"bilm": dataclasses.asdict(bilm.config), "vocab_size": None, "num_sampled": 0},
                     dict(options or {}), assets=ASSETS)
    return run


def load_elmo(run_dir):
    run = RunDir(run_dir)
    return load_elmo_from_run(run, run.read_config(family=FAMILY, what="ELMo"))


# ------------------------------------------------------------------------------------------------ the job
@restores_global_policy
def train_elmo(out, options=None, log=print, **overrides):
    """Train (or resume) a biLM in run directory ``out``; report held-out forward/backward perplexity.

    ``options``: an :class:`ElmoOptions`; keyword ``overrides`` replace single options
    (``train_elmo(out, corpus=..., preset="elmo_tiny", steps=100)``). Stops at ``steps`` (absolute) or after
    ``time_budget`` seconds or on SIGTERM; an existing run in ``out`` is resumed with its stored options.
    Returns the summary (also metrics.json) with ``"elmo"``: the trained :class:`Elmo`.
    """
    if overrides.get("corpus"):  # stored absolute, so a resume from another directory finds it
        overrides["corpus"] = os.path.abspath(overrides["corpus"])
    if options is not None and options.corpus:
        options = options.replace(corpus=os.path.abspath(options.corpus))
    run, o, config, previous_history = open_run(out, FAMILY, ElmoOptions, options, overrides, what="ELMo",
                                                check_config=_model_config)
    t0 = time.time()
    train_sentences, heldout_sentences = corpus_splits(o)
    vocab_path = run.file(ASSETS["vocab"])
    if config is None:
        os.makedirs(out, exist_ok=True)
        write_vocab_file(build_vocab(train_sentences, o.vocab_size), vocab_path)
        vocab = read_vocab_file(vocab_path)
        bilm_config = get_preset(o.preset)
        model_entry = {"bilm": dataclasses.asdict(bilm_config), "vocab_size": len(vocab), "num_sampled": o.num_sampled}
    else:
        log(f"resuming run in {out} (preset {config['preset']})")
        bilm_config, _, _ = _model_config(run, config)
        vocab = _vocab(run, config, config["model"]["vocab_size"])
        model_entry = config["model"]
    chars = bilm_config.max_characters_per_token
    train = WindowedCorpus(train_sentences, vocab, o.window, chars)
    heldout = WindowedCorpus(heldout_sentences, vocab, o.window, chars)
    log(f"data: {train.num_tokens} training tokens ({len(train.types)} windows of {o.window}), {heldout.num_tokens} "
        f"held-out tokens; vocabulary {len(vocab)} words; {time.time() - t0:.1f}s")
    if config is None:  # the run is valid
        config = run.write_config(FAMILY, "language_model", o.preset, model_entry, o.stored(RUN), assets=ASSETS)
    sampled = 0 < o.num_sampled < len(vocab)
    trainer = _trainer(run, o, bilm_config, len(vocab), config["preset"], jit=False if sampled else o.jit_compile)
    history, train_seconds = fit_recorded(
        run, trainer, previous_history,
        lambda: train.dataset(o.batch_size, shuffle=True, seed=o.seed, repeat=True), o,
        eval_dataset=lambda: heldout.dataset(o.batch_size, limit=o.eval_windows))
    summary = training_summary(trainer, history, train_seconds)
    elmo = Elmo(trainer.model.backbone, vocab, trainer.model, config, trainer.step)
    if trainer.stop_reason != "sigterm":
        if history.get("eval_step") and history["eval_step"][-1] == trainer.step:   # fit evaluated at its end
            metrics = {k: history[f"eval_{k}"][-1] for k in ("forward_loss", "backward_loss")}
        else:
            metrics = trainer.evaluate(lambda: heldout.dataset(o.batch_size, limit=o.eval_windows))
        summary.update({"heldout_forward_loss": metrics["forward_loss"],
                        "heldout_backward_loss": metrics["backward_loss"],
                        "forward_perplexity": math.exp(metrics["forward_loss"]),
                        "backward_perplexity": math.exp(metrics["backward_loss"]),
                        "training_tokens": train.num_tokens, "vocab_size": len(vocab), "sampled_softmax": sampled})
        run.write_json(run.METRICS, summary)
        log(f"step {trainer.step}: held-out perplexity forward {summary['forward_perplexity']:.1f}, "
            f"backward {summary['backward_perplexity']:.1f}")
    trainer.close()
    summary["elmo"] = elmo
    return summary


def _trainer(run, o, bilm_config, vocab_size, name, jit):
    from kerasplm.training import Trainer  # noqa: PLC0415

    return Trainer(model=lambda: build_model(bilm_config, vocab_size, o.num_sampled, name),
                   optimizer=lambda: keras.optimizers.Adagrad(o.learning_rate, initial_accumulator_value=1.0),
                   compute_loss=ElmoLanguageModel.trainer_loss, jit_compile=jit, clip_norm=10.0,
                   checkpoint_dir=run.checkpoint_dir, checkpoint_every=1000, log_dir=run.log_dir, seed=o.seed,
                   verbose=o.verbose)
