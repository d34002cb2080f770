"""Job options declared once: the Python API and the CLI flags both come from one frozen dataclass.

A job (``train translator``, later ``train bert`` ...) declares its options as a frozen dataclass
deriving from :class:`JobOptions`, each field made with :func:`option`::

    @dataclasses.dataclass(frozen=True)
    class TranslatorOptions(JobOptions):
        preset: str = option("transformer_seed", "model preset", choices=lambda: sorted(PRESETS))
        label_smoothing: float = option(0.1, "label smoothing ε", kind=float, minimum=0, maximum=1,
                                        exclusive_maximum=True)
        steps: int = option(None, "train to this global step", kind=int, minimum=1, scope=SESSION)

Adding an option is adding one such line. The field carries:

- ``help`` (the CLI help; the default is appended), ``flag`` (default ``--`` + name with dashes; a tuple
  gives aliases, e.g. TF Serving's underscore spellings), ``metavar``;
- ``positional=True``: a positional argument instead of a flag (``nargs`` "*" or "+": a tuple of values);
  ``required=True``: the option must be given (``None`` is refused);
- ``kind`` (``int``, ``float`` or ``str``: how the CLI parses the text), ``minimum`` / ``maximum``
  (inclusive unless ``exclusive_minimum`` / ``exclusive_maximum``), ``choices`` (a list; or, when
  the list lives in a module that imports TensorFlow, a zero-argument callable or a ``"module:attribute"``
  string, resolved when the options are built, never when the command line is parsed, so that ``--help``
  imports nothing heavy), ``file=True`` (an existing file; stored as an absolute path);
- ``const``: the flag takes no argument and sets this value (``--no-jit`` sets ``jit_compile=False``);
  ``kind=bool`` without ``const``: a ``--name`` / ``--no-name`` pair;
- ``scope``: :data:`RUN` options are fixed when a run directory is created (stored in its
  ``config.json``; a resume that asks for a different value is refused), :data:`SESSION` options may
  change from one invocation to the next (steps, time budget, evaluation, precision, verbosity).

``None`` is always accepted for an option whose default is ``None``. Every value is validated when
the dataclass is built (``ValueError`` naming the option), the same check the CLI applies to its
flags (argparse's one-line error). :func:`add_options_to_parser` adds the flags, with
``argparse.SUPPRESS`` defaults so that :func:`options_from_args` returns only the options given on
the command line: a resumed run keeps its stored values for the others.
"""
import argparse
import dataclasses
import importlib
import math
import os

__all__ = ["RUN", "SESSION", "JobOptions", "TrainingOptions", "FineTuningOptions", "ExportOptions", "DecodingRequestOptions",
           "WeightsDirectoryOptions", "DEFAULT_LENGTH_BUCKET", "LENGTH_BUCKET_HELP", "DEFAULT_SORTISH", "SORTISH_HELP", "OptionsConflict",
           "option", "add_options_to_parser", "options_from_args", "resolve_options"]

RUN = "run"
SESSION = "session"


@dataclasses.dataclass(frozen=True)
class _Spec:
    help: str
    flag: str = None
    metavar: str = None
    kind: type = None
    minimum: float = None
    maximum: float = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    choices: object = None
    file: bool = False
    const: object = None
    scope: str = RUN
    positional: bool = False
    nargs: str = None
    required: bool = False

    @property
    def lazy_choices(self):
        return callable(self.choices) or isinstance(self.choices, str)

    def allowed_choices(self):
        if isinstance(self.choices, str):
            module, _, attribute = self.choices.partition(":")
            return list(getattr(importlib.import_module(module), attribute))
        return list(self.choices()) if callable(self.choices) else self.choices

    def describe(self):
        """'an integer > 0', 'a number >= 0 and < 1', ... (None when unconstrained)."""
        bounds = []
        if self.minimum is not None:
            bounds.append(f"{'>' if self.exclusive_minimum else '>='} {self.minimum}")
        if self.maximum is not None:
            bounds.append(f"{'<' if self.exclusive_maximum else '<='} {self.maximum}")
        if self.kind not in (int, float):
            return None
        noun = "an integer" if self.kind is int else "a number"
        return f"{noun} {' and '.join(bounds)}".strip()

    def problem(self, value):
        """Why ``value`` is not acceptable (a phrase), or None."""
        if self.nargs is not None:
            if not isinstance(value, (list, tuple)):
                return "expected a list of values"
            if self.nargs == "+" and not value:
                return "expected at least one value"
            return next((p for p in map(self._problem_of_one, value) if p), None)
        return self._problem_of_one(value)

    def _problem_of_one(self, value):
        if self.kind is bool and not isinstance(value, bool):
            return "expected true or false"
        if self.kind in (int, float):
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not numeric or (self.kind is int and not isinstance(value, int)):
                return f"expected {self.describe()}"
            too_low = self.minimum is not None and (
                value < self.minimum or (self.exclusive_minimum and value == self.minimum))
            too_high = self.maximum is not None and (
                value > self.maximum or (self.exclusive_maximum and value == self.maximum))
            if too_low or too_high or not math.isfinite(value):  # inf and NaN: never a meaningful option value
                return f"expected {self.describe()}" if math.isfinite(value) else \
                    f"expected a finite value ({self.describe()})"
        choices = self.allowed_choices()
        if choices is not None and value not in choices:
            return f"expected one of {', '.join(map(str, choices))}"
        if self.file and not os.path.isfile(value):
            return "no such file"
        return None


