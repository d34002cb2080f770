"""The ``kerasplm`` command line.

    kerasplm train translator [--data TSV --src-col 1 --tgt-col 0 --preset transformer_seed
                               --steps N | --time-budget SECONDS --out RUN_DIR --seed 0 ...]
    kerasplm translate --run RUN_DIR [--beam-size 4] "¿Puedo tomar prestado este libro?" ...
    kerasplm export translator --run RUN_DIR --to export/translator [--version N] [--overwrite]
    kerasplm serve --model-base-path export/translator --model-name translator [--port 8501]

Every subcommand has ``--help``. Bad flags and unreadable inputs end with a one-line error and exit
status 2.
"""
import argparse
import os
import sys

DEFAULT_RUN_DIR = "runs/translator"
DEFAULT_EXPORT_DIR = "export/translator"
# The bundled-sample default run must finish (train + BLEU + export) in under 10 minutes on 2 cores.
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


def _fraction(text):
    value = _number(float, 0, inclusive=True)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def _existing_file(text):
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return text


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (usage stays available through --help)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser():
    from kerasplm.models.transformer import PRESETS
    from kerasplm.tasks.translation import DEFAULT_PEAK_LEARNING_RATE, DEFAULT_WARMUP_FRACTION

    parser = _Parser(prog="kerasplm", description="kerasplm: Transformer, BERT, GPT and ELMo "
                                     "in TensorFlow/Keras, from training to TensorFlow Serving.")
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = commands.add_parser("train", help="train a model", description="Train a model family.")
    train_families = train.add_subparsers(dest="family", metavar="FAMILY", required=True)
    tr = train_families.add_parser(
        "translator", help="the Transformer translator (default: Spanish→English, bundled Tatoeba sample)",
        description="Train the seed's Transformer translator. With no --data it trains Spanish→English on the "
                    "Tatoeba sample bundled in the package, reports held-out BLEU and exports a SavedModel.")
    tr.add_argument("--data", type=_existing_file, help="tab-separated parallel corpus (default: bundled sample)")
    tr.add_argument("--src-col", type=_nonnegative_int, default=1, help="0-based source column (default 1)")
    tr.add_argument("--tgt-col", type=_nonnegative_int, default=0, help="0-based target column (default 0)")
    tr.add_argument("--dev-data", type=_existing_file, help="held-out corpus (default: split off --data by source)")
    tr.add_argument("--dev-size", type=_positive_int, default=1000, help="held-out source sentences (default 1000)")
    tr.add_argument("--max-pairs", type=_positive_int, help="read at most this many pairs")
    tr.add_argument("--preset", choices=sorted(PRESETS), default="transformer_seed")
    tr.add_argument("--steps", type=_positive_int, help="train to this global step")
    tr.add_argument("--time-budget", type=_positive_float,
                    help=f"seconds of training (default {DEFAULT_TIME_BUDGET} when --steps is not given)")
    tr.add_argument("--batch-size", type=_positive_int, default=64)
    tr.add_argument("--vocab-size", type=_positive_int, default=8000, help="target WordPiece vocabulary size")
    tr.add_argument("--max-length", type=_positive_int, default=40, help="max tokens per sentence")
    tr.add_argument("--schedule", choices=["budget", "seed"], default="budget",
                    help="learning rate: 'budget' (default) warms up over --warmup-fraction of the run and decays "
                         "linearly to 0 at its last step, fitted to --steps or to the steps --time-budget allows "
                         "(timed on the first steps); 'seed' is the seed's CustomSchedule(d_model, --warmup-steps)")
    tr.add_argument("--peak-learning-rate", type=_positive_float, default=DEFAULT_PEAK_LEARNING_RATE,
                    help=f"peak of the 'budget' schedule (default {DEFAULT_PEAK_LEARNING_RATE:g})")
    tr.add_argument("--warmup-fraction", type=_fraction, default=DEFAULT_WARMUP_FRACTION,
                    help=f"warmup share of the 'budget' schedule (default {DEFAULT_WARMUP_FRACTION:g})")
    tr.add_argument("--schedule-steps", type=_positive_int,
                    help="fit the 'budget' schedule to this many steps (default: --steps, or timed from --time-budget)")
    tr.add_argument("--warmup-steps", type=_positive_int, default=4000, help="CustomSchedule warmup ('seed' schedule)")
    tr.add_argument("--label-smoothing", type=float, default=0.1)
    tr.add_argument("--eval-every", type=_positive_int, help="dev loss every N steps")
    tr.add_argument("--beam-size", type=_positive_int, default=1, help="beam size for the BLEU evaluation")
    tr.add_argument("--mixed-precision", choices=["mixed_bfloat16", "mixed_float16"])
    tr.add_argument("--no-jit", action="store_true", help="do not XLA-compile the train step")
    tr.add_argument("--out", default=DEFAULT_RUN_DIR, help=f"run directory (default {DEFAULT_RUN_DIR}); "
                    "an existing run is resumed")
    tr.add_argument("--export-to", default=DEFAULT_EXPORT_DIR,
                    help=f"export the trained model here (default {DEFAULT_EXPORT_DIR}); 'none' to skip")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--quiet", action="store_true", help="no progress bar")
    tr.set_defaults(handler=_train_translator)

    tl = commands.add_parser("translate", help="translate sentences with a trained run",
                             description="Translate sentences (arguments, or one per line on stdin).")
    tl.add_argument("sentences", nargs="*", help="source sentences (default: read stdin)")
    tl.add_argument("--run", required=True, help="run directory written by `kerasplm train translator`")
    tl.add_argument("--beam-size", type=_positive_int, default=1, help="1 = greedy (default)")
    tl.set_defaults(handler=_translate)

    _add_export_parser(commands)
    _add_serve_parser(commands)
    return parser


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


