"""Held-out perplexity per character: a character-level RNN LM against a GPT trained for the same time.

Both sides are trained by their own jobs (``kerasplm train char-rnn``, ``kerasplm train gpt``) on the same corpus
(default: tiny-shakespeare) with the same held-out split (the last ``--valid-fraction``, cut at a line boundary:
``kerasplm.data.corpus.read_corpus``, which both jobs use), each for ``--time-budget`` seconds of training
(one after the other, so each has the machine to itself). Then both score the same held-out text, cut into chunks
of about ``--chunk-chars`` characters at line boundaries, through ``TextGenerator.score`` (the ``kerasplm score``
code): log P(chunk | <|endoftext|>) in nats, summed over the chunks and divided by their characters:

    nats per character = -Σ_chunks log P(chunk) / Σ_chunks characters(chunk)
    perplexity per character = exp(nats per character),  bits per character = nats per character / ln 2

For the GPT, log P(chunk) is the sum of its SentencePiece tokens' log-probabilities (the vocabulary round-trips
any text, so the tokens spell the chunk exactly); a chunk longer than the GPT's ``max_positions`` tokens is scored
in windows that each start afresh (as ``kerasplm score`` does). The character RNN reads a whole chunk from a zero
state. The jobs' own held-out losses (per character, per SentencePiece token) are recorded beside.

    python -m benchmarks.bench_char_rnn --time-budget 1200 [--json out.json]        # the 20-minute comparison
    python -m benchmarks.bench_char_rnn --steps 3 --max-chars 30000 --eval-chunks 4  # a smoke run
"""
import argparse
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import load_average, machine_info, write_results  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CORPUS = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "tiny_shakespeare", "input.txt"))


def held_out_chunks(text, chunk_chars):
    """The held-out text cut after whole lines into chunks of at least ``chunk_chars`` characters (the last may be
    shorter); joined they are the text."""
    chunks, current = [], ""
    for line in text.splitlines(keepends=True):
        current += line
        if len(current) >= chunk_chars:
            chunks.append(current)
            current = ""
    return chunks + ([current] if current else [])


def per_character(generator, chunks):
    """Nats, perplexity and bits per character of ``chunks`` under a TextGenerator (see the module docstring)."""
    scores = generator.score(chunks)
    nats = -sum(s["log_likelihood"] for s in scores) / sum(len(c) for c in chunks)
    return {"nats_per_char": nats, "perplexity_per_char": math.exp(nats), "bits_per_char": nats / math.log(2),
            "tokens": sum(s["num_tokens"] for s in scores)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=DEFAULT_CORPUS)
    parser.add_argument("--max-chars", type=int, help="read at most this many characters of the corpus")
    parser.add_argument("--valid-fraction", type=float, default=0.1)
    parser.add_argument("--time-budget", type=float, default=1200.0, help="seconds of training per side")
    parser.add_argument("--steps", type=int, help="train each side this many steps instead (smoke runs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--char-preset", default="char_rnn_lstm")
    parser.add_argument("--cell", choices=["gru", "lstm"])
    parser.add_argument("--char-seq-len", type=int, default=128)
    parser.add_argument("--char-batch", type=int, default=32)
    parser.add_argument("--gpt-preset", default="gpt2")
    parser.add_argument("--gpt-layers", type=int, default=4)
    parser.add_argument("--gpt-d-model", type=int, default=256)
    parser.add_argument("--gpt-heads", type=int, default=4)
    parser.add_argument("--gpt-vocab-size", type=int, default=2000)
    parser.add_argument("--gpt-seq-len", type=int, default=128)
    parser.add_argument("--gpt-batch", type=int, default=16)
    parser.add_argument("--gpt-decay-steps", type=int, default=3000,
                        help="length of the GPT's cosine schedule (about the steps the budget allows)")
    parser.add_argument("--chunk-chars", type=int, default=256, help="held-out characters per scored chunk")
    parser.add_argument("--eval-chunks", type=int, help="score only the first N held-out chunks")
    parser.add_argument("--out", help="directory for the two runs (default: a temporary one)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.corpus):
        parser.error(f"no corpus at {args.corpus} (tiny-shakespeare lives in ../shared/data; give --corpus FILE)")

    from kerasplm.models.char_rnn.job import train_char_rnn
    from kerasplm.data.corpus import read_corpus
    from kerasplm.models.gpt.job import train_gpt

    out = args.out or tempfile.mkdtemp(prefix="bench_char_rnn_")
    budget = dict(steps=args.steps) if args.steps else dict(time_budget=args.time_budget)
    data = dict(corpus=args.corpus, max_chars=args.max_chars, valid_fraction=args.valid_fraction, seed=args.seed,
                verbose=0)
    results = {"machine": machine_info(), "load_average_start": load_average(), "corpus": args.corpus,
               "budget": budget, "chunk_chars": args.chunk_chars}
    summaries = {
        "char_rnn": train_char_rnn(os.path.join(out, "char_rnn"), preset=args.char_preset, cell=args.cell,
                                   seq_len=args.char_seq_len, batch_size=args.char_batch, sample_chars=0,
                                   **budget, **data),
        "gpt": train_gpt(os.path.join(out, "gpt"), preset=args.gpt_preset, num_layers=args.gpt_layers,
                         d_model=args.gpt_d_model, num_heads=args.gpt_heads, vocab_size=args.gpt_vocab_size,
                         seq_len=args.gpt_seq_len, batch_size=args.gpt_batch, decay_steps=args.gpt_decay_steps,
                         sample_tokens=0, **budget, **data),
    }
    held_out = read_corpus(_options(data))[1]
    chunks = held_out_chunks(held_out, args.chunk_chars)[:args.eval_chunks]
    results["held_out_chars"] = sum(len(c) for c in chunks)
    for name, summary in summaries.items():
        generator = summary.pop("generator")
        results[name] = {"run": os.path.join(out, name), "parameters": generator.model.count_params(),
                         "steps": summary["step"], "train_seconds": summary["train_seconds"],
                         "job_eval_loss": summary["eval_loss"], **per_character(generator, chunks)}
    results["load_average_end"] = load_average()
    write_results(results, args.json)


def _options(data):
    """The corpus options both jobs read the held-out text with."""
    import types

    return types.SimpleNamespace(corpus=data["corpus"], valid_corpus=None, max_chars=data["max_chars"],
                                 valid_fraction=data["valid_fraction"])


if __name__ == "__main__":
    main()