def option(default, help, *, scope=RUN, **spec):
    """A dataclass field for a :class:`JobOptions` subclass (see the module docstring)."""
    return dataclasses.field(default=default, metadata={"option": _Spec(help=help, scope=scope, **spec)})


class OptionsConflict(ValueError):
    """A resumed run was asked for options other than those it was created with."""


@dataclasses.dataclass(frozen=True)
class JobOptions:
    """Base of every job's options dataclass: validates each field when built."""

    @classmethod
    def specs(cls):
        """{name: spec} of the declared options, in declaration order."""
        return {f.name: f.metadata["option"] for f in dataclasses.fields(cls) if "option" in f.metadata}

    @classmethod
    def defaults(cls):
        return {f.name: f.default for f in dataclasses.fields(cls) if "option" in f.metadata}

    def __post_init__(self):
        defaults = self.defaults()
        for name, spec in self.specs().items():
            value = getattr(self, name)
            if value is None and spec.required:
                raise ValueError(f"option {name} is required")
            if value is None and defaults[name] is None:
                continue
            problem = spec.problem(value)
            if problem:
                raise ValueError(f"option {name}: {problem}, got {value!r}")
        self.check()

    def check(self):
        """Checks involving several options (override; raise ValueError)."""

    def stored(self, scope=RUN):
        """The options of ``scope`` as JSON-ready values (files as absolute paths), for config.json."""
        specs = self.specs()
        return {name: _normalized(specs[name], getattr(self, name))
                for name in specs if specs[name].scope == scope}

    def replace(self, **changes):
        unknown = sorted(set(changes) - set(self.specs()))
        if unknown:
            raise TypeError(f"unknown option(s) {', '.join(unknown)}; the options of {type(self).__name__} "
                            f"are {', '.join(self.specs())}")
        return dataclasses.replace(self, **changes)


# A generation request's length when it names none (capped by the model's context: DecodingRequestOptions).
DEFAULT_MAX_NEW_TOKENS = 64


@dataclasses.dataclass(frozen=True)
class DecodingRequestOptions(JobOptions):
    """A text-generation request's options, declared once: ``kerasplm generate``'s flags are these fields, and the
    engine's request rules and defaults (:mod:`kerasplm.generation.options`, ``TextGenerator.generate``) read them.
    0 means "off" for every sampling option: temperature 0 = greedy decoding."""
    max_new_tokens: int = option(None, f"tokens to generate (default {DEFAULT_MAX_NEW_TOKENS}, or as many as the "
                                 f"model's context leaves when that is fewer)", kind=int, minimum=1)
    temperature: float = option(0.0, "sampling temperature; 0 = greedy", kind=float, minimum=0)
    top_k: int = option(None, "sample from the k most probable tokens (0 = no top-k filter)", kind=int, minimum=0)
    top_p: float = option(None, "nucleus sampling mass in [0, 1] (0 or 1 = no nucleus)", kind=float, minimum=0,
                          maximum=1)
    num_beams: int = option(1, "beam search with this many beams (1 = none)", kind=int, minimum=1)
    seed: int = option(0, "sampling seed", kind=int)


@dataclasses.dataclass(frozen=True)
class TrainingOptions(JobOptions):
    """The options every training job has: its seed (RUN: stored, kept on resume) and the SESSION options
    that apply to one invocation (a resume may change them)."""
    seed: int = option(0, "seed of the data split, shuffle, initialization and dropout", kind=int, scope=RUN)
    steps: int = option(None, "train to this global step (a resumed run continues to the same total)",
                        kind=int, minimum=0, exclusive_minimum=True, scope=SESSION)
    time_budget: float = option(None, "seconds of training", kind=float, minimum=0, exclusive_minimum=True,
                                scope=SESSION)
    eval_every: int = option(None, "held-out loss every N steps", kind=int, minimum=0, exclusive_minimum=True,
                             scope=SESSION)
    mixed_precision: str = option(None, "Keras dtype policy for training",
                                  choices=["mixed_bfloat16", "mixed_float16"], scope=SESSION)
    jit_compile: object = option("auto", "do not XLA-compile the train step", flag="--no-jit", const=False,
                                 choices=["auto", True, False], scope=SESSION)
    verbose: int = option(1, "no progress bar", flag="--quiet", const=0, kind=int, minimum=0, scope=SESSION)
    distribute: str = option("default", "tf.distribute strategy: default (one device), mirrored (every local GPU, "
                             "or the logical CPUs), multi-worker (MultiWorkerMirroredStrategy over the cluster in "
                             "TF_CONFIG: run the same command on every worker; the chief writes the run)",
                             choices=["default", "mirrored", "multi-worker"], scope=SESSION)


