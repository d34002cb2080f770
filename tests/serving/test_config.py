"""kerasplm.serving.config: TF Serving's text-format model_config_list, parsed by protobuf's text_format
into TF Serving's ModelServerConfig, then checked; every error one line naming the file and the line."""
import os

import pytest

from kerasplm import cli
from kerasplm.serving import ModelConfig, ModelConfigError, VersionPolicy, parse_model_config, read_model_config_file
from kerasplm.serving.config import model_configs_from_proto

FULL = """
# two models, every policy form
model_config_list {
  config {
    name: "translator"
    base_path: "/models/translator"
    model_platform: "tensorflow"
    model_version_policy { latest { num_versions: 2 } }
    version_labels { key: "stable" value: 1 }
    version_labels { key: 'canary' value: 2 }
  }
  config: {
    name: 'all_of_them', base_path: "rel" "ative";   # separators and adjacent strings
    model_version_policy: { all: {} }
  }
  config <
    name: "pinned\\x21"
    base_path: "/m/p"
    model_version_policy { specific { versions: 3 versions: [1, 3] } }
  >
  config { name: "defaults" base_path: "/m/d" model_version_policy {} }
}
"""


def test_parses_every_supported_form():
    models = parse_model_config(FULL, "models.config", base_dir="/configs")
    assert [m.name for m in models] == ["translator", "all_of_them", "pinned!", "defaults"]
    translator, every, pinned, defaults = models
    assert translator == ModelConfig("translator", "/models/translator", VersionPolicy("latest", 2),
                                     {"stable": 1, "canary": 2})
    assert translator.source == "models.config:4"  # where it was declared; not part of equality
    # Relative base paths are resolved against the config file's directory.
    assert every.base_path == "/configs/relative" and every.version_policy == VersionPolicy("all")
    assert pinned.version_policy == VersionPolicy("specific", versions=(1, 3))
    assert defaults.version_policy == VersionPolicy("latest", 1) and defaults.version_labels == {}


def test_version_policies_select():
    available = [1, 5, 3, 2]
    assert VersionPolicy("latest", 1).select(available) == [5]
    assert VersionPolicy("latest", 3).select(available) == [5, 3, 2]
    assert VersionPolicy("latest", 9).select(available) == [5, 3, 2, 1]
    assert VersionPolicy("all").select(available) == [5, 3, 2, 1]
    assert VersionPolicy("specific", versions=(2, 7)).select(available) == [2]
    assert VersionPolicy().select([]) == []


def test_read_resolves_relative_paths_against_the_file(tmp_path):
    (tmp_path / "cfg").mkdir()
    path = tmp_path / "cfg" / "models.config"
    path.write_text('model_config_list { config { name: "m" base_path: "../export/m" } }')
    (model,) = read_model_config_file(str(path))
    assert model.base_path == str(tmp_path / "export" / "m")
    assert model.source == f"{path}:1"


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("", 1, "no 'model_config_list"),
        ("model_config_list { }", 1, "holds no 'config"),
        ("model_config_list {\n config { name: \"a\" }\n}", 2, "missing 'base_path'"),
        ("model_config_list {\n config { base_path: \"/x\" }\n}", 2, "missing 'name'"),
        ("model_config_list {\n config {\n name: \"a\"\n base_path: \"/x\"\n nmae: \"b\" } }", 5,
         "unknown field 'nmae'"),
        ("model_config_list { config { name: a base_path: \"/x\" } }", 1, "'name' must be a quoted string"),
        ("model_config_list { config { name: \"a/b\" base_path: \"/x\" } }", 1, "model name 'a/b'"),
        ("model_config_list { config { name: \"a\" name: \"b\" base_path: \"/x\" } }", 1, "'name' given twice"),
        ("model_config_list {\n config { name: \"a\" base_path: \"/x\" }\n config { name: \"a\" base_path: \"/y\" }\n}",
         3, "model name 'a' already used on line 2"),
        ("model_config_list { config { name: \"a\" base_path: \"/x\"\n"
         " model_version_policy { latest { num_versions: 0 } } } }", 2, "num_versions' must be an integer in [1"),
        ("model_config_list { config { name: \"a\" base_path: \"/x\"\n"
         " model_version_policy { latest { num_versions: 1.5 } } } }", 2, "must be an integer, got '1.5'"),
        ("model_config_list { config { name: \"a\" base_path: \"/x\"\n"
         " model_version_policy { latest {} all {} } } }", 2, "one of latest/all/specific"),
        ("model_config_list { config { name: \"a\" base_path: \"/x\"\n"
         " model_version_policy { specific { } } } }", 2, "lists no 'versions'"),
        ("model_config_list { config { name: \"a\" base_path: \"/x\"\n"
         " model_version_policy { specific { versions: -1 } } } }", 2, "must be an integer in [0"),
        ("model_config_list { config { name: \"a\" base_path: \"/x\" model_platform: \"pytorch\" } }", 1,
         "model_platform 'pytorch' is not supported"),
        ("model_config_list { config { name: \"a\" base_path: \"/x\"\n logging_config { } } }", 2,
         "'logging_config' is not supported by kerasplm serve"),
        ("custom_model_config { }", 1, "'custom_model_config' is not supported"),
        ("model_config_list { config { name: \"a\" base_path: \"/x\"\n"
         " version_labels { key: \"s\" } } }", 2, "needs both 'key' and 'value'"),
        ("model_config_list {\n config { name: \"a\" base_path: \"/x\" }\n", 2, "missing '}' before end of file"),
        ("model_config_list {\n config { name: \"a\" base_path: \"/x }\n}", 2,
         "String missing ending quote: '\"/x }' (column 32)"),
        ("model_config_list {\n config { name \"a\" } }", 2, "expected ':' after 'name' (column 16)"),
        ("model_config_list {\n config { name: \"a\\xff\" base_path: \"/x\" } }", 2,
         "Couldn't parse string: 'utf-8' codec"),
        ("model_config_list { config { name: \"a\" base_path: \"\" } }", 1, "'base_path' is empty"),
    ],
)
def test_errors_name_file_line_and_problem(text, line, fragment):
    with pytest.raises(ModelConfigError) as info:
        parse_model_config(text, "bad.config")
    message = str(info.value)
    assert message.startswith(f"bad.config:{line}: "), message
    assert fragment in message, message
    assert "\n" not in message