def _add_serve_parser(commands):
    from kerasplm.export.server import add_serve_arguments

    sv = commands.add_parser("serve", help="serve exported models over the TF Serving REST API",
                             description="A local server speaking the TensorFlow Serving REST API subset "
                                         "for machines without TensorFlow Serving.")
    add_serve_arguments(sv)
    sv.set_defaults(handler=_serve)


def _train_translator(args):
    from kerasplm.tasks.translation import train_translator

    if args.src_col == args.tgt_col:
        raise CLIError(f"--src-col and --tgt-col are both {args.src_col}")
    time_budget = args.time_budget
    if args.steps is None and time_budget is None:
        time_budget = DEFAULT_TIME_BUDGET
    summary = train_translator(
        args.out, data=args.data, src_col=args.src_col, tgt_col=args.tgt_col, dev_data=args.dev_data,
        preset=args.preset, steps=args.steps, time_budget=time_budget, batch_size=args.batch_size,
        vocab_size=args.vocab_size, max_length=args.max_length, warmup_steps=args.warmup_steps,
        schedule=args.schedule, peak_learning_rate=args.peak_learning_rate, warmup_fraction=args.warmup_fraction,
        schedule_steps=args.schedule_steps,
        label_smoothing=args.label_smoothing, dev_size=args.dev_size, max_pairs=args.max_pairs,
        eval_every=args.eval_every, bleu_beam_size=args.beam_size, jit_compile=False if args.no_jit else "auto",
        mixed_precision=args.mixed_precision, seed=args.seed, verbose=0 if args.quiet else 1)
    if args.export_to and args.export_to.lower() != "none":
        _export_and_show(summary["translator"], args.export_to)
    return 0


def _export_and_show(translator, export_dir):
    try:
        from kerasplm.export import export_translator, load_and_translate
    except ImportError:  # export arrives with the export issue
        return
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


def _serve(args):
    from kerasplm.export.server import run_serve_command

    return run_serve_command(args)


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