# The learning-rate schedules a fine-tuning job may choose (FineTuningOptions.schedule).
FINE_TUNING_SCHEDULES = ["linear", "stlr"]


@dataclasses.dataclass(frozen=True)
class FineTuningOptions(TrainingOptions):
    """What every fine-tuning job (``kerasplm finetune ...``) may choose besides its own options: the learning-rate
    schedule and discriminative learning rates (ULMFiT, Howard & Ruder 2018, §3.2). A job's options declare
    ``learning_rate`` (the peak / top group's rate) and, for the linear schedule, ``warmup_fraction``."""
    schedule: str = option("linear", "learning-rate schedule: linear (warmup over --warmup-fraction, then linear "
                                     "decay to 0) or stlr (ULMFiT's slanted triangular: a rise over --stlr-cut-frac "
                                     "of the steps, then a decay to 1/--stlr-ratio of the peak)",
                           choices=FINE_TUNING_SCHEDULES)
    stlr_cut_frac: float = option(0.1, "stlr: fraction of the steps over which the learning rate rises", kind=float,
                                  minimum=0, maximum=1, exclusive_minimum=True, exclusive_maximum=True)
    stlr_ratio: float = option(32.0, "stlr: how much smaller the lowest learning rate is than the peak", kind=float,
                               minimum=1)
    discriminative_lr: float = option(None, "discriminative fine-tuning: each layer group learns at the rate of the "
                                            "group above divided by this factor, the top group (the head) at "
                                            "--learning-rate (ULMFiT: 2.6; none: off)", kind=float, minimum=0,
                                      exclusive_minimum=True, metavar="FACTOR")

    def check(self):
        if self.discriminative_lr is not None and getattr(self, "layer_decay", None) is not None:
            raise ValueError("give either discriminative_lr or layer_decay (both scale the learning rate per layer), "
                             "not both")


@dataclasses.dataclass(frozen=True)
class ExportOptions(JobOptions):
    """What every ``kerasplm export`` command takes: the run, the model base path, the version rule.

    A family's exporter subclasses it, setting ``to``'s default and adding its own options."""
    run: str = option(None, "run directory to export", metavar="RUN_DIR", required=True)
    to: str = option(None, "model base path: the SavedModel goes to <to>/<version>/", metavar="DIR", required=True)
    version: int = option(None, "version number (default: the next free one)", kind=int, minimum=1)
    overwrite: bool = option(False, "replace an existing version", const=True, choices=[True, False])


def _normalized(spec, value):
    return os.path.abspath(value) if spec.file and value is not None else value


def resolve_options(options_cls, options=None, overrides=None, stored=None, where="the run directory"):
    """Options for a new or resumed run -> (options, names given explicitly).

    ``options`` (an instance, or None for the defaults) updated with ``overrides``; the explicit
    options are ``overrides`` plus the fields of ``options`` that differ from their defaults. With
    ``stored`` (the RUN options of an existing run), every RUN option not given explicitly takes its
    stored value, and an explicit one that differs raises :class:`OptionsConflict` naming them all.
    """
    overrides = dict(overrides or {})
    base = options if options is not None else options_cls()
    if not isinstance(base, options_cls):
        raise TypeError(f"options must be a {options_cls.__name__}, got {type(base).__name__}")
    defaults = options_cls.defaults()
    explicit = set(overrides) | {n for n, v in defaults.items() if getattr(base, n) != v}
    resolved = base.replace(**overrides)
    if not stored:
        return resolved, explicit
    specs = options_cls.specs()
    conflicts, keep = [], {}
    for name, value in stored.items():
        if name not in specs or specs[name].scope != RUN:
            continue  # an option of an older or newer kerasplm: nothing to compare against
        if name in explicit:
            if _normalized(specs[name], getattr(resolved, name)) != value:
                conflicts.append(f"{name}={getattr(resolved, name)!r} (the run has {value!r})")
        else:
            keep[name] = value
    if conflicts:
        raise OptionsConflict(f"{where} was created with other options: {'; '.join(conflicts)}. Leave these "
                              f"options out (or repeat the run's values) to resume, or give a new run "
                              f"directory (--out) to start fresh")
    return resolved.replace(**keep), explicit


