"""Which models to serve: TensorFlow Serving's text-format ``ModelServerConfig``, or one base path.

The file format is the one ``tensorflow_model_server --model_config_file`` reads (a text protobuf), for
the fields kerasplm serve implements::

    model_config_list {
      config {
        name: "translator"                       # URL name: /v1/models/translator
        base_path: "translator"                  # holds integer version directories
        model_platform: "tensorflow"             # optional; only "tensorflow"
        model_version_policy { latest { num_versions: 2 } }   # or: all {}  /  specific { versions: 1 versions: 3 }
        version_labels { key: "stable" value: 1 }              # optional: /v1/models/translator/labels/stable
      }
      config { ... }
    }

``tensorflow_serving``'s own proto classes are not installed with TensorFlow, so this module parses the
format itself: comments (``#``), ``field: value`` and ``field { ... }`` (also ``field: { ... }`` and
``< ... >``), quoted strings with escapes (adjacent strings concatenate), integers, list values
(``versions: [1, 3]``) and optional ``,`` / ``;`` separators.  The parser is strict: an unknown or
unsupported field (``logging_config``, ``custom_model_config``...), a repeated singular field, a bad
value or a duplicate model name is an error naming the file, the line and the problem
(:class:`ModelConfigError`, a ``ValueError``).

**Relative base paths** are resolved against the directory of the config file, not the working
directory (TensorFlow Serving takes them as given, i.e. relative to its working directory): the same
file then works wherever ``kerasplm serve`` is started from.  Absolute paths are used as written.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

VALID_MODEL_NAME = re.compile(r"[^/:?#\s]+")  # a model name is one URL path segment


class ModelConfigError(ValueError):
    """A model config that cannot be used; from a file the message is ``FILE:LINE: problem``.

    ``code`` is the canonical gRPC status TF Serving answers for the problem (HandleReloadConfigRequest).
    """

    def __init__(self, message: str, code: str = "INVALID_ARGUMENT"):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class VersionPolicy:
    """TF Serving's ``ServableVersionPolicy``: which version directories are loaded.

    ``kind`` is ``"latest"`` (the ``num_versions`` largest), ``"all"`` or ``"specific"`` (``versions``).
    """

    kind: str = "latest"
    num_versions: int = 1
    versions: tuple = ()

    def select(self, available) -> list:
        """The versions to load among ``available`` (loadable version numbers), largest first."""
        newest_first = sorted(set(available), reverse=True)
        if self.kind == "latest":
            return newest_first[: self.num_versions]
        if self.kind == "all":
            return newest_first
        return [v for v in newest_first if v in self.versions]

    def describe(self) -> str:
        if self.kind == "latest":
            return f"latest {self.num_versions}"
        if self.kind == "all":
            return "all"
        return "specific " + ", ".join(map(str, sorted(self.versions)))


@dataclass(frozen=True)
class ModelConfig:
    """One served model: TF Serving's ``ModelConfig`` (the fields kerasplm serve implements).

    ``source`` says where it was declared (``"models.config:4"``), for error messages; it is not part of
    equality, so a reloaded config compares equal to the running one when only its lines moved.
    """

    name: str
    base_path: str
    version_policy: VersionPolicy = VersionPolicy()
    version_labels: dict = field(default_factory=dict)
    source: str = field(default="", compare=False)

    @classmethod
    def for_base_path(cls, base_path: str, name: str | None = None) -> "ModelConfig":
        """The ``--model_base_path`` / ``--model_name`` form; the name defaults to the directory's."""
        name = name or os.path.basename(os.path.normpath(base_path))
        _check_model_name(name, lambda problem: ValueError(f"--model-name: {problem}"))
        return cls(name=name, base_path=os.path.abspath(base_path))


def _check_model_name(name: str, error):
    if not VALID_MODEL_NAME.fullmatch(name):
        raise error(f"model name {name!r} must be non-empty and hold no '/', ':', '?', '#' or spaces")


# --------------------------------------------------------------------------------------------
# Tokenizer and generic text-format parser

_TOKEN_RE = re.compile(
    r"""(?P<space>[ \t\r\f\v]+|\#[^\n]*)
      | (?P<newline>\n)
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?))
      | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<punct>[{}<>:\[\],;])
    """,
    re.VERBOSE,
)
_ESCAPE_RE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|.)")
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a",
                   "b": "\b", "f": "\f", "v": "\v", "?": "?"}


@dataclass
class _Token:
    kind: str  # ident, number, string, punct, end
    text: str
    line: int


@dataclass
class _Field:
    """``name: value`` or ``name { ... }`` as parsed; ``value`` is a token or a list of fields."""

    name: str
    value: object
    line: int


