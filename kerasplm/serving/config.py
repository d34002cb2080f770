"""Which models to serve: TensorFlow Serving's text-format ``ModelServerConfig``, or one base path.

The file format is the one ``tensorflow_model_server --model_config_file`` reads, a text protobuf of
``tensorflow.serving.ModelServerConfig``; kerasplm serve implements these fields of it::

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

The file is parsed by protobuf's own text-format parser (``google.protobuf.text_format``) into TF
Serving's own message (``tensorflow_serving.config.model_server_config_pb2.ModelServerConfig``, from
``tensorflow-serving-api``), so every spelling TF Serving accepts is read the same way: comments,
``field { ... }`` / ``field: { ... }`` / ``field < ... >``, list values (``versions: [1, 3]``), adjacent
strings, ``,`` / ``;`` separators.  text_format keeps no positions, so :func:`parse_text_proto` then walks
the (already valid) text once with text_format's tokenizer to note the line of every field as written
(:class:`Site`), for error messages.

Every problem is one line naming the file and the line (:class:`ModelConfigError`, a ``ValueError``,
``FILE:LINE: problem``): a syntax error or a value of the wrong type (text_format's own message, with the
column), an unknown field (``unknown field 'nmae' in config; expected one of: ...``), a singular field
given twice, and what kerasplm serve checks beyond the proto: a field TF Serving knows that kerasplm
serve does not implement (``logging_config``, ``model_type``, ``custom_model_config``), a missing or empty
``name`` / ``base_path``, a model name that is not one URL path segment, a duplicate model name, a
``model_platform`` other than ``tensorflow``, an explicit ``num_versions: 0``, ``specific {}`` with no
versions, a negative version, a version label without its key or value or given twice.

**Relative base paths** are resolved against the directory of the config file, not the working
directory (TensorFlow Serving takes them as given, i.e. relative to its working directory): the same
file then works wherever ``kerasplm serve`` is started from.  Absolute paths are used as written.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

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
# Text-format protos: text_format.Parse, one-line errors, and where each field was written


@dataclass
class Site:
    """Where a field was written in a text-format file: its ``line`` and, for a message, the sites of its
    own fields by name in file order (``fields``); for a scalar, ``value`` is the value as written (bytes
    for a string, else the token's text).  An element of a list value (``versions: [1, 3]``) is a site
    of its own."""

    line: int
    fields: dict = field(default_factory=dict)
    value: object = None

    def all(self, name: str) -> list:
        return self.fields.get(name, [])

    def first(self, name: str) -> "Site | None":
        sites = self.fields.get(name)
        return sites[0] if sites else None


def _sites(text: str) -> Site:
    """The :class:`Site` tree of ``text``, which text_format has parsed already (so its syntax is valid):
    text_format's own tokenizer walked with text_format's grammar, recording lines instead of values."""
    tokenizer = text_format.Tokenizer(text.split("\n"))

    def line() -> int:  # the current token's line (1-based), through the tokenizer's public API
        return tokenizer.ParseError("").GetLine()

    def message(site: Site, end: str | None):
        while not (tokenizer.AtEnd() if end is None else tokenizer.TryConsume(end)):
            if tokenizer.AtEnd():
                return
            where = line()
            name = tokenizer.token
            tokenizer.NextToken()
            if name == "[":  # an extension or Any type URL: [type.googleapis.com/pkg.Message]
                while not tokenizer.AtEnd() and not tokenizer.LookingAt("]"):
                    name += tokenizer.token
                    tokenizer.NextToken()
                name += "]"
                tokenizer.TryConsume("]")
            tokenizer.TryConsume(":")
            sites = site.fields.setdefault(name, [])
            if tokenizer.TryConsume("["):  # list value: name: [v1, v2] or name: [{...}, {...}]
                while not tokenizer.AtEnd() and not tokenizer.TryConsume("]"):
                    sites.append(value(line()))
                    tokenizer.TryConsume(",")
            else:
                sites.append(value(where))
            if not tokenizer.TryConsume(","):
                tokenizer.TryConsume(";")

    def value(where: int) -> Site:
        for opening, closing in (("{", "}"), ("<", ">")):
            if tokenizer.TryConsume(opening):
                site = Site(where)
                message(site, closing)
                return site
        if tokenizer.token[:1] in ("'", '"'):
            return Site(where, value=tokenizer.ConsumeByteString())  # adjacent strings concatenated
        token = tokenizer.token
        tokenizer.NextToken()
        return Site(where, value=token)

    root = Site(1)
    message(root, None)
    return root


_MAX_DEPTH = 64  # messages nested deeper are an error ("Message too deep"), not a RecursionError

# text_format's messages that kerasplm rewords (the rest are shown as they are, with the column).
_NO_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "([^"]+)"\.')
_TWICE = re.compile(r'Message type "([\w.]+)" should not have multiple "([^"]+)" fields\.')
_ONEOF = re.compile(r'Field "(\w+)" is specified along with field "(\w+)", another member of oneof "(\w+)" '
                    r'for message type "([\w.]+)"\.')
_VALUE_PROBLEMS = (  # problem with a field's value -> message naming the field ({name}, {value})
    (re.compile(r"Couldn't parse integer: (.*)"), "'{name}' must be an integer, got '{value}'"),
    (re.compile(r"Expected string but found: '?(.*?)'?"), "'{name}' must be a quoted string, got {value}"),
    (re.compile(r'Expected "true" or "false"\.'), "'{name}' must be true or false, got '{value}'"),
    (re.compile(r"Value out of range: (.*)"), "'{name}' is out of range for its type, got {value}"),
)
_FIELD_BEFORE = re.compile(r"(\w+)\s*:\s*(?:\[[^\[\]]*)?$")  # "name:" or "name: [1, " before a value
_TOKEN_AT = re.compile(r"[^\s,;\]}>]*")


def _message_types(descriptor, seen=None) -> dict:
    """Every message type reachable from ``descriptor``, by full name."""
    seen = {} if seen is None else seen
    if descriptor.full_name not in seen:
        seen[descriptor.full_name] = descriptor
        for f in descriptor.fields:
            if f.message_type is not None:
                _message_types(f.message_type, seen)
    return seen


def _field_named(types: dict, name: str):
    """A field called ``name`` of one of ``types`` (descriptors), or None."""
    for descriptor in types.values():
        if name in descriptor.fields_by_name:
            return descriptor.fields_by_name[name]
    return None


def _reword(problem: str, line_text: str, column: int, root, names: dict, unsupported: dict) -> str:
    """A clearer wording of text_format's ``problem`` (found at ``column`` of ``line_text``)."""
    types = _message_types(root.DESCRIPTOR)

    def message_name(full_name):
        return names.get(full_name, (full_name.rsplit(".", 1)[-1], None))[0]

    match = _NO_FIELD.fullmatch(problem)
    if match:
        type_name, name = match.groups()
        if name in unsupported:
            reason = unsupported[name]
            return f"'{name}' is not supported by kerasplm serve" + (f" ({reason})" if reason else "")
        expected = names.get(type_name, (None, None))[1]
        if expected is None:
            expected = [f.name for f in types[type_name].fields] if type_name in types else []
        return (f"unknown field '{name}' in {message_name(type_name)}; "
                + (f"expected one of: {', '.join(expected)}" if expected else "it takes no fields"))
    match = _TWICE.fullmatch(problem)
    if match:
        return f"'{match.group(2)}' given twice in {message_name(match.group(1))}"
    match = _ONEOF.fullmatch(problem)
    if match:
        second, first, oneof, type_name = match.groups()
        choices = [f.name for f in types[type_name].oneofs_by_name[oneof].fields] if type_name in types else []
        return f"{message_name(type_name)} takes one of {'/'.join(choices)}, got {first} and {second}"
    if problem == 'Expected ":".':
        name = re.search(r"(\w+)\s*$", line_text[: max(column - 1, 0)])
        if name:
            return f"expected ':' after '{name.group(1)}' (column {column})"
    before = _FIELD_BEFORE.search(line_text[: max(column - 1, 0)])
    if before:
        name = before.group(1)
        if problem == 'Expected "{".':
            f = _field_named(types, name)
            if f is not None and f.message_type is not None and f.message_type.full_name.startswith(
                    "google.protobuf.") and f.message_type.full_name.endswith("Value"):
                return f"'{name}' is a wrapper message: write {name} {{ value: ... }}"
            return f"'{name}' is a message: write {name} {{ ... }}"
        for pattern, wording in _VALUE_PROBLEMS:
            match = pattern.fullmatch(problem)
            if match:
                found = match.group(1) if pattern.groups else _TOKEN_AT.match(line_text, column - 1).group()
                return wording.format(name=name, value=found)
    return f"{problem.rstrip('.')} (column {column})"


def parse_text_proto(text: str, message, filename: str, error=None, names: dict | None = None,
                     unsupported: dict | None = None) -> Site:
    """Parse the text-format ``text`` into the proto ``message`` with ``google.protobuf.text_format``
    and return where its fields were written (the root :class:`Site`).

    A text that does not parse raises ``error`` (default :class:`ModelConfigError`) with one line,
    ``FILENAME:LINE: problem``, text_format's problem reworded where kerasplm knows a clearer one:
    ``names`` maps a message's full name to ``(how it is written, the fields kerasplm implements)``
    for "unknown field 'x' in config; expected one of: ..."; ``unsupported`` maps a field name the
    message lacks but TF Serving knows to why kerasplm serve does not implement it (or None).
    """
    error = error or ModelConfigError
    names, unsupported = names or {}, unsupported or {}
    try:
        text_format.Parse(text, message, max_recursion_depth=_MAX_DEPTH)
    except text_format.ParseError as e:
        line, column = e.GetLine(), e.GetColumn() or 1
        problem = str(e)
        if line is None:
            raise error(f"{filename}: {problem}") from None
        lines = text.split("\n")
        line_text = lines[line - 1] if line <= len(lines) else ""
        problem = problem.removeprefix(f"{line}:{e.GetColumn()} : ").removeprefix(f"{line} : ")
        closing = re.fullmatch(r'Expected "([}>])"\.', problem)  # unprefixed: the text ended inside a message
        problem = problem.removeprefix(f"'{line_text}': ").removeprefix("'': ")
        rest = "\n".join([line_text[column - 1:], *lines[line:]])
        if closing:
            problem = f"missing '{closing.group(1)}' before end of file"
        elif not re.sub(r"#[^\n]*", "", rest).strip():  # nothing but spaces and comments from there on
            problem = f"{problem.rstrip('.')} before end of file"
        else:
            problem = _reword(problem, line_text, column, message, names, unsupported)
        raise error(f"{filename}:{line}: {problem}") from None
    return _sites(text)


# --------------------------------------------------------------------------------------------
# The ModelServerConfig file (the supported subset)

_POLICY = "tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy"
# How each message is written in a model config file, and the fields kerasplm serve implements.
_MESSAGES = {
    "tensorflow.serving.ModelServerConfig": ("the model server config", ("model_config_list",)),
    "tensorflow.serving.ModelConfigList": ("model_config_list", ("config",)),
    "tensorflow.serving.ModelConfig": ("config", ("name", "base_path", "model_platform", "model_version_policy",
                                                  "version_labels")),
    _POLICY: ("model_version_policy", ("latest", "all", "specific")),
    _POLICY + ".Latest": ("latest", ("num_versions",)),
    _POLICY + ".All": ("all", ()),
    _POLICY + ".Specific": ("specific", ("versions",)),
    "tensorflow.serving.ModelConfig.VersionLabelsEntry": ("version_labels", ("key", "value")),
}
# Fields TF Serving knows but kerasplm serve does not implement: named in the error message.
_UNSUPPORTED = {
    "custom_model_config": "only model_config_list is supported",
    "logging_config": "request logging is not implemented",
    "model_type": "deprecated in TF Serving; use model_platform",
}


def parse_model_config(text: str, filename: str = "<model config>", base_dir: str | None = None) -> list:
    """Parse a text-format ``ModelServerConfig`` into a list of :class:`ModelConfig`.

    Relative ``base_path`` values are joined to ``base_dir`` (default: the working directory).
    Raises :class:`ModelConfigError` (``filename:line: problem``).
    """
    config = model_server_config_pb2.ModelServerConfig()
    root = parse_text_proto(text, config, filename, ModelConfigError, _MESSAGES, _UNSUPPORTED)

    def error(line: int, problem: str) -> ModelConfigError:
        return ModelConfigError(f"{filename}:{line}: {problem}")

    if config.WhichOneof("config") == "custom_model_config":
        raise error(root.first("custom_model_config").line,
                    f"'custom_model_config' is not supported by kerasplm serve ({_UNSUPPORTED['custom_model_config']})")
    if config.WhichOneof("config") is None:
        raise error(1, "no 'model_config_list { config { ... } }' found")
    config_list = root.first("model_config_list")
    entries = config_list.all("config")
    if not entries:
        raise error(config_list.line, "model_config_list holds no 'config { ... }' entry")
    models, seen = [], {}
    for proto, site in zip(config.model_config_list.config, entries):
        model = _model_config(proto, site, error, filename, base_dir)
        if model.name in seen:
            raise error(site.line, f"model name '{model.name}' already used on line {seen[model.name]}")
        seen[model.name] = site.line
        models.append(model)
    return models


def _model_config(proto, site: Site, error, filename: str, base_dir: str | None) -> ModelConfig:
    supported = _MESSAGES["tensorflow.serving.ModelConfig"][1]
    for name, (written, *_) in site.fields.items():
        if name not in supported:  # text_format accepted it: a field TF Serving knows
            reason = _UNSUPPORTED.get(name)
            raise error(written.line,
                        f"'{name}' is not supported by kerasplm serve" + (f" ({reason})" if reason else ""))
    for required in ("name", "base_path"):
        if site.first(required) is None:
            raise error(site.line, f"config is missing '{required}'")
    _check_model_name(proto.name, lambda problem: error(site.first("name").line, problem))
    base_path = proto.base_path
    if not base_path:
        raise error(site.first("base_path").line, "'base_path' is empty")
    if not os.path.isabs(base_path):
        base_path = os.path.join(base_dir or os.getcwd(), base_path)
    if site.first("model_platform") is not None and proto.model_platform != "tensorflow":
        raise error(site.first("model_platform").line, f"model_platform '{proto.model_platform}' is not supported; "
                                                       "only 'tensorflow' (SavedModels)")
    policy = VersionPolicy()
    if site.first("model_version_policy") is not None:
        policy = _version_policy(proto.model_version_policy, site.first("model_version_policy"), error)
    labels = {}
    for label in site.all("version_labels"):  # the proto's map keeps only the last of equal keys
        if label.first("key") is None or label.first("value") is None:
            raise error(label.line, "version_labels needs both 'key' and 'value'")
        key = label.first("key").value.decode("utf-8")
        _check_model_name(key, lambda problem: error(label.line, problem.replace("model name", "label")))
        if key in labels:
            raise error(label.line, f"version label '{key}' given twice")
        labels[key] = value = proto.version_labels[key]
        if value < 0:
            raise error(label.first("value").line, f"'value' must be an integer in [0, 2^63), got {value}")
    return ModelConfig(name=proto.name, base_path=os.path.normpath(base_path), version_policy=policy,
                       version_labels=labels, source=f"{filename}:{site.line}")


def _version_policy(proto, site: Site, error) -> VersionPolicy:
    kind = proto.WhichOneof("policy_choice")
    if kind is None:  # an empty policy is TF Serving's default
        return VersionPolicy()
    if kind == "all":
        return VersionPolicy("all")
    body = site.first(kind)
    if kind == "latest":
        num = body.first("num_versions")
        if num is not None and proto.latest.num_versions < 1:  # unset: TF Serving's default, 1
            raise error(num.line, f"'num_versions' must be an integer in [1, 2^32), got {proto.latest.num_versions}")
        return VersionPolicy("latest", num_versions=max(1, proto.latest.num_versions))
    versions = proto.specific.versions
    if not versions:
        raise error(body.line, "specific { } lists no 'versions'")
    for version, where in zip(versions, body.all("versions")):
        if version < 0:
            raise error(where.line, f"'versions' must be an integer in [0, 2^63), got {version}")
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