# ---------------------------------------------------------------------------------------------- CLI
def _argparse_type(name, spec):
    def parse(text):
        try:
            value = spec.kind(text) if spec.kind else text
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {spec.describe()}, got {text!r}") from None
        if spec.choices is not None:
            return value  # argparse reports a bad choice itself; lazy choices are checked with the options
        problem = spec._problem_of_one(value)
        if problem:
            what = text if problem == "no such file" else repr(text)
            raise argparse.ArgumentTypeError(f"{problem}{': ' if problem == 'no such file' else ', got '}{what}")
        return value
    parse.__name__ = spec.kind.__name__ if spec.kind else "str"  # argparse names the type in errors
    return parse


def add_options_to_parser(parser, options_cls, defaults=None):
    """Adds one flag (or positional argument) per option of ``options_cls`` to an argparse parser.

    Flags default to ``argparse.SUPPRESS``, so that :func:`options_from_args` returns only the options given;
    ``defaults`` ({name: value}) are the values the help shows where the command line's default differs
    from the dataclass's. Lazily declared choices are not listed (that would import their module).
    """
    shown_defaults = {**options_cls.defaults(), **(defaults or {})}
    for name, spec in options_cls.specs().items():
        flags = spec.flag if isinstance(spec.flag, tuple) else (spec.flag or "--" + name.replace("_", "-"),)
        help_text = spec.help
        if spec.const is None and shown_defaults[name] is not None and not spec.nargs:
            help_text += f" (default {shown_defaults[name]})"
        choices = None if spec.lazy_choices else spec.allowed_choices()
        if spec.positional:
            parser.add_argument(name, nargs=spec.nargs, type=_argparse_type(name, spec), choices=choices,
                                default=argparse.SUPPRESS, metavar=spec.metavar or name.upper(), help=help_text)
        elif spec.const is not None:
            parser.add_argument(*flags, dest=name, action="store_const", const=spec.const,
                                default=argparse.SUPPRESS, help=help_text)
        elif spec.kind is bool:   # --name / --no-name
            parser.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction,
                                default=argparse.SUPPRESS, help=help_text)
        else:
            parser.add_argument(*flags, dest=name, type=_argparse_type(name, spec), choices=choices,
                                nargs=spec.nargs, default=argparse.SUPPRESS, required=spec.required,
                                metavar=spec.metavar or flags[0].lstrip("-").replace("-", "_").upper(),
                                help=help_text)


def options_from_args(args, options_cls):
    """{name: value} of the options given on the command line (absent flags are left out)."""
    given = {}
    for name, spec in options_cls.specs().items():
        if hasattr(args, name):
            value = getattr(args, name)
            given[name] = tuple(value) if spec.nargs is not None else value
    return given


# Fine-tuning batches are cut to their longest example rounded up to a multiple of this (at most 128 / 16 = 8
# widths), instead of being padded to --max-length: SST-2 sentences average ~12 word pieces.
DEFAULT_LENGTH_BUCKET = 16
LENGTH_BUCKET_HELP = ("pad each batch to its longest example rounded up to a multiple of this many tokens, not to "
                      "{length} (few widths: one trace, one XLA compile each); 0: pad to {length} (default: "
                      f"{DEFAULT_LENGTH_BUCKET}; runs made before the option: 0)")

# New classifier runs train on sortish batches of this many batches' worth of examples sorted by their tokens: with
# the length bucket, an SST-2 batch then holds ~17-22 positions where shuffled batches held ~45.
DEFAULT_SORTISH = 50
SORTISH_HELP = ("sortish training batches (HuggingFace's group_by_length, fastai's SortishSampler): every run of this "
                "many batches' worth of shuffled examples is sorted by its tokens and cut into batches, shuffled in "
                "turn, so that a batch holds examples of similar length and pays for few padded positions; 0: plain "
                f"shuffled batches (default: {DEFAULT_SORTISH}; runs made before the option: 0)")


@dataclasses.dataclass(frozen=True)
class WeightsDirectoryOptions(JobOptions):
    """Every ``kerasplm convert <family>`` that reads one directory of foreign weights (HuggingFace's, Google's)
    into a new run."""
    source: str = option(None, "the directory holding the weights", flag="--from", metavar="DIR", required=True)
    out: str = option(None, "the run directory to write (must not hold a run)", metavar="RUN_DIR", required=True)
    allow_pickle: bool = option(False, "also read pytorch_model.bin (unpickling runs code from the file: only for "
                                "files you trust)", const=True, choices=[True, False])