# What TF Serving itself reads (protobuf's text_format): comments, the block, colon, angle-bracket and list forms
# of a message, separators, every version policy, version_labels map entries (block and list forms).
TF_SERVING_SPELLINGS = """# comments anywhere
# a second comment line
model_config_list {
  config {  # the block form
    name: "translator"
    base_path: "/models/translator"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 1 versions: 2 } }
    version_labels { key: "stable" value: 1 }
    version_labels { key: "canary" value: 2 }
  }
  config: {  # the colon form
    name: 'newest_two'
    base_path: '/models/newest_two'
    model_version_policy: { latest: { num_versions: 2 } }
  }
  config <
    name: "every"; base_path: "/models/every",
    model_version_policy < all {} >
  >
  config: [{ name: "listed" base_path: "/models/listed" version_labels: [{key: "a" value: 3}, {key: "b", value: 4}] }]
}
"""


def test_every_spelling_tf_serving_accepts_is_read_identically():
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    proto = text_format.Parse(TF_SERVING_SPELLINGS, model_server_config_pb2.ModelServerConfig())  # TF Serving's read
    models = parse_model_config(TF_SERVING_SPELLINGS, "models.config")
    assert models == [
        ModelConfig("translator", "/models/translator", VersionPolicy("specific", versions=(1, 2)),
                    {"stable": 1, "canary": 2}),
        ModelConfig("newest_two", "/models/newest_two", VersionPolicy("latest", 2)),
        ModelConfig("every", "/models/every", VersionPolicy("all")),
        ModelConfig("listed", "/models/listed", VersionPolicy(), {"a": 3, "b": 4}),
    ]
    assert models == model_configs_from_proto(proto)  # as a reload request carrying the same config
    assert [m.source for m in models] == [f"models.config:{line}" for line in (4, 12, 17, 21)]
    # text_format's own rendering of the message (one canonical spelling) reads the same
    assert parse_model_config(text_format.MessageToString(proto), "canonical.config") == models


def test_a_syntax_error_names_the_file_and_line(tmp_path, capsys):
    path = tmp_path / "models.config"
    path.write_text(TF_SERVING_SPELLINGS.replace("name: 'newest_two'", "name 'newest_two'"))
    with pytest.raises(ModelConfigError) as info:
        read_model_config_file(str(path))
    assert str(info.value) == f"{path}:13: expected ':' after 'name' (column 10)"
    # kerasplm serve: that one line, exit status 2, no traceback
    assert cli.main(["serve", "--model_config_file", str(path), "--rest_api_port", "0", "--port", "0"]) == 2
    assert capsys.readouterr().err == f"kerasplm: error: {info.value}\n"


@pytest.mark.parametrize("old, new, message", [
    ("    base_path: '/models/newest_two'", "    base_path: '/models/newest_two",
     "14: String missing ending quote: \"'/models/newest_two\" (column 16)"),
    ("}]\n}\n", "}]\n", "21: missing '}' before end of file"),
    ("}]\n}\n", "}]\n}\n}\n", "23: Expected identifier or number, got } (column 1)"),
    ("versions: 1 versions: 2", "versions: 1 versions: two", "8: 'versions' must be an integer, got 'two'"),
    ("num_versions: 2", "num_versions: -2", "15: 'num_versions' is out of range for its type, got -2"),
    ('"stable" value: 1', "stable value: 1", "9: 'key' must be a quoted string, got stable"),
])
def test_syntax_and_type_errors_name_the_line(old, new, message):
    assert old in TF_SERVING_SPELLINGS
    with pytest.raises(ModelConfigError) as info:
        parse_model_config(TF_SERVING_SPELLINGS.replace(old, new, 1), "models.config")
    assert str(info.value) == f"models.config:{message}"


