"""The ``kerasplm`` command line, made from the registry of the model families' commands.

    kerasplm train translator [--steps N | --time-budget SECONDS] [--out RUN_DIR] ...   # the main job
    kerasplm translate --run RUN_DIR "¿Puedo tomar prestado este libro?"
    kerasplm export translator --run RUN_DIR --to export/translator
    kerasplm serve --model-base-path export/translator --model-name translator
    kerasplm presets                                      # every family's presets with parameter counts
    kerasplm --help                                       # every command; each has its own --help

``train``, ``finetune``, ``export``, ``convert`` and the other per-family commands (``translate``,
``generate``, ``score``, ``fill-mask`` ...) come from :func:`kerasplm.registry.commands`: each family
declares them, with their options, in its manifest (``kerasplm/families/<family>.py``). This module holds
only what belongs to no family: the parser's frame, ``serve``, ``presets``, and running a command.
Building the parser imports no TensorFlow, so ``--help`` answers at once; TensorFlow's C++ log lines
are silenced unless ``--verbose`` is given. Training jobs run on TensorFlow's oneDNN CPU kernels (see
:func:`choose_cpu_kernels`); every other command on TensorFlow's default kernels. Bad flags and unreadable
inputs end with a one-line error and exit status 2; a training job stopped by SIGTERM exits with 143 after
saving its checkpoint.
"""
import argparse
import contextlib
import functools
import logging
import math
import os
import signal
import sys

from kerasplm import registry
from kerasplm.options import add_options_to_parser, options_from_args
from kerasplm.serving import defaults as serving_defaults

_VERBOSE_HELP = "show TensorFlow's own start-up and log lines"
_VERBOSE_DEST = "show_tensorflow_logs"   # not "verbose": the training jobs' progress option has that name
_TRAINS_DEST = "trains_a_model"           # set by the training jobs' subcommands (choose_cpu_kernels)


class CLIError(Exception):
    """An error the user can fix; printed as one line."""


def _number(kind, minimum, inclusive):
    """An argparse type: a finite ``kind`` (int or float) that must be > minimum (>= when ``inclusive``)."""
    expected = f"{'an integer' if kind is int else 'a number'} {'>=' if inclusive else '>'} {minimum}"

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


