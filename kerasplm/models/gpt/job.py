"""Train, reload and use GPT language models; the ``kerasplm train gpt`` / ``generate`` / ``score`` jobs.

Training (:func:`train_gpt`) is causal language modelling on plain text (GPT-1 §3.1, eq. 1):

    L(θ) = -(1/N) Σ_i log P(u_i | u_{i-k}, ..., u_{i-1}; θ)      over packed windows of k = seq_len tokens

* the corpus is one UTF-8 text file; the held-out text is ``--valid-corpus`` or the last
  ``valid_fraction`` of the corpus (cut at a line boundary);
* the vocabulary is a SentencePiece BPE model trained on the training text
  (:mod:`kerasplm.text.sentencepiece`), or an existing ``.model`` file (``--tokenizer``);
* the token stream ``<|endoftext|> text`` is cut into windows of ``seq_len + 1`` tokens (inputs and
  next-token labels), each epoch at a seeded random offset and in a seeded order that is a pure function
  of (seed, epoch) (``tf.random.experimental.index_shuffle``), so a resumed run sees exactly the batches an
  uninterrupted one would;
* AdamW (β = 0.9, 0.95, GPT-3 §B) with decoupled weight decay on the Dense kernels only: LayerNorm
  gains/biases, every bias and the (tied) token and position embeddings are not decayed; gradient
  clipping at global norm 1; linear warmup then cosine decay to 10 % of the peak
  (:class:`kerasplm.training.WarmupCosineDecay`) over ``decay_steps`` (default: ``steps``);
* held-out loss and perplexity exp(loss) (per SentencePiece token) go to ``metrics.json``, with samples.

The run directory (:mod:`kerasplm.runs`) has family ``gpt``, task ``causal_lm``, the asset
``{"spm_model": "spm.model"}``, and stores the :class:`GPT` with its tokenizer as preprocessor (a
:class:`SentencePieceTokenizer` of that file). :func:`load_text_generator` (:func:`kerasplm.runs.load_run`) also
loads converted GPT-2 runs, whose tokenizer is GPT-2's byte-level BPE (:mod:`kerasplm.text.bpe`).

Using a model: :class:`TextGenerator` (prompts in, text out, through the one generation engine of
:mod:`kerasplm.generation`; per-line log-likelihood and perplexity).

>>> summary = train_gpt("runs/gpt", corpus="../shared/data/tiny_shakespeare/input.txt", steps=500)
>>> generator = load_text_generator("runs/gpt")
>>> generator.generate(["ROMEO:"], max_new_tokens=40, temperature=0.8, top_k=40, seed=1)
"""
import math
import os
import sys
import time

# The corpus helpers live on the data floor (kerasplm.data.corpus), importable from here as before.
from kerasplm.data.corpus import encode_text, make_lm_dataset, read_corpus
from kerasplm.models.gpt.model import GPT, PRESETS, GPTBackbone
from kerasplm.models.presets import get_preset
# Using a trained model lives with the models (kerasplm.models.gpt.generator); these names stay importable here.
from kerasplm.models.gpt.generator import TextGenerator, load_text_generator, run_tokenizer  # noqa: F401
from kerasplm.models.gpt.manifest import GPTOptions
from kerasplm.jobs.job import Job
from kerasplm.runs import attach_run_info
from kerasplm.runs.serialization import attach_preprocessor
from kerasplm.text.sentencepiece import SentencePieceTokenizer, train_sentencepiece
from kerasplm.training import WarmupCosineDecay
from kerasplm.training.optimizers import FusedAdamW

FAMILY = "gpt"
TASK = "causal_lm"
ASSETS = {"spm_model": "spm.model"}
# Not decayed (GPT-2 practice as in most reimplementations): LayerNorm gains/biases, biases, embeddings.
NO_WEIGHT_DECAY = ["^gamma$", "^beta$", "^bias$", "^embeddings$"]
PRESET_NAMES = sorted(name for name, config in PRESETS.items() if not name.startswith("gpt3"))


