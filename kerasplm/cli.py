"""The ``kerasplm`` command line.

    kerasplm train translator [--data TSV --src-col 1 --tgt-col 0 --preset transformer_seed
                               --steps N | --time-budget SECONDS --out RUN_DIR --seed 0 ...]
    kerasplm translate --run RUN_DIR [--beam-size 4] "¿Puedo tomar prestado este libro?" ...
    kerasplm export translator --run RUN_DIR --to export/translator [--version N] [--overwrite]
    kerasplm serve --model-base-path export/translator --model-name translator [--port 8501]
    kerasplm serve --model-config-file models.config [--port 8501]   # several models (TF Serving's format)
    kerasplm convert bert --from HF_OR_GOOGLE_DIR --out RUN_DIR       # pretrained weights -> run directory
    kerasplm convert gpt2 --from HF_DIR --out RUN_DIR
    kerasplm train bert --corpus PATH [--preset bert_tiny --vocab vocab.txt --steps N --out RUN_DIR ...]
    kerasplm fill-mask --run RUN_DIR "the [MASK] sat on the mat" [--top-k 5]
    kerasplm export fill-mask --run RUN_DIR --to DIR [--top-k 5]
    kerasplm presets [--family bert]                                  # presets with parameter counts
    kerasplm train gpt --corpus input.txt [--preset gpt_tiny --seq-len 128 --steps N --out runs/gpt ...]
    kerasplm generate --run RUN_DIR "prompt" [--max-new-tokens 64 --temperature 0.8 --top-k 40 --seed 0]
    kerasplm score --run RUN_DIR FILE                                 # per-line log-likelihood, perplexity
    kerasplm export generator --run RUN_DIR --to export/gpt [--max-new-tokens 32]

Every subcommand has ``--help``. Bad flags and unreadable inputs end with a one-line error and exit
status 2.
"""
import argparse
import functools
import importlib
import os
import signal
import sys

DEFAULT_RUN_DIR = "runs/translator"
DEFAULT_EXPORT_DIR = "export/translator"
# The default run on the bundled data must finish (train + BLEU + export) in under 10 minutes on 2 cores
# (7 min 8 s on the benchmark box: RESULTS.md, issue 10).
DEFAULT_TIME_BUDGET = 330


class CLIError(Exception):
    """An error the user can fix; printed as one line."""


def _number(kind, minimum, inclusive):
    """An argparse type: ``kind`` (int or float) that must be > minimum (>= when ``inclusive``)."""
    expected = f"{'an integer' if kind is int else 'a number'} {'>=' if inclusive else '>'} {minimum}"

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if value < minimum or (value == minimum and not inclusive):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


_positive_int = _number(int, 0, inclusive=False)
_nonnegative_int = _number(int, 0, inclusive=True)
_positive_float = _number(float, 0, inclusive=False)


def _existing_file(text):
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return text


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (usage stays available through --help)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser():
    from kerasplm.tasks.options import add_options_to_parser
    from kerasplm.tasks.translation import TranslatorOptions

    parser = _Parser(prog="kerasplm", description="kerasplm: Transformer, BERT, GPT and ELMo "
                                     "in TensorFlow/Keras, from training to TensorFlow Serving.")
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = commands.add_parser("train", help="train a model", description="Train a model family.")
    train_families = train.add_subparsers(dest="family", metavar="FAMILY", required=True)
    tr = train_families.add_parser(
        "translator", help="the Transformer translator (default: Spanish→English, bundled Tatoeba data)",
        description="Train the seed's Transformer translator. With no --data it trains Spanish→English on the "
                    "Tatoeba corpus bundled in the package, reports held-out BLEU and exports a SavedModel. "
                    f"With neither --steps nor --time-budget it trains for {DEFAULT_TIME_BUDGET} seconds. After "
                    "SIGTERM it saves a checkpoint and exits with status 143 (rerun the command to resume).")
    add_options_to_parser(tr, TranslatorOptions)
    tr.add_argument("--out", default=DEFAULT_RUN_DIR, help=f"run directory (default {DEFAULT_RUN_DIR}); "
                    "an existing run is resumed with its stored options")
    tr.add_argument("--export-to", default=DEFAULT_EXPORT_DIR,
                    help=f"export the trained model here (default {DEFAULT_EXPORT_DIR}); 'none' to skip")
    tr.set_defaults(handler=_train_translator)

    tl = commands.add_parser("translate", help="translate sentences with a trained run",
                             description="Translate sentences (arguments, or one per line on stdin).")
    tl.add_argument("sentences", nargs="*", help="source sentences (default: read stdin)")
    tl.add_argument("--run", required=True, help="run directory written by `kerasplm train translator`")
    tl.add_argument("--beam-size", type=_positive_int, default=1, help="1 = greedy (default)")
    tl.set_defaults(handler=_translate)

    _add_gpt_parsers(commands, train_families)
    export_families = _add_export_parser(commands)
    _add_bert_pretraining_parsers(commands, train_families, export_families)
    _add_serve_parser(commands)
    _add_presets_parser(commands)
    _add_elmo_parsers(train_families, export_families, _add_convert_parser(commands))
    _add_finetune_parser(commands)
    _add_qa_parsers(commands)
    return parser