class _Parser:
    """Recursive descent over the token list: message := field* ; field := NAME [':'] (block | value)."""

    def __init__(self, text: str, filename: str):
        self.filename = filename
        self.tokens = self._tokenize(text)
        self.pos = 0

    def error(self, line: int, problem: str) -> ModelConfigError:
        return ModelConfigError(f"{self.filename}:{line}: {problem}")

    def _tokenize(self, text: str) -> list:
        tokens, line, pos = [], 1, 0
        while pos < len(text):
            match = _TOKEN_RE.match(text, pos)
            if match is None:
                raise self.error(line, f"unexpected character {text[pos]!r}")
            kind = match.lastgroup
            if kind == "newline":
                line += 1
            elif kind != "space":
                tokens.append(_Token(kind, match.group(), line))
            pos = match.end()
        tokens.append(_Token("end", "end of file", line))
        return tokens

    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def take(self) -> _Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def expect(self, text: str) -> _Token:
        token = self.take()
        if token.text != text:
            raise self.error(token.line, f"expected '{text}', found '{token.text}'")
        return token

    def parse_message(self, closing: str | None) -> list:
        fields = []
        while True:
            token = self.peek()
            if closing is not None and token.text == closing:
                self.take()
                return fields
            if token.kind == "end":
                if closing is not None:
                    raise self.error(token.line, f"missing '{closing}' before end of file")
                return fields
            if token.kind != "ident":
                raise self.error(token.line, f"expected a field name, found '{token.text}'")
            self.take()
            fields.extend(self.parse_field_value(token))
            if self.peek().text in (",", ";"):
                self.take()

    def parse_field_value(self, name: _Token) -> list:
        colon = self.peek().text == ":"
        if colon:
            self.take()
        token = self.peek()
        if token.text in ("{", "<"):
            self.take()
            return [_Field(name.text, self.parse_message("}" if token.text == "{" else ">"), name.line)]
        if not colon:
            raise self.error(token.line, f"expected ':' or '{{' after '{name.text}', found '{token.text}'")
        if token.text == "[":  # list value: name: [v1, v2]
            self.take()
            values = []
            while self.peek().text != "]":
                values.append(_Field(name.text, self.parse_scalar(), name.line))
                if self.peek().text == ",":
                    self.take()
                elif self.peek().text != "]":
                    raise self.error(self.peek().line, f"expected ',' or ']', found '{self.peek().text}'")
            self.take()
            return values
        return [_Field(name.text, self.parse_scalar(), name.line)]

    def parse_scalar(self) -> _Token:
        token = self.take()
        if token.kind == "string":  # adjacent string literals concatenate, as in C
            parts = [self.unquote(token)]
            while self.peek().kind == "string":
                parts.append(self.unquote(self.take()))
            return _Token("string", "".join(parts), token.line)
        if token.kind in ("number", "ident"):
            return token
        raise self.error(token.line, f"expected a value, found '{token.text}'")

    def unquote(self, token: _Token) -> str:
        def replace(match):
            code = match.group(1)
            if code[0] == "x":
                return chr(int(code[1:], 16))
            if code[0] in "01234567":
                return chr(int(code, 8))
            if code in _SIMPLE_ESCAPES:
                return _SIMPLE_ESCAPES[code]
            raise self.error(token.line, f"unknown escape '\\{code}' in string")

        return _ESCAPE_RE.sub(replace, token.text[1:-1])


# --------------------------------------------------------------------------------------------
# The ModelServerConfig schema (the supported subset)

# Fields TF Serving knows but kerasplm serve does not implement: named in the error message.
_UNSUPPORTED = {
    "custom_model_config": "only model_config_list is supported",
    "logging_config": "request logging is not implemented",
    "model_type": "deprecated in TF Serving; use model_platform",
}