# ---------------------------------------------------------------------------------------------- model
def lm_loss(model, batch, training):
    """The Trainer's sums: next-token cross-entropy over the window (``GPT.compute_loss_sums``)."""
    return model.compute_loss_sums(batch, training)


def _new_model_config(o, vocab_size):
    overrides = {"vocab_size": vocab_size}
    for name in ("num_layers", "d_model", "num_heads"):
        if getattr(o, name) is not None:
            overrides[name] = getattr(o, name)
    if o.d_model is not None:
        overrides["dff"] = 4 * o.d_model
    if o.dropout is not None:
        overrides["rate"] = overrides["attention_dropout"] = o.dropout
    config = get_preset(o.preset, **overrides).validate()
    if o.seq_len is not None and o.seq_len > config.max_positions:
        raise ValueError(f"seq_len={o.seq_len} exceeds the model's max_positions={config.max_positions}")
    return config


def adamw(learning_rate, weight_decay):
    """AdamW as GPT-3 trained (β2 = 0.95, ε = 1e-8), no decay on LayerNorm, biases and embeddings."""
    optimizer = FusedAdamW(learning_rate=learning_rate, weight_decay=weight_decay, beta_1=0.9,
                                       beta_2=0.95, epsilon=1e-8)
    optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    return optimizer


def build_gpt(model_config, name):
    return GPT(backbone=GPTBackbone.from_config_object(model_config, name=name))