_positive_int = _number(int, 0, inclusive=False)
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
    """The whole command line: the registry's commands, ``serve`` and ``presets``."""
    parser = _Parser(prog="kerasplm", description="kerasplm: the pretrained language models of the classic "
                                                  "papers in TensorFlow/Keras, one folder per family (kerasplm "
                                                  "presets lists them), from training to TensorFlow Serving.")
    parser.add_argument("--version", action="version", version=f"kerasplm {_version()}")
    parser.add_argument("--verbose", dest=_VERBOSE_DEST, action="store_true", help=_VERBOSE_HELP)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    declared = registry.commands()
    groups = {}
    for verb, help_text in registry.VERBS.items():
        if any(c.verb == verb for c in declared):
            group = commands.add_parser(verb, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
            groups[verb] = group.add_subparsers(dest="name", metavar="NAME", required=True)
    for command in declared:
        where = groups[command.verb] if command.verb else commands
        sub = where.add_parser(command.name, help=command.help, description=command.description or command.help)
        add_options_to_parser(sub, command.options, defaults=command.cli_defaults)
        if command.is_job:
            default = command.out_default
            sub.add_argument("--out", default=default, required=default is None,
                             help="run directory (an existing run is resumed with its stored options)"
                                  + (f" (default {default})" if default else ""))
        _add_verbose(sub)
        sub.set_defaults(handler=functools.partial(_run_command, command), **{_TRAINS_DEST: command.is_job})
    _add_serve_parser(commands)
    _add_presets_parser(commands)
    return parser


def _add_verbose(parser):
    parser.add_argument("--verbose", dest=_VERBOSE_DEST, action="store_true", default=argparse.SUPPRESS,
                        help=_VERBOSE_HELP)


def _version():
    import kerasplm

    return kerasplm.__version__


def _run_command(command, args):
    """Run a registered command with the options given on the command line (see :class:`registry.Command`)."""
    given = options_from_args(args, command.options)
    for name, value in command.cli_defaults.items():
        given.setdefault(name, value)
    function = registry.resolve(command.run)
    if not command.is_job:
        options = command.options(**given)       # every check of the declaration (ValueError: one line)
        status = function(**{name: getattr(options, name) for name in command.options.specs()})
        return status if isinstance(status, int) else 0
    if command.default_time_budget is not None and "steps" not in given and "time_budget" not in given:
        given["time_budget"] = command.default_time_budget
    summary = function(args.out, **given)
    if summary.get("stop_reason") == "sigterm":
        # The checkpoint, history and logs are written and closed; 128 + SIGTERM tells a job controller that
        # the job did not finish (so it restarts it, and the run resumes). os._exit skips the interpreter's
        # teardown of TensorFlow, which took 12 s of a short grace period on a loaded 2-core machine.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signal.SIGTERM)
    if summary.get("wrote_run", True):
        print(f"wrote {args.out}: step {summary['step']}")
    else:   # a multi-worker job's other workers write nothing
        print(f"trained to step {summary['step']} (the chief writes the run in {args.out})")
    return 0


PORT_OFF = "off"


def _port(text):
    """A port in [0, 65535] (0: any free port) or ``off`` (that API is not served: returned as -1)."""
    if text.strip().lower() == PORT_OFF:
        return -1
    try:
        value = int(text)
    except ValueError:
        value = -2
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in [0, 65535] or {PORT_OFF!r}, got {text!r}")
    return value


def _flag(text):
    """A boolean flag's value as TF Serving writes them (``--enable_batching=true``)."""
    value = {"true": True, "1": True, "false": False, "0": False}.get(text.strip().lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def _add_serve_parser(commands):
    # TF Serving's underscore spellings are accepted too, so its users can paste their command lines.
    sv = commands.add_parser(
        "serve", help="serve exported models over TF Serving's gRPC and REST APIs",
        description="A local server speaking the TensorFlow Serving APIs for machines without TensorFlow "
                    "Serving: gRPC on --port (PredictionService Predict/GetModelMetadata, ModelService "
                    "GetModelStatus) and REST on --rest_api_port (status, metadata, predict; Prometheus metrics "
                    "at /monitoring/prometheus/metrics). SIGTERM/Ctrl-C let requests in flight finish, then "
                    "exit 0.")
    models = sv.add_mutually_exclusive_group(required=True)
    models.add_argument("--model-config-file", "--model_config_file", type=_existing_file, metavar="FILE",
                        help="TF Serving text-format model_config_list: several models, version policies "
                             "(relative base_path values are resolved against the file's directory)")
    models.add_argument("--model-base-path", "--model_base_path", metavar="DIR",
                        help="one model: directory holding integer version directories (export/<name>)")
    sv.add_argument("--model-name", "--model_name",
                    help="with --model-base-path: name in the URL /v1/models/<name> (default: the directory's)")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sv.add_argument("--port", type=_port, default=serving_defaults.DEFAULT_GRPC_PORT,
                    help=f"gRPC port, as in TF Serving (default {serving_defaults.DEFAULT_GRPC_PORT}; 0 = any free "
                         f"port; {PORT_OFF} = REST only)")
    sv.add_argument("--rest-api-port", "--rest_api_port", type=_port, default=serving_defaults.DEFAULT_REST_API_PORT,
                    help=f"REST port (default {serving_defaults.DEFAULT_REST_API_PORT}; 0 = any free port; "
                         f"{PORT_OFF} = gRPC only)")
    sv.add_argument("--max-body-bytes", type=_positive_int, default=serving_defaults.DEFAULT_MAX_BODY_BYTES,
                    help="largest accepted REST request body and gRPC request message in bytes "
                         f"(default {serving_defaults.DEFAULT_MAX_BODY_BYTES})")
    sv.add_argument("--max-batch-size", type=_positive_int, default=serving_defaults.DEFAULT_MAX_BATCH_SIZE,
                    help="most rows (instances) per request; more gets HTTP 400 / gRPC RESOURCE_EXHAUSTED "
                         f"(default {serving_defaults.DEFAULT_MAX_BATCH_SIZE})")
    sv.add_argument("--batch-chunk-size", type=_positive_int, default=serving_defaults.DEFAULT_BATCH_CHUNK_SIZE,
                    help="rows per signature call: larger requests run in chunks of this size, "
                         f"bounding memory (default {serving_defaults.DEFAULT_BATCH_CHUNK_SIZE})")
    sv.add_argument("--max-response-bytes", type=_positive_int, default=serving_defaults.DEFAULT_MAX_RESPONSE_BYTES,
                    help="largest answer to one request, counted as its output tensors' bytes (float32: 4 a "
                         "value; strings: their length) after every chunk of rows; over it the request gets "
                         "HTTP 413 / gRPC RESOURCE_EXHAUSTED, and no more of it runs. kerasplm's own flag "
                         f"(default {serving_defaults.DEFAULT_MAX_RESPONSE_BYTES})")
    sv.add_argument("--poll-seconds", "--file_system_poll_wait_seconds", type=_positive_float,
                    default=serving_defaults.DEFAULT_POLL_SECONDS,
                    help=f"how often to look for new versions (default {serving_defaults.DEFAULT_POLL_SECONDS:g} s)")
    sv.add_argument("--model-config-file-poll-wait-seconds", "--model_config_file_poll_wait_seconds",
                    type=_number(float, 0, inclusive=True), default=0.0, metavar="SECONDS",
                    help="with --model_config_file: read the file again every SECONDS and apply a changed "
                         "model_config_list without dropping requests in flight (default 0: read it once, as "
                         "TF Serving); gRPC ModelService.HandleReloadConfigRequest applies one at any time")
    sv.add_argument("--shutdown-grace-seconds", type=_number(float, 0, inclusive=True),
                    default=serving_defaults.DEFAULT_SHUTDOWN_GRACE_SECONDS,
                    help="on SIGTERM, how long requests in flight may take to finish "
                         f"(default {serving_defaults.DEFAULT_SHUTDOWN_GRACE_SECONDS:g} s, under Kubernetes' 30 s)")
    sv.add_argument("--max-connections", type=_positive_int, default=serving_defaults.DEFAULT_MAX_CONNECTIONS,
                    help="most open REST connections (a thread each, keep-alive ones included); one more is "
                         "answered 503 at once and closed. Also the most gRPC calls running or waiting "
                         "(more: RESOURCE_EXHAUSTED). kerasplm's own flag; TF Serving has none "
                         f"(default {serving_defaults.DEFAULT_MAX_CONNECTIONS})")
    sv.add_argument("--header-timeout-seconds", type=_positive_float,
                    default=serving_defaults.DEFAULT_HEADER_TIMEOUT_SECONDS,
                    help="time for a REST request's line and headers to arrive, from the connection's accept "
                         "(from the first byte on a kept-alive connection); slower gets 408 and is closed. "
                         "Also gRPC's connection handshake timeout "
                         f"(default {serving_defaults.DEFAULT_HEADER_TIMEOUT_SECONDS:g} s)")
    sv.add_argument("--enable-batching", "--enable_batching", type=_flag, nargs="?", const=True, default=False,
                    metavar="BOOL", help="merge concurrent predict requests to the same signature into one call "
                                         "(TF Serving's flag; --enable_batching=true also works)")
    sv.add_argument("--batching-parameters-file", "--batching_parameters_file", type=_existing_file, metavar="FILE",
                    help="with --enable_batching: TF Serving's text-format BatchingParameters (max_batch_size, "
                         "batch_timeout_micros, max_enqueued_batches, num_batch_threads, allowed_batch_sizes, "
                         "pad_variable_length_inputs); default: TF Serving's defaults")
    sv.add_argument("--quiet", action="store_true", help="do not log each request")
    _add_verbose(sv)
    sv.set_defaults(handler=_serve)


def _add_presets_parser(commands):
    pr = commands.add_parser("presets", help="list every model family's presets with parameter counts",
                             description="List the registered presets of every model family (or one) with "
                                         "their exact parameter counts, computed from the config (no model is "
                                         "built).")
    pr.add_argument("--family", help="only this family (e.g. transformer)")
    pr.set_defaults(handler=_presets)
    _add_verbose(pr)


def _presets(args):
    from kerasplm.models.presets import format_presets, list_presets

    print(format_presets(list_presets(args.family)))
    return 0


def _serve(args):
    from kerasplm import serving

    if args.model_name is not None and args.model_config_file is not None:
        raise CLIError("--model-name goes with --model-base-path; a model config file names its models")
    if args.model_config_file_poll_wait_seconds > 0 and args.model_config_file is None:
        raise CLIError("--model_config_file_poll_wait_seconds goes with --model_config_file (it re-reads that file)")
    grpc_port, rest_api_port = (None if p < 0 else p for p in (args.port, args.rest_api_port))
    if grpc_port is None and rest_api_port is None:
        raise CLIError(f"--port {PORT_OFF} and --rest_api_port {PORT_OFF}: nothing to serve")
    batching_parameters = None
    if args.enable_batching:
        from kerasplm.serving.batching import (DEFAULT_THREAD_POOL_NAME, BatchingParameters,
                                               read_batching_parameters_file)

        batching_parameters = (read_batching_parameters_file(args.batching_parameters_file)
                               if args.batching_parameters_file else
                               BatchingParameters(thread_pool_name=DEFAULT_THREAD_POOL_NAME))
    elif args.batching_parameters_file:  # TF Serving refuses it too
        raise CLIError("--batching_parameters_file is set without setting --enable_batching to true")
    try:
        serving.serve(
            args.model_base_path, args.model_name, model_config_file=args.model_config_file,
            host=args.host, rest_api_port=rest_api_port, grpc_port=grpc_port,
            max_body_bytes=args.max_body_bytes, max_batch_size=args.max_batch_size,
            batch_chunk_size=args.batch_chunk_size, max_response_bytes=args.max_response_bytes,
            poll_seconds=args.poll_seconds,
            shutdown_grace_seconds=args.shutdown_grace_seconds, quiet=args.quiet,
            max_connections=args.max_connections, header_timeout_seconds=args.header_timeout_seconds,
            config_poll_seconds=args.model_config_file_poll_wait_seconds,
            batching_parameters=batching_parameters)
    except serving.ServerStartError as e:
        raise CLIError(str(e)) from None
    # The server has stopped (every request answered, or cut off by a second signal). Leave without the
    # interpreter's teardown: gRPC's and TensorFlow's native threads may still be winding down, and finalizing
    # Python under them can abort the process ("terminate called ... exception not rethrown", exit -6), which a
    # loaded machine makes likely even after a clean drain. Everything the server wrote is flushed first.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _writes_to_standard_error(stream):
    """True when ``stream`` writes to this process's file descriptor 2 (not a test's captured stream)."""
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


@contextlib.contextmanager
def _native_logs_silenced(verbose):
    """TensorFlow's C++ logging (oneDNN, CUDA stubs, CPU features; SentencePiece's normalizer inside
    tensorflow-text) and TensorFlow's Python warnings stay silent while a command runs, unless ``--verbose``.

    TF_CPP_MIN_LOG_LEVEL (an explicit value wins) silences what TensorFlow logs once it runs; the lines its
    libraries print while loading, and those of libraries it links (SentencePiece), ignore it. So the process's
    standard error (file descriptor 2) points at /dev/null for the whole command, while Python's ``sys.stderr`` (our
    errors, tracebacks, the server's log) keeps writing to the terminal through a copy of the descriptor. When
    ``sys.stderr`` is not descriptor 2 (a test capturing it), only the import of TensorFlow is silenced.
    """
    if verbose:
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    python_stderr = sys.stderr
    python_stderr.flush()
    whole_command = _writes_to_standard_error(python_stderr)
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    restored = False

    def restore():
        nonlocal restored
        if not restored:
            os.dup2(saved, 2)
            os.close(saved)
            restored = True

    if whole_command:
        sys.stderr = open(os.dup(saved), "w", encoding=getattr(python_stderr, "encoding", None) or "utf-8",
                          errors="backslashreplace", buffering=1)
    logger, level = None, None
    try:
        import tensorflow  # noqa: PLC0415  (CLI start-up: loaded only once a command runs)
        import tensorflow_text  # noqa: F401, PLC0415

        logger = tensorflow.get_logger()
        level = logger.level
        logger.setLevel("ERROR")
        if not whole_command:
            restore()
        yield
    finally:
        if logger is not None:
            logger.setLevel(level)
        if whole_command:
            sys.stderr.flush()
            sys.stderr.close()
            sys.stderr = python_stderr
        restore()


def choose_cpu_kernels(args):
    """Before TensorFlow is imported: oneDNN's CPU kernels for a training job, unless ``TF_ENABLE_ONEDNN_OPTS``
    is set already. Returns the variable's value for this command (None: TensorFlow's default).

    TensorFlow turns oneDNN on by default only on CPUs with AVX-512 VNNI/BF16 or AMX, and runs Eigen's kernels
    elsewhere. On a 2-core AVX2 EPYC (benchmarks/RESULTS.md, "oneDNN on an AVX2 machine") oneDNN made the training
    steps 1.3-2x faster (translator, BERT, MiniLM fine-tuning, GPT, the GRU translator) and small-batch inference
    1.6-2.6x slower (the translator's greedy decoding and its serving signature at one sentence per request). So
    training jobs turn it on and ``serve``, ``translate``, ``generate`` and the exports keep TensorFlow's choice.
    TensorFlow reads the variable once, when it is imported: a job's own decoding (the translator's BLEU) runs on
    the same kernels as its training."""
    if getattr(args, _TRAINS_DEST, False) and "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    return os.environ.get("TF_ENABLE_ONEDNN_OPTS")


def main(argv=None):
    try:
        parser = build_parser()
    except (ImportError, ValueError) as e:   # a family manifest that cannot be read (KERASPLM_FAMILIES ...)
        print(f"kerasplm: error: {e}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    choose_cpu_kernels(args)
    with _native_logs_silenced(getattr(args, _VERBOSE_DEST, False)):
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