class _Schema:
    """Checks the parsed fields of one message against the names it allows."""

    def __init__(self, parser: _Parser):
        self.parser = parser

    def fields(self, fields: list, message: str, allowed: dict) -> dict:
        """``{name: [fields]}`` after checking names and counts; ``allowed`` maps name -> repeated?"""
        grouped: dict = {}
        for f in fields:
            if f.name not in allowed:
                reason = _UNSUPPORTED.get(f.name)
                problem = (f"'{f.name}' is not supported by kerasplm serve ({reason})" if reason else
                           f"unknown field '{f.name}' in {message}; expected one of: {', '.join(allowed)}")
                raise self.parser.error(f.line, problem)
            grouped.setdefault(f.name, []).append(f)
        for name, repeated in allowed.items():
            if not repeated and len(grouped.get(name, [])) > 1:
                raise self.parser.error(grouped[name][1].line, f"'{name}' given twice in {message}")
        return grouped

    def message(self, f: _Field) -> list:
        if not isinstance(f.value, list):
            raise self.parser.error(f.line, f"'{f.name}' must be a message {{ ... }}, not a value")
        return f.value

    def string(self, f: _Field) -> str:
        if isinstance(f.value, list) or f.value.kind != "string":
            raise self.parser.error(f.line, f"'{f.name}' must be a quoted string")
        return f.value.text

    def integer(self, f: _Field, minimum: int) -> int:
        token = f.value
        if isinstance(token, list) or token.kind != "number" or not re.fullmatch(r"[-+]?[0-9]+", token.text):
            shown = "a message" if isinstance(token, list) else repr(token.text)
            raise self.parser.error(f.line, f"'{f.name}' must be an integer, got {shown}")
        value = int(token.text)
        if not minimum <= value < 2**63:
            raise self.parser.error(f.line, f"'{f.name}' must be an integer in [{minimum}, 2^63), got {value}")
        return value


def parse_model_config(text: str, filename: str = "<model config>", base_dir: str | None = None) -> list:
    """Parse a text-format ``ModelServerConfig`` into a list of :class:`ModelConfig`.

    Relative ``base_path`` values are joined to ``base_dir`` (default: the working directory).
    Raises :class:`ModelConfigError` (``filename:line: problem``).
    """
    parser = _Parser(text, filename)
    schema = _Schema(parser)
    top = schema.fields(parser.parse_message(None), "the model server config", {"model_config_list": False})
    if "model_config_list" not in top:
        raise parser.error(1, "no 'model_config_list { config { ... } }' found")
    (config_list,) = top["model_config_list"]
    entries = schema.fields(schema.message(config_list), "model_config_list", {"config": True})
    if not entries.get("config"):
        raise parser.error(config_list.line, "model_config_list holds no 'config { ... }' entry")
    models, seen = [], {}
    for entry in entries["config"]:
        model = _model_config(schema, entry, base_dir)
        if model.name in seen:
            raise parser.error(entry.line, f"model name '{model.name}' already used on line {seen[model.name]}")
        seen[model.name] = entry.line
        models.append(model)
    return models


def _model_config(schema: _Schema, entry: _Field, base_dir: str | None) -> ModelConfig:
    allowed = {"name": False, "base_path": False, "model_platform": False,
               "model_version_policy": False, "version_labels": True}
    fields = schema.fields(schema.message(entry), "config", allowed)
    error = schema.parser.error
    for required in ("name", "base_path"):
        if required not in fields:
            raise error(entry.line, f"config is missing '{required}'")
    name = schema.string(fields["name"][0])
    _check_model_name(name, lambda problem: error(fields["name"][0].line, problem))
    base_path = schema.string(fields["base_path"][0])
    if not base_path:
        raise error(fields["base_path"][0].line, "'base_path' is empty")
    if not os.path.isabs(base_path):
        base_path = os.path.join(base_dir or os.getcwd(), base_path)
    for platform in fields.get("model_platform", []):
        if schema.string(platform) != "tensorflow":
            raise error(platform.line, f"model_platform '{schema.string(platform)}' is not supported; "
                                       "only 'tensorflow' (SavedModels)")
    policy = VersionPolicy()
    if "model_version_policy" in fields:
        policy = _version_policy(schema, fields["model_version_policy"][0])
    labels = {}
    for label in fields.get("version_labels", []):
        pair = schema.fields(schema.message(label), "version_labels", {"key": False, "value": False})
        if set(pair) != {"key", "value"}:
            raise error(label.line, "version_labels needs both 'key' and 'value'")
        key = schema.string(pair["key"][0])
        _check_model_name(key, lambda problem: error(label.line, problem.replace("model name", "label")))
        if key in labels:
            raise error(label.line, f"version label '{key}' given twice")
        labels[key] = schema.integer(pair["value"][0], minimum=0)
    return ModelConfig(name=name, base_path=os.path.normpath(base_path), version_policy=policy,
                       version_labels=labels, source=f"{schema.parser.filename}:{entry.line}")