def _add_gpt_parsers(commands, train_families):
    """``train gpt``, ``generate`` and ``score`` (kerasplm.tasks.language_model)."""
    from kerasplm.tasks.language_model import GPTOptions
    from kerasplm.tasks.options import add_options_to_parser

    tg = train_families.add_parser(
        "gpt", help="a GPT language model on a plain-text corpus",
        description="Train (or resume) a GPT language model on a UTF-8 text file with a SentencePiece BPE "
                    "vocabulary; reports held-out loss and perplexity. After SIGTERM it saves a checkpoint "
                    "and exits with status 143 (rerun the command to resume).")
    add_options_to_parser(tg, GPTOptions)
    tg.add_argument("--out", default="runs/gpt", help="run directory (default runs/gpt); an existing run is "
                    "resumed with its stored options")
    tg.set_defaults(handler=_train_gpt)

    ge = commands.add_parser("generate", help="continue prompts with a GPT run",
                             description="Generate a continuation of each prompt (arguments, or one per line on "
                                         "stdin) with a trained or converted GPT run. Temperature 0 = greedy.")
    ge.add_argument("prompts", nargs="*", help="prompts (default: read stdin)")
    ge.add_argument("--run", required=True, help="GPT run directory (kerasplm train gpt / convert gpt2)")
    ge.add_argument("--max-new-tokens", type=_positive_int, default=64, help="tokens to generate (default 64)")
    ge.add_argument("--temperature", type=_number(float, 0, inclusive=True), default=0.0,
                    help="sampling temperature; 0 = greedy (default 0)")
    ge.add_argument("--top-k", type=_positive_int, help="sample from the k most probable tokens")
    ge.add_argument("--top-p", type=_number(float, 0, inclusive=False), help="nucleus sampling mass in (0, 1]")
    ge.add_argument("--num-beams", type=_positive_int, default=1, help="beam search with this many beams")
    ge.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    ge.set_defaults(handler=_generate)

    sc = commands.add_parser("score", help="per-line log-likelihood and perplexity under a GPT run",
                             description="Print, for each line of FILE ('-' = stdin), its log-likelihood in nats "
                                         "(given <|endoftext|>), its token count and perplexity, tab-separated.")
    sc.add_argument("file", help="text file, one sequence per line ('-' for stdin)")
    sc.add_argument("--run", required=True, help="GPT run directory")
    sc.set_defaults(handler=_score)


def _run_training_job(args, options_cls, job, default_time_budget=None):
    """Run ``job(args.out, **options)`` with the options given on the command line; returns its summary.

    With neither --steps nor --time-budget, ``default_time_budget`` seconds (when given). A run preempted
    by SIGTERM exits here: the checkpoint, history and logs are written and closed; 128 + SIGTERM tells a
    job controller that the job did not finish (so it restarts it, and the run resumes). os._exit skips the
    interpreter's teardown of TensorFlow, which took 12 s of a short grace period on a loaded 2-core machine.
    """
    from kerasplm.tasks.options import options_from_args

    given = options_from_args(args, options_cls)
    if default_time_budget is not None and "steps" not in given and "time_budget" not in given:
        given["time_budget"] = default_time_budget
    summary = job(args.out, **given)
    if summary["stop_reason"] == "sigterm":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signal.SIGTERM)
    return summary


def _train_gpt(args):
    from kerasplm.tasks.language_model import GPTOptions, train_gpt

    summary = _run_training_job(args, GPTOptions, train_gpt)
    for sample in summary.get("samples", []):
        print(f"  [sample] {sample['prompt']!r} -> {sample['continuation']!r}")
    return 0