@pytest.mark.parametrize("old, new, message", [
    ("model_platform:", "model_platfrom:", "7: unknown field 'model_platfrom' in config; expected one of: name, "
                                           "base_path, model_platform, model_version_policy, version_labels"),
    ("latest: { num_versions", "latest: { num_version", "15: unknown field 'num_version' in latest; "
                                                         "expected one of: num_versions"),
    ("all {}", "all { versions: 1 }", "19: unknown field 'versions' in all; it takes no fields"),
    ("{key: \"a\" value: 3}", "{key: \"a\" val: 3}", "21: unknown field 'val' in version_labels; "
                                                            "expected one of: key, value"),
    ("model_config_list {", "model_config_lists {", "3: unknown field 'model_config_lists' in the model server "
                                                    "config; expected one of: model_config_list"),
    ("    model_platform", "    model_type: TENSORFLOW\n    model_platform",
     "7: 'model_type' is not supported by kerasplm serve (deprecated in TF Serving; use model_platform)"),
])
def test_an_unknown_field_names_the_field_and_line(old, new, message):
    assert old in TF_SERVING_SPELLINGS
    with pytest.raises(ModelConfigError) as info:
        parse_model_config(TF_SERVING_SPELLINGS.replace(old, new, 1), "models.config")
    assert str(info.value) == f"models.config:{message}"


def test_cli_malformed_config_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "models.config"
    path.write_text('model_config_list {\n  config {\n    name: "m"\n    base_pth: "/x"\n  }\n}\n')
    assert cli.main(["serve", "--model_config_file", str(path), "--rest_api_port", "0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"kerasplm: error: {path}:4: unknown field 'base_pth' in config"), err


def test_cli_config_with_missing_base_path_and_bad_flags(tmp_path, capsys):
    path = tmp_path / "models.config"
    path.write_text('model_config_list {\n  config { name: "m" base_path: "nowhere" }\n}\n')
    assert cli.main(["serve", "--model-config-file", str(path), "--rest_api_port", "0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err == f"kerasplm: error: {path}:2: model base path {tmp_path / 'nowhere'} is not a directory\n"
    # The config file and a base path are alternatives; --model-name goes with the base path only.
    for argv in (["--model-config-file", str(path), "--model-base-path", str(tmp_path)],
                 ["--model-config-file", str(tmp_path / "absent.config")],
                 []):
        with pytest.raises(SystemExit) as info:
            cli.main(["serve", *argv])
        assert info.value.code == 2
        assert capsys.readouterr().err.count("\n") == 1
    assert cli.main(["serve", "--model-config-file", str(path), "--model-name", "x"]) == 2
    assert "--model-name goes with --model-base-path" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "nowhere")


def test_a_reload_request_config_reads_like_the_file():
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    text = FULL.replace('"rel" "ative"', '"/configs/relative"')  # a reload request has no file to be relative to
    proto = text_format.Parse(text, model_server_config_pb2.ModelServerConfig())
    assert model_configs_from_proto(proto) == parse_model_config(text, "models.config")
    assert model_configs_from_proto(proto)[0].source == "model_config_list.config[0]"

    def error(text):
        with pytest.raises(ModelConfigError) as info:
            model_configs_from_proto(text_format.Parse(text, model_server_config_pb2.ModelServerConfig()))
        return info.value.code, str(info.value)

    wrong_kind = ("INVALID_ARGUMENT", "ServerModelConfig type not supported by HandleReloadConfigRequest. Only "
                                      "ModelConfigList is currently supported")
    assert error("") == error("custom_model_config { }") == wrong_kind
    assert model_configs_from_proto(text_format.Parse("model_config_list { }",
                                                      model_server_config_pb2.ModelServerConfig())) == []
    for text, fragment in [
        ('config { name: "a" base_path: "x" }', "Expected model a to have an absolute path or URI; got base_path()=x"),
        ('config { name: "a" base_path: "/x" } config { name: "a" base_path: "/y" }',
         "Illegal to list model a multiple times in config list"),
        ('config { name: "a/b" base_path: "/x" }', "model name 'a/b' must be non-empty"),
        ('config { name: "a" base_path: "/x" model_type: TENSORFLOW }', "'model_type' is not supported"),
        ('config { name: "a" base_path: "/x" model_version_policy { specific { } } }', "lists no 'versions'"),
        ('config { name: "a" base_path: "/x" version_labels { key: "" value: 1 } }', "label '' must be non-empty"),
    ]:
        code, message = error(f"model_config_list {{ {text} }}")
        assert code == "INVALID_ARGUMENT" and fragment in message, message
