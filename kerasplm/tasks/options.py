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

- ``help`` (the CLI help; the default is appended), ``flag`` (default ``--`` + name with dashes),
  ``metavar``;
- ``kind`` (``int``, ``float`` or ``str``: how the CLI parses the text), ``minimum`` / ``maximum``
  (inclusive unless ``exclusive_minimum`` / ``exclusive_maximum``), ``choices`` (a list, or a
  zero-argument callable returning one), ``file=True`` (an existing file; stored as an absolute path);
- ``const``: the flag takes no argument and sets this value (``--no-jit`` sets ``jit_compile=False``);
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
import os

__all__ = ["RUN", "SESSION", "JobOptions", "OptionsConflict", "option", "add_options_to_parser",
           "options_from_args", "resolve_options"]

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

    def allowed_choices(self):
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
        if self.kind in (int, float):
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not numeric or (self.kind is int and not isinstance(value, int)):
                return f"expected {self.describe()}"
            too_low = self.minimum is not None and (
                value < self.minimum or (self.exclusive_minimum and value == self.minimum))
            too_high = self.maximum is not None and (
                value > self.maximum or (self.exclusive_maximum and value == self.maximum))
            if too_low or too_high or value != value:  # NaN fails every comparison
                return f"expected {self.describe()}"
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
            return value  # argparse reports a bad choice itself ("invalid choice: ...")
        problem = spec.problem(value)
        if problem:
            what = text if problem == "no such file" else repr(text)
            raise argparse.ArgumentTypeError(f"{problem}{': ' if problem == 'no such file' else ', got '}{what}")
        return value
    parse.__name__ = spec.kind.__name__ if spec.kind else "str"  # argparse names the type in errors
    return parse


def add_options_to_parser(parser, options_cls):
    """Adds one flag per option of ``options_cls`` to an argparse parser (defaults: SUPPRESS)."""
    defaults = options_cls.defaults()
    for name, spec in options_cls.specs().items():
        flag = spec.flag or "--" + name.replace("_", "-")
        help_text = spec.help
        if spec.const is None and defaults[name] is not None:
            help_text += f" (default {defaults[name]})"
        if spec.const is not None:
            parser.add_argument(flag, dest=name, action="store_const", const=spec.const,
                                default=argparse.SUPPRESS, help=help_text)
        else:
            parser.add_argument(flag, dest=name, type=_argparse_type(name, spec), choices=spec.allowed_choices(),
                                default=argparse.SUPPRESS, metavar=spec.metavar or flag.lstrip("-").replace("-", "_").upper(),
                                help=help_text)


def options_from_args(args, options_cls):
    """{name: value} of the options given on the command line (absent flags are left out)."""
    return {name: getattr(args, name) for name in options_cls.specs() if hasattr(args, name)}
