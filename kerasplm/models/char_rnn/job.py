"""``kerasplm train char-rnn``: a character-level RNN language model (seed ``001_*`` §2.2) on a text file.

The language-modelling rails are the GPT job's (:mod:`kerasplm.models.gpt.job`; its corpus helpers are the data
floor's, :mod:`kerasplm.data.corpus`): the held-out text is
``--valid-corpus`` or the last ``valid_fraction`` of the corpus (:func:`read_corpus`), the stream
``<|endoftext|> text`` is cut into windows of ``seq_len + 1`` characters at a seeded offset and in a seeded order
per epoch (:func:`make_lm_dataset`: a resumed run sees the batches an uninterrupted one would), the held-out
windows are consecutive, so every held-out character is predicted once. What differs:

* the vocabulary is the training text's characters (:mod:`kerasplm.text.char_vocab`), stored in the run as
  ``chars.json``; a held-out character the training text lacks is ``<unk>``;
* each window starts from a zero state (the seed's random sampling of subsequences; no state is carried);
* Adam at a constant learning rate with gradients clipped to global norm ``clip_norm`` (the seed's clipping).

``metrics.json`` holds the held-out loss in nats per character, its perplexity per character exp(loss) and
bits per character loss / ln 2, and samples. The run (family ``char_rnn``, task ``char_lm``) stores the
:class:`CharRNNLanguageModel` with its :class:`CharacterTokenizer` as preprocessor; ``kerasplm generate``,
``score`` and ``export generator`` use it through :class:`kerasplm.models.gpt.generator.TextGenerator`.

>>> summary = train_char_rnn("runs/char", corpus="../shared/data/tiny_shakespeare/input.txt", time_budget=600)
>>> summary["eval_perplexity"], summary["eval_bits_per_char"]
"""
import math
import os
import time

import keras

from kerasplm.data.corpus import encode_text, make_lm_dataset, read_corpus
from kerasplm.models.char_rnn.manifest import CharRNNOptions
from kerasplm.jobs.job import Job
from kerasplm.models.char_rnn.model import CharRNNBackbone, CharRNNLanguageModel
from kerasplm.models.gpt.generator import TextGenerator
from kerasplm.models.presets import get_preset
from kerasplm.runs import attach_run_info
from kerasplm.runs.serialization import attach_preprocessor
from kerasplm.text.char_vocab import CharacterTokenizer, build_char_vocab, write_char_vocab

FAMILY = "char_rnn"
TASK = "char_lm"
ASSETS = {"char_vocab": "chars.json"}
OVERRIDES = ("cell", "num_layers", "units", "embedding_dim", "dropout")


def new_model_config(options, vocab_size):
    """The preset's config with the options' overrides and the vocabulary's size."""
    overrides = {name: getattr(options, name) for name in OVERRIDES if getattr(options, name) is not None}
    return get_preset(options.preset, vocab_size=vocab_size, **overrides).validate()


class CharRNNJob(Job):
    """``kerasplm train char-rnn``: next-character prediction, scored by held-out perplexity per character."""

    family, task, options_class, what, result_key = FAMILY, TASK, CharRNNOptions, "character RNN LM", "generator"
    checkpoint_every = 1000

    @property
    def clip_norm(self):
        return self.options.clip_norm

    def build_data(self):
        o, run, t0 = self.options, self.run_dir, time.time()
        train_text, self.held_out_text = read_corpus(o)
        if self.resumed:
            stored = self.stored_model()
            self.tokenizer, self.model_config = stored.preprocessor, stored.backbone.config
        else:
            vocab = build_char_vocab(train_text, max_size=o.max_vocab)
            self.model_config = new_model_config(o, len(vocab))
            if run.writer:
                os.makedirs(run.path, exist_ok=True)
                write_char_vocab(vocab, run.file(ASSETS["char_vocab"]))
                self.tokenizer = CharacterTokenizer(run.file(ASSETS["char_vocab"]))
            else:
                self.tokenizer = CharacterTokenizer(vocab)
        eot = self.tokenizer.end_of_text_id
        train_ids = encode_text(self.tokenizer, train_text, start_id=eot)
        held_out_ids = encode_text(self.tokenizer, self.held_out_text, start_id=eot)
        unknown = int((held_out_ids == self.tokenizer.token_to_id("<unk>")).sum())
        self.log(f"data: {len(train_ids):,} training and {len(held_out_ids):,} held-out characters "
                 f"({self.tokenizer.vocab_size} tokens; {unknown} held-out <unk>; {time.time() - t0:.1f}s)")
        self.train_dataset = lambda: make_lm_dataset(train_ids, o.seq_len, o.batch_size, seed=o.seed)
        self.eval_dataset = lambda: make_lm_dataset(held_out_ids, o.seq_len, o.batch_size, shuffle=False,
                                                    max_windows=o.eval_max_windows)
        self.train_dataset()  # fail on a too-small corpus before the run is written
        if not self.resumed:
            self.write_config(o.preset, assets=ASSETS)

    def build_model(self):
        backbone = CharRNNBackbone.from_config_object(self.model_config, name=self.config["preset"])
        return attach_preprocessor(CharRNNLanguageModel(backbone), self.tokenizer)

    def build_optimizer(self):
        return keras.optimizers.Adam(learning_rate=self.options.learning_rate)

    def result(self, trainer):
        return TextGenerator(attach_run_info(trainer.model, self.run_dir.path, self.config, trainer.step),
                             self.tokenizer)

    def evaluate(self, trainer, summary):
        o = self.options
        summary["characters_per_step"] = o.batch_size * o.seq_len
        if summary["eval_loss"] is not None:   # nats per held-out character
            summary["eval_perplexity"] = round(math.exp(min(summary["eval_loss"], 50.0)), 4)
            summary["eval_bits_per_char"] = round(summary["eval_loss"] / math.log(2), 4)
        if o.sample_chars:
            prompts = ["", self.held_out_text.strip().splitlines()[0][:40]]
            texts = self.result(trainer).generate(
                prompts, max_new_tokens=min(o.sample_chars, self.model_config.max_positions - 48), temperature=0.8,
                seed=o.seed, jit_compile=o.jit_compile is not False)
            summary["samples"] = [{"prompt": p, "continuation": t} for p, t in zip(prompts, texts)]

    def describe(self, summary):
        super().describe(summary)
        if summary["eval_loss"] is not None:
            self.log(f"held-out loss {summary['eval_loss']:.4f} nats per character: perplexity "
                     f"{summary['eval_perplexity']}, {summary['eval_bits_per_char']} bits per character")
        for sample in summary.get("samples", []):
            self.log(f"  [sample] {sample['prompt']!r} -> {sample['continuation']!r}")


def train_char_rnn(out, options=None, log=print, **overrides):
    """Train (or resume) a character-level RNN LM in run directory ``out``; report held-out perplexity per character.

    ``options`` is a :class:`CharRNNOptions`; keyword ``overrides`` replace single options
    (``train_char_rnn(out, corpus="input.txt", steps=200, preset="char_rnn_tiny", cell="lstm")``). Stops at
    ``steps`` (absolute), after ``time_budget`` seconds, or on SIGTERM; an existing run in ``out`` is resumed with
    its stored options. Returns the summary (also in metrics.json, without "generator", the trained
    :class:`TextGenerator`).
    """
    return CharRNNJob(out, options, log, **overrides).run()