def _generate(args):
    from kerasplm.tasks.language_model import load_text_generator

    prompts = args.prompts or [line.rstrip("\n") for line in sys.stdin]
    if not prompts:
        raise CLIError("no prompts (give them as arguments or on stdin)")
    if args.top_p is not None and args.top_p > 1:
        raise CLIError(f"--top-p must be in (0, 1], got {args.top_p}")
    generator = load_text_generator(args.run)
    texts = generator.generate(prompts, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                               top_k=args.top_k, top_p=args.top_p, num_beams=args.num_beams, seed=args.seed)
    for prompt, text in zip(prompts, texts):
        print(prompt + text)
    return 0


def _score(args):
    from kerasplm.tasks.language_model import load_text_generator

    if args.file == "-":
        lines = [line.rstrip("\n") for line in sys.stdin]
    else:
        if not os.path.isfile(args.file):
            raise CLIError(f"no such file: {args.file}")
        with open(args.file, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    generator = load_text_generator(args.run)
    print("log_likelihood\tnum_tokens\tperplexity")
    for result in generator.score(lines):
        print(f"{result['log_likelihood']:.4f}\t{result['num_tokens']}\t{result['perplexity']:.4f}")
    return 0


def _convert_gpt2(args):
    from kerasplm.convert.gpt2 import convert_gpt2_to_run

    model = convert_gpt2_to_run(args.source, args.out, allow_pickle=args.allow_pickle)
    tokenizer = ("with its BPE tokenizer" if os.path.exists(os.path.join(args.out, "merges.txt"))
                 else f"without a tokenizer ({args.source} has no vocab.json and merges.txt)")
    print(f"wrote {args.out}: GPT-2 with {model.count_params():,} parameters, {tokenizer}")
    return 0


def _version():
    import kerasplm

    return f"kerasplm {kerasplm.__version__}"


def _add_export_parser(commands):
    ex = commands.add_parser("export", help="export a trained model as a TF Serving SavedModel",
                             description="Export a trained model to MODEL_BASE_PATH/<version>/ (atomically).")
    families = ex.add_subparsers(dest="family", metavar="FAMILY", required=True)
    et = families.add_parser("translator", help="export a translator run",
                             description="Export a translator run as a SavedModel taking raw strings.")
    et.add_argument("--run", required=True, help="run directory written by `kerasplm train translator`")
    et.add_argument("--to", default=DEFAULT_EXPORT_DIR, help=f"model base path (default {DEFAULT_EXPORT_DIR})")
    et.add_argument("--version", type=_positive_int, help="version number (default: next free)")
    et.add_argument("--overwrite", action="store_true", help="replace an existing version")
    et.add_argument("--max-beam-size", type=_positive_int, default=8,
                    help="largest beam size the `translate` signature accepts (default 8; one traced branch each)")
    et.add_argument("--jit-compile", action="store_true",
                    help="XLA-compile the decoding loop (TF Serving on CPU then needs --xla_cpu_compilation_enabled)")
    et.set_defaults(handler=_export_translator)
    _add_export_generator_parser(families)
    _add_bert_export_parsers(families)
    _add_export_tagger_parser(families)
    return families


def _add_export_generator_parser(families):
    eg = families.add_parser("generator", help="export a GPT run (generate and score signatures)",
                             description="Export a GPT run (trained or converted) as a SavedModel: "
                                         "serving_default (greedy), generate (sampling options) and score.")
    eg.add_argument("--run", required=True, help="GPT run directory (kerasplm train gpt / convert gpt2)")
    eg.add_argument("--to", default="export/gpt", help="model base path (default export/gpt)")
    eg.add_argument("--version", type=_positive_int, help="version number (default: next free)")
    eg.add_argument("--overwrite", action="store_true", help="replace an existing version")
    eg.add_argument("--max-new-tokens", type=_positive_int, default=32,
                    help="serving_default's length and the largest `generate` accepts (default 32)")
    eg.add_argument("--max-prompt-tokens", type=_positive_int,
                    help="prompts keep their last N tokens (default: the rest of the model's context)")
    eg.set_defaults(handler=_export_generator)


def _export_generator(args):
    from kerasplm.export.generator import export_generator
    from kerasplm.tasks.language_model import load_text_generator

    print(export_generator(load_text_generator(args.run), args.to, version=args.version, overwrite=args.overwrite,
                           max_new_tokens=args.max_new_tokens, max_prompt_tokens=args.max_prompt_tokens))
    return 0


def _add_bert_pretraining_parsers(commands, train_families, export_families):
    """``train bert``, ``fill-mask`` and ``export fill-mask`` (kerasplm.tasks.bert_pretraining, export.bert)."""
    from kerasplm.tasks.bert_pretraining import BertPretrainingOptions
    from kerasplm.tasks.options import add_options_to_parser

    tb = train_families.add_parser(
        "bert", help="pretrain BERT (MLM + NSP/SOP) on a plain-text corpus",
        description="Pretrain a BERT from raw text (one sentence per line, blank line between documents; or "
                    "WikiText). Resumes an existing run in --out with its stored options.")
    add_options_to_parser(tb, BertPretrainingOptions)
    tb.add_argument("--out", default="runs/bert", help="run directory (default runs/bert)")
    tb.set_defaults(handler=_train_bert)
    fm = commands.add_parser("fill-mask", help="predict the [MASK] tokens of texts with a pretraining run",
                             description="Print the top-k tokens and probabilities for every [MASK].")
    fm.add_argument("texts", nargs="+", help='texts containing [MASK], e.g. "the [MASK] sat on the mat"')
    fm.add_argument("--run", required=True, help="run directory written by `kerasplm train bert`")
    fm.add_argument("--top-k", type=_positive_int, default=5, help="tokens per mask (default 5)")
    fm.set_defaults(handler=_fill_mask)
    ef = export_families.add_parser("fill-mask", help="export a BERT pretraining run as a fill-mask model",
                                    description="Export a fill-mask SavedModel (text with [MASK] -> top-k tokens).")
    ef.add_argument("--run", required=True, help="run directory written by `kerasplm train bert`")
    ef.add_argument("--to", default="export/fill_mask", help="model base path (default export/fill_mask)")
    ef.add_argument("--top-k", type=_positive_int, default=5, help="tokens per mask (default 5)")
    ef.add_argument("--version", type=_positive_int, help="version number (default: next free)")
    ef.add_argument("--overwrite", action="store_true", help="replace an existing version")
    ef.set_defaults(handler=_export_fill_mask)


def _train_bert(args):
    from kerasplm.tasks.bert_pretraining import BertPretrainingOptions, train_bert

    _run_training_job(args, BertPretrainingOptions, train_bert, default_time_budget=DEFAULT_TIME_BUDGET)
    return 0


def _fill_mask(args):
    from kerasplm.export.bert import fill_mask_module

    module = fill_mask_module(args.run, top_k=args.top_k)
    for text, masks in zip(args.texts, module.fill(args.texts)):
        print(text)
        if not masks:
            print("  (no [MASK] in this text)")
        for m, candidates in enumerate(masks, start=1):
            print(f"  [MASK] {m}: " + "  ".join(f"{token} {score:.4f}" for token, score in candidates))
    return 0


def _export_fill_mask(args):
    from kerasplm.export.bert import export_fill_mask

    path = export_fill_mask(args.run, args.to, top_k=args.top_k, version=args.version, overwrite=args.overwrite)
    print(f"exported {path}")
    return 0


def _add_bert_export_parsers(families):
    from kerasplm.export.embedder import add_embedder_arguments, add_export_target_arguments

    em = families.add_parser("embedder", help="export a BERT run as a sentence-embedding SavedModel",
                             description="Export a BERT run (converted, pretrained or fine-tuned): `text` strings "
                                         "-> `embedding` vectors, pooled and normalized as the run records.")
    add_embedder_arguments(em)
    em.set_defaults(handler=_export_embedder)
    ec = families.add_parser("classifier", help="export a fine-tuned BERT or GPT classifier run",
                             description="Export a `kerasplm finetune bert-classifier` or `gpt-classifier` run: `text` "
                                         "(and `text_pair` for a pair model) strings -> `probabilities` and `label` "
                                         "names.")
    add_export_target_arguments(ec, "a classifier (kerasplm finetune bert-classifier / gpt-classifier)")
    ec.set_defaults(handler=_export_classifier)


# `kerasplm finetune TASK`: name -> (module, options class, job function, help, description). Every task's
# flags come from its options class, and `--out` names the run directory (an existing run is resumed).
FINETUNE_JOBS = {
    "bert-classifier": (
        "kerasplm.tasks.bert_finetune", "BertClassifierOptions", "finetune_bert_classifier",
        "sentence (pair) classification or regression on a BERT run",
        "Fine-tune a BERT run (--init) on tab-separated examples; prints the dev accuracy, F1 and MCC and writes "
        "them to metrics.json. Resumable."),
    "bert-tagger": (
        "kerasplm.tasks.bert_tagger_job", "TaggerOptions", "finetune_bert_tagger",
        "BERT named-entity tagger on CoNLL-2003 files",
        "Fine-tune a BERT run (--init) on CoNLL-2003 files; prints the dev entity F1 (conlleval) and writes it to "
        "metrics.json. Rerun the same command to resume."),
    "bert-simcse": (
        "kerasplm.tasks.bert_simcse_job", "SimCSEOptions", "finetune_bert_simcse",
        "unsupervised SimCSE sentence embeddings on a BERT run",
        "Train sentence embeddings with unsupervised SimCSE (dropout noise, in-batch negatives) from a BERT run "
        "(--init) on a text file, one sentence per line; export the run with `kerasplm export embedder`. Rerun the "
        "same command to resume."),
    "bert-qa": (
        "kerasplm.tasks.bert_qa_job", "BertQAOptions", "finetune_bert_qa",
        "extractive question answering (SQuAD v1.1 JSON) on a BERT run",
        "Fine-tune a BERT run (--init) on SQuAD v1.1 files; prints the held-out exact match and F1 (--dev, or "
        "--holdout-fraction of --train's articles) and writes them to metrics.json. Resumable."),
    "gpt-classifier": (
        "kerasplm.tasks.gpt_finetune", "GPTClassifierOptions", "finetune_gpt_classifier",
        "GPT-1 fine-tuning: classification, entailment or similarity on a GPT run",
        "Fine-tune a GPT run (--init: kerasplm train gpt / convert gpt2) as GPT-1 did: start/delim/extract tokens, "
        "a linear head on the extract token, task loss + λ·LM loss. Prints the dev accuracy, F1 and MCC and writes "
        "them to metrics.json. Rerun the same command to resume."),
    "elmo-classifier": (
        "kerasplm.tasks.elmo_classifier", "ElmoClassifierOptions", "finetune_elmo_classifier",
        "BiLSTM sentence classifier: static embeddings, with [x; ELMo] from a biLM run",
        "Train a BiLSTM sentence classifier on tab-separated examples with static word embeddings and ELMo "
        "features of a frozen biLM (--elmo RUN_DIR; --no-elmo: the static baseline); prints the dev accuracy, F1 "
        "and MCC and writes them to metrics.json. Rerun to resume."),
}


def _add_finetune_parser(commands):
    from kerasplm.tasks.options import add_options_to_parser

    ft = commands.add_parser("finetune", help="fine-tune a pretrained model on a task",
                             description="Fine-tune a pretrained model on a task.")
    tasks = ft.add_subparsers(dest="finetune_task", metavar="TASK", required=True)
    for name, (module, options_name, job_name, help_text, description) in FINETUNE_JOBS.items():
        task = tasks.add_parser(name, help=help_text, description=description)
        add_options_to_parser(task, getattr(importlib.import_module(module), options_name))
        task.add_argument("--out", required=True, help="run directory (an existing run is resumed)")
        task.set_defaults(handler=functools.partial(_finetune, module, options_name, job_name))
    return tasks


def _finetune(module, options_name, job_name, args):
    module = importlib.import_module(module)
    job = getattr(module, job_name)

    def summary_of(out, **options):   # the tagger job returns (summary, tagger)
        result = job(out, **options)
        return result[0] if isinstance(result, tuple) else result

    summary = _run_training_job(args, getattr(module, options_name), summary_of)
    print(f"wrote {args.out}: step {summary['step']}")
    return 0


def _port(text):
    value = _nonnegative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port in [0, 65535], got {text!r}")
    return value


def _add_serve_parser(commands):
    from kerasplm import serving as sd  # the defaults live with the server

    # TF Serving's underscore spellings are accepted too, so its users can paste their command lines.
    sv = commands.add_parser(
        "serve", help="serve exported models over the TF Serving REST API",
        description="A local server speaking the TensorFlow Serving REST API subset (status, metadata, "
                    "predict; Prometheus metrics at /monitoring/prometheus/metrics) for machines without "
                    "TensorFlow Serving. SIGTERM/Ctrl-C let requests in flight finish, then exit 0.")
    models = sv.add_mutually_exclusive_group(required=True)
    models.add_argument("--model-config-file", "--model_config_file", type=_existing_file, metavar="FILE",
                        help="TF Serving text-format model_config_list: several models, version policies "
                             "(relative base_path values are resolved against the file's directory)")
    models.add_argument("--model-base-path", "--model_base_path", metavar="DIR",
                        help="one model: directory holding integer version directories (export/<name>)")
    sv.add_argument("--model-name", "--model_name",
                    help="with --model-base-path: name in the URL /v1/models/<name> (default: the directory's)")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sv.add_argument("--port", type=_port, help=f"REST port (default {sd.DEFAULT_PORT}; 0 = any free port)")
    sv.add_argument("--rest-api-port", "--rest_api_port", type=_port,
                    help="TF Serving's name for the REST port (its --port is gRPC, which kerasplm serve lacks)")
    sv.add_argument("--max-body-bytes", type=_positive_int, default=sd.DEFAULT_MAX_BODY_BYTES,
                    help=f"largest accepted request body in bytes (default {sd.DEFAULT_MAX_BODY_BYTES})")
    sv.add_argument("--max-batch-size", type=_positive_int, default=sd.DEFAULT_MAX_BATCH_SIZE,
                    help="most rows (instances) per request; more gets HTTP 400 "
                         f"(default {sd.DEFAULT_MAX_BATCH_SIZE})")
    sv.add_argument("--batch-chunk-size", type=_positive_int, default=sd.DEFAULT_BATCH_CHUNK_SIZE,
                    help="rows per signature call: larger requests run in chunks of this size, "
                         f"bounding memory (default {sd.DEFAULT_BATCH_CHUNK_SIZE})")
    sv.add_argument("--poll-seconds", "--file_system_poll_wait_seconds", type=_positive_float,
                    default=sd.DEFAULT_POLL_SECONDS,
                    help=f"how often to look for new versions (default {sd.DEFAULT_POLL_SECONDS:g} s)")
    sv.add_argument("--shutdown-grace-seconds", type=_number(float, 0, inclusive=True),
                    default=sd.DEFAULT_SHUTDOWN_GRACE_SECONDS,
                    help="on SIGTERM, how long requests in flight may take to finish "
                         f"(default {sd.DEFAULT_SHUTDOWN_GRACE_SECONDS:g} s, under Kubernetes' 30 s)")
    sv.add_argument("--quiet", action="store_true", help="do not log each request")
    sv.set_defaults(handler=_serve)


def _add_presets_parser(commands):
    pr = commands.add_parser("presets", help="list every model family's presets with parameter counts",
                             description="List the registered presets of every model family (or one) with "
                                         "their exact parameter counts, computed from the config (no model is "
                                         "built).")
    pr.add_argument("--family", help="only this family (e.g. transformer)")
    pr.set_defaults(handler=_presets)


def _add_convert_parser(commands):
    cv = commands.add_parser("convert", help="convert pretrained weights into a kerasplm run directory",
                             description="Convert pretrained weights into a new kerasplm run directory.")
    families = cv.add_subparsers(dest="family", metavar="FAMILY", required=True)
    for name, help_text, description, handler in (
            ("bert", "a HuggingFace BERT directory or Google's BERT checkpoint",
             "Convert a HuggingFace BERT directory (config.json, model.safetensors, vocab.txt) or Google's "
             "layout (bert_config.json, bert_model.ckpt.*, vocab.txt) into a run directory.", _convert_bert),
            ("gpt2", "a HuggingFace GPT-2 directory (config.json, model.safetensors)",
             "Convert a HuggingFace GPT-2 directory (save_pretrained: config.json and model.safetensors) "
             "into a run directory.", _convert_gpt2)):
        family = families.add_parser(name, help=help_text, description=description)
        family.add_argument("--from", dest="source", required=True, help="the directory holding the weights")
        family.add_argument("--out", required=True, help="the run directory to write (must not hold a run)")
        family.add_argument("--allow-pickle", action="store_true",
                            help="also read pytorch_model.bin (unpickling runs code from the file: only for "
                                 "files you trust)")
        family.set_defaults(handler=handler)
    return families


def _add_elmo_parsers(train_families, export_families, convert_families):
    """``kerasplm train elmo``, ``export elmo`` and ``convert elmo`` (handlers call kerasplm's elmo modules)."""
    from kerasplm.tasks.elmo import ElmoOptions
    from kerasplm.tasks.options import add_options_to_parser

    tr = train_families.add_parser("elmo", help="an ELMo biLM (character CNN + forward/backward LSTMs)",
                                   description="Train an ELMo biLM on a text corpus and report held-out forward "
                                               "and backward perplexity.")
    add_options_to_parser(tr, ElmoOptions)
    tr.add_argument("--out", default="runs/elmo", help="run directory (an existing run is resumed)")
    tr.set_defaults(handler=_train_elmo)
    ex = export_families.add_parser("elmo", help="export an ELMo run",
                                    description="Export an ELMo run: sentences in, per-token layers and mix out.")
    ex.add_argument("--run", required=True, help="run directory (kerasplm train elmo / convert elmo)")
    ex.add_argument("--to", default="export/elmo", help="model base path (default export/elmo)")
    ex.add_argument("--version", type=_positive_int, help="version number (default: next free)")
    ex.add_argument("--overwrite", action="store_true", help="replace an existing version")
    ex.set_defaults(handler=_export_elmo)
    cv = convert_families.add_parser("elmo", help="AllenNLP bilm-tf weights (options.json, weights.hdf5)",
                                     description="Convert bilm-tf's options.json + weights.hdf5 + vocabulary "
                                                 "into a run directory.")
    cv.add_argument("--options", required=True, type=_existing_file, help="bilm-tf options.json")
    cv.add_argument("--weights", required=True, type=_existing_file, help="bilm-tf weights.hdf5")
    cv.add_argument("--vocab", required=True, type=_existing_file, help="vocabulary, one token per line")
    cv.add_argument("--out", required=True, help="the run directory to write (must not hold a run)")
    cv.set_defaults(handler=_convert_elmo)


def _train_elmo(args):
    from kerasplm.tasks.elmo import ElmoOptions, train_elmo

    _run_training_job(args, ElmoOptions, train_elmo)
    return 0


def _export_elmo(args):
    from kerasplm.export.elmo import export_elmo
    from kerasplm.tasks.elmo import load_elmo

    print(export_elmo(load_elmo(args.run), args.to, version=args.version, overwrite=args.overwrite))
    return 0


def _convert_elmo(args):
    from kerasplm.convert.elmo import convert_elmo_to_run

    print(convert_elmo_to_run(args.options, args.weights, args.vocab, args.out).path)
    return 0


def _convert_bert(args):
    from kerasplm.convert.bert import convert_bert_to_run

    run = convert_bert_to_run(args.source, args.out, allow_pickle=args.allow_pickle)
    print(run.path)
    return 0


def _presets(args):
    from kerasplm.models.presets import format_presets, list_presets

    print(format_presets(list_presets(args.family)))
    return 0


def _train_translator(args):
    from kerasplm.tasks.translation import TranslatorOptions, train_translator

    summary = _run_training_job(args, TranslatorOptions, train_translator, default_time_budget=DEFAULT_TIME_BUDGET)
    if args.export_to and args.export_to.lower() != "none":
        _export_and_show(summary["translator"], args.export_to)
    return 0


def _export_and_show(translator, export_dir):
    from kerasplm.export import export_translator, load_and_translate

    path = export_translator(translator, export_dir)
    print(f"exported SavedModel to {path}")
    from kerasplm.tasks.translation import SEED_SENTENCES

    for source, translation in zip(SEED_SENTENCES, load_and_translate(path, SEED_SENTENCES)):
        print(f"  [SavedModel] {source}  ->  {translation}")


def _translate(args):
    from kerasplm.tasks.translation import load_translator

    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not sentences:
        raise CLIError("no sentences to translate (give them as arguments or on stdin)")
    translator = load_translator(args.run)
    for translation in translator.translate(sentences, beam_size=args.beam_size):
        print(translation)
    return 0


def _export_translator(args):
    from kerasplm.export import export_translator
    from kerasplm.tasks.translation import load_translator

    path = export_translator(load_translator(args.run), args.to, version=args.version, overwrite=args.overwrite,
                             jit_compile=args.jit_compile, max_beam_size=args.max_beam_size)
    print(path)
    return 0


def _export_classifier(args):
    from kerasplm.export.classifier import export_classifier

    print(export_classifier(args.run, args.to, version=args.version, overwrite=args.overwrite))
    return 0


def _export_embedder(args):
    from kerasplm.export.embedder import export_embedder

    print(export_embedder(args.run, args.to, pooling=args.pooling, normalize=args.normalize,
                          sequence_length=args.sequence_length, version=args.version, overwrite=args.overwrite))
    return 0


def _serve(args):
    from kerasplm import serving

    if args.model_name is not None and args.model_config_file is not None:
        raise CLIError("--model-name goes with --model-base-path; a model config file names its models")
    port = args.rest_api_port if args.rest_api_port is not None else args.port
    if args.rest_api_port is not None and args.port is not None and args.port != args.rest_api_port:
        print(f"kerasplm serve: no gRPC API; serving REST on --rest_api_port {args.rest_api_port} "
              f"(--port {args.port} ignored)", file=sys.stderr)
    try:
        drained = serving.serve(
            args.model_base_path, args.model_name, model_config_file=args.model_config_file,
            host=args.host, port=serving.DEFAULT_PORT if port is None else port,
            max_body_bytes=args.max_body_bytes, max_batch_size=args.max_batch_size,
            batch_chunk_size=args.batch_chunk_size, poll_seconds=args.poll_seconds,
            shutdown_grace_seconds=args.shutdown_grace_seconds, quiet=args.quiet)
    except serving.ServerStartError as e:
        raise CLIError(str(e)) from None
    if not drained:
        # Requests were cut off and their threads may still be inside TensorFlow: leave without
        # running interpreter teardown under them (which can crash).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


# ---- BERT tagger (NER): `export tagger` ----
def _add_export_tagger_parser(families):
    tg = families.add_parser("tagger", help="export a BERT tagger run",
                             description="Export a `finetune bert-tagger` run: text -> entity spans.")
    tg.add_argument("--run", required=True, help="run directory written by `kerasplm finetune bert-tagger`")
    tg.add_argument("--to", required=True, help="model base path")
    tg.add_argument("--version", type=_positive_int, help="version number (default: next free)")
    tg.add_argument("--overwrite", action="store_true", help="replace an existing version")
    tg.set_defaults(handler=_export_tagger)


def _export_tagger(args):
    from kerasplm.export.tagger import export_tagger
    from kerasplm.tasks.bert_tagger_job import BertTagger
    from kerasplm.tasks.run_dir import load_run

    tagger = load_run(args.run)
    if not isinstance(tagger, BertTagger):
        raise ValueError(f"{args.run} is not a BERT tagger run (written by `kerasplm finetune bert-tagger`)")
    path = export_tagger(tagger.model, tagger.preprocessor, tagger.labels, args.to, version=args.version,
                         overwrite=args.overwrite)
    print(f"exported {path}")
    return 0


# ---- BERT question answering: `export qa` (the job is `finetune bert-qa`, in FINETUNE_JOBS) ----
def _add_qa_parsers(commands):
    from kerasplm.export.embedder import add_export_target_arguments

    export = next(a for a in commands.choices["export"]._actions if isinstance(a, argparse._SubParsersAction))
    ex = export.add_parser("qa", help="export a BERT question answering run",
                           description="Export a `finetune bert-qa` run: question + context strings "
                                       "-> answer, start/end character offsets, score.")
    add_export_target_arguments(ex, "a BERT question answerer (kerasplm finetune bert-qa)")
    ex.set_defaults(handler=_export_qa)


def _export_qa(args):
    from kerasplm.export.qa import export_qa
    from kerasplm.tasks.bert_qa_job import BertQA
    from kerasplm.tasks.run_dir import load_run

    qa = load_run(args.run)
    if not isinstance(qa, BertQA):
        raise ValueError(f"{args.run} is not a BERT question answering run (written by `kerasplm finetune bert-qa`)")
    print(f"exported {export_qa(qa, args.to, version=args.version, overwrite=args.overwrite)}")
    return 0


def main(argv=None):
    # TF 2.21 prints its absl start-up lines below level 3; user settings win.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("kerasplm: interrupted", file=sys.stderr)
        return 130
    except (CLIError, ValueError, FileNotFoundError, NotADirectoryError, FileExistsError, PermissionError) as e:
        print(f"kerasplm: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