def _version_policy(schema: _Schema, f: _Field) -> VersionPolicy:
    kinds = schema.fields(schema.message(f), "model_version_policy",
                          {"latest": False, "all": False, "specific": False})
    if len(kinds) > 1:
        raise schema.parser.error(f.line, f"model_version_policy takes one of latest/all/specific, got "
                                          f"{' and '.join(kinds)}")
    if not kinds:  # an empty policy is TF Serving's default
        return VersionPolicy()
    ((kind, (body,)),) = kinds.items()
    if kind == "all":
        schema.fields(schema.message(body), "all", {})
        return VersionPolicy("all")
    if kind == "latest":
        fields = schema.fields(schema.message(body), "latest", {"num_versions": False})
        num = schema.integer(fields["num_versions"][0], minimum=1) if "num_versions" in fields else 1
        return VersionPolicy("latest", num_versions=num)
    fields = schema.fields(schema.message(body), "specific", {"versions": True})
    versions = tuple(schema.integer(v, minimum=0) for v in fields.get("versions", []))
    if not versions:
        raise schema.parser.error(body.line, "specific { } lists no 'versions'")
    return VersionPolicy("specific", versions=tuple(sorted(set(versions))))


def read_text_file(path: str, what: str, error=None) -> str:
    """The text of a config file, or ``error`` (default :class:`ModelConfigError`) with one line naming ``path``:
    not UTF-8, or unreadable (``what`` says which file, e.g. "the model config file")."""
    error = error or ModelConfigError
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text ({e})") from None
    except OSError as e:
        raise error(f"{path}: cannot read {what}: {e.strerror}") from None


def read_model_config_file(path: str) -> list:
    """Read a ``--model_config_file``; relative base paths are resolved against its directory."""
    text = read_text_file(path, "the model config file")
    return parse_model_config(text, path, base_dir=os.path.dirname(os.path.abspath(path)))


def model_configs_from_proto(server_config) -> list:
    """The :class:`ModelConfig` list of a ``tensorflow.serving.ModelServerConfig`` proto (what gRPC's
    ``HandleReloadConfigRequest`` carries), checked like a config file, with TF Serving's messages.

    Only ``model_config_list`` is supported; as in TF Serving every ``base_path`` must be absolute (there
    is no file to be relative to) and a list may be empty (it unloads every model).  Raises
    :class:`ModelConfigError` whose ``code`` is TF Serving's (``INVALID_ARGUMENT``).
    """
    if server_config.WhichOneof("config") != "model_config_list":
        raise ModelConfigError("ServerModelConfig type not supported by HandleReloadConfigRequest. Only "
                               "ModelConfigList is currently supported")
    models, names = [], set()
    for index, entry in enumerate(server_config.model_config_list.config):
        def error(problem, index=index, name=entry.name):
            return ModelConfigError(f"model_config_list.config[{index}] ({name!r}): {problem}")

        if entry.name in names:
            raise ModelConfigError(f"Illegal to list model {entry.name} multiple times in config list")
        names.add(entry.name)
        _check_model_name(entry.name, error)
        if not os.path.isabs(entry.base_path):
            raise ModelConfigError(f"Expected model {entry.name} to have an absolute path or URI; got "
                                   f"base_path()={entry.base_path}")
        if entry.model_platform not in ("", "tensorflow"):
            raise error(f"model_platform '{entry.model_platform}' is not supported; only 'tensorflow' (SavedModels)")
        for unsupported, given in (("model_type", entry.model_type != 0),
                                   ("logging_config", entry.HasField("logging_config"))):
            if given:
                raise error(f"'{unsupported}' is not supported by kerasplm serve ({_UNSUPPORTED[unsupported]})")
        labels = {}
        for key, value in sorted(entry.version_labels.items()):
            _check_model_name(key, lambda problem: error(problem.replace("model name", "label")))
            if value < 0:
                raise error(f"version label '{key}' must name a version >= 0, got {value}")
            labels[key] = int(value)
        models.append(ModelConfig(name=entry.name, base_path=os.path.normpath(entry.base_path),
                                  version_policy=_version_policy_from_proto(entry.model_version_policy, error),
                                  version_labels=labels, source=f"model_config_list.config[{index}]"))
    return models


def _version_policy_from_proto(policy, error) -> VersionPolicy:
    kind = policy.WhichOneof("policy_choice")
    if kind is None:  # unset: TF Serving's default
        return VersionPolicy()
    if kind == "all":
        return VersionPolicy("all")
    if kind == "latest":  # num_versions 0 is the proto's unset value: TF Serving's default, 1
        return VersionPolicy("latest", num_versions=max(1, policy.latest.num_versions))
    versions = tuple(sorted(set(policy.specific.versions)))
    if not versions:
        raise error("specific { } lists no 'versions'")
    if versions[0] < 0:
        raise error(f"specific versions must be >= 0, got {versions[0]}")
    return VersionPolicy("specific", versions=versions)