# ---------------------------------------------------------------------------------------------- job
def _new_tokenizer(run, o, train_text, log):
    """A new run's SentencePiece model: copied from --tokenizer, or trained. Only the run's writer (a multi-worker
    job's chief) stores it; the other workers train theirs (the same bytes, from the same seed) and keep it in
    memory."""
    if o.tokenizer:
        with open(o.tokenizer, "rb") as f:
            data = f.read()
        SentencePieceTokenizer(data)  # a clear error before anything is written
    else:
        t0 = time.time()
        data = train_sentencepiece([train_text], vocab_size=o.vocab_size, seed=o.seed)
        log(f"trained a {o.vocab_size}-piece SentencePiece BPE model in {time.time() - t0:.1f}s")
    if not run.writer:
        return SentencePieceTokenizer(data)
    path = run.file(ASSETS["spm_model"])
    os.makedirs(run.path, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return SentencePieceTokenizer(path)


class GPTJob(Job):
    """``kerasplm train gpt``: causal language modelling on a text file, scored by held-out perplexity."""

    family, task, options_class, what, result_key = FAMILY, TASK, GPTOptions, "GPT", "generator"
    checkpoint_every, clip_norm = 1000, 1.0

    def build_data(self):
        o, run, t0 = self.options, self.run_dir, time.time()
        train_text, self.held_out_text = read_corpus(o)
        if self.resumed:
            # The stored model and tokenizer (checked against each other); the base rebuilds the model to train under
            # the strategy's scope, with this tokenizer.
            stored = self.stored_model()
            self.tokenizer, self.model_config = run_tokenizer(stored), stored.backbone.config
        else:
            self.tokenizer = _new_tokenizer(run, o, train_text, self.log)
            self.model_config = _new_model_config(o, self.tokenizer.vocab_size)
            decay_steps = o.decay_steps or o.steps
            if decay_steps is None:
                raise ValueError("a run with only a time budget needs decay_steps / --decay-steps (the length of "
                                 "the cosine schedule)")
            o = self.options = o.replace(seq_len=o.seq_len or min(256, self.model_config.max_positions),
                                         decay_steps=decay_steps)
        eot = self.tokenizer.end_of_text_id
        train_ids = encode_text(self.tokenizer, train_text, start_id=eot)
        held_out_ids = encode_text(self.tokenizer, self.held_out_text, start_id=eot)
        self.log(f"data: {len(train_ids):,} training and {len(held_out_ids):,} held-out tokens "
                 f"({self.tokenizer.vocab_size} pieces; {time.time() - t0:.1f}s)")
        self.train_dataset = lambda: make_lm_dataset(train_ids, o.seq_len, o.batch_size, seed=o.seed)
        self.eval_dataset = lambda: make_lm_dataset(held_out_ids, o.seq_len, o.batch_size, shuffle=False,
                                                    max_windows=o.eval_max_windows)
        self.train_dataset()  # fail on a too-small corpus before the run is written
        if not self.resumed:
            self.write_config(o.preset, assets=ASSETS)
        self.lr_schedule = WarmupCosineDecay(o.learning_rate, min(o.warmup_steps, o.decay_steps), o.decay_steps,
                                             alpha=0.1)

    def build_model(self):
        return attach_preprocessor(build_gpt(self.model_config, self.config["preset"]), self.tokenizer)

    def build_optimizer(self):
        return adamw(self.lr_schedule, self.options.weight_decay)

    def compute_loss(self, model, batch, training):
        return lm_loss(model, batch, training)

    def result(self, trainer):
        return TextGenerator(attach_run_info(trainer.model, self.run_dir.path, self.config, trainer.step),
                             self.tokenizer)

    def evaluate(self, trainer, summary):
        o = self.options
        summary["tokens_per_step"] = o.batch_size * o.seq_len
        if summary["eval_loss"] is not None:
            summary["eval_perplexity"] = round(math.exp(min(summary["eval_loss"], 50.0)), 3)
        if o.sample_tokens:
            prompts = ["", self.held_out_text.strip().splitlines()[0][:40]]
            texts = self.result(trainer).generate(
                prompts, max_new_tokens=min(o.sample_tokens, self.model_config.max_positions - 16), temperature=0.8,
                top_k=40, seed=o.seed)
            summary["samples"] = [{"prompt": p, "continuation": t} for p, t in zip(prompts, texts)]

    def describe(self, summary):
        super().describe(summary)
        self.log(f"held-out loss {summary['eval_loss']:.4f}, perplexity {summary.get('eval_perplexity')} "
                 f"(per SentencePiece token)")
        for sample in summary.get("samples", []):
            self.log(f"  [sample] {sample['prompt']!r} -> {sample['continuation']!r}")


def train_gpt(out, options=None, log=print, **overrides):
    """Train (or resume) a GPT language model in run directory ``out``; report held-out perplexity.

    ``options`` is a :class:`GPTOptions`; keyword ``overrides`` replace single options
    (``train_gpt(out, corpus="input.txt", steps=200, preset="gpt_tiny")``). Stops at ``steps`` (absolute:
    a resumed run continues to the same total), after ``time_budget`` seconds, or on SIGTERM. An existing
    run in ``out`` is resumed with its stored options. Returns a summary dict (also written to
    metrics.json, where "generator" is left out): steps, losses, ``eval_perplexity``, samples, and
    "generator", the trained :class:`TextGenerator`.
    """
    return GPTJob(out, options, log, **overrides).run()


def print_generations(run, prompts=(), **request):
    """``kerasplm generate``: print each prompt followed by its continuation (default prompts: stdin's lines);
    ``request``: the decoding options of :class:`kerasplm.options.DecodingRequestOptions`."""
    prompts = list(prompts) or [line.rstrip("\n") for line in sys.stdin]
    if not prompts:
        raise ValueError("no prompts (give them as arguments or on stdin)")
    texts = load_text_generator(run).generate(prompts, **request)
    for prompt, text in zip(prompts, texts):
        print(prompt + text)


def print_scores(run, file):
    """``kerasplm score``: per-line log-likelihood, token count and perplexity of ``file`` ('-': stdin)."""
    if file == "-":
        lines = [line.rstrip("\n") for line in sys.stdin]
    else:
        if not os.path.isfile(file):
            raise FileNotFoundError(f"no such file: {file}")
        with open(file, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    generator = load_text_generator(run)
    print("log_likelihood\tnum_tokens\tperplexity")
    for result in generator.score(lines):
        print(f"{result['log_likelihood']:.4f}\t{result['num_tokens']}\t{result['perplexity']:.4f}")
