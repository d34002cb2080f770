"""`kerasplm serve` flags: declared in cli.py, TF Serving's underscore spellings accepted."""
import pytest

from kerasplm import cli, serving


def _parse(*argv):
    return cli.build_parser().parse_args(["serve", *argv])


def test_defaults_come_from_the_server():
    args = _parse("--model-base-path", "export/translator")
    assert (args.model_base_path, args.model_name, args.model_config_file) == ("export/translator", None, None)
    # TF Serving's ports: --port is gRPC (8500), --rest_api_port REST (8501).
    assert (args.host, args.port, args.rest_api_port) == ("127.0.0.1", 8500, 8501)
    assert (args.port, args.rest_api_port) == (serving.DEFAULT_GRPC_PORT, serving.DEFAULT_REST_API_PORT)
    assert args.max_body_bytes == serving.DEFAULT_MAX_BODY_BYTES
    assert args.max_batch_size == serving.DEFAULT_MAX_BATCH_SIZE == 1024
    assert args.batch_chunk_size == serving.DEFAULT_BATCH_CHUNK_SIZE == 64
    assert args.poll_seconds == serving.DEFAULT_POLL_SECONDS
    assert args.shutdown_grace_seconds == serving.DEFAULT_SHUTDOWN_GRACE_SECONDS
    assert args.model_config_file_poll_wait_seconds == 0  # TF Serving's default: read the config file once
    assert args.handler is cli._serve


def test_tf_serving_spellings(tmp_path):
    config = tmp_path / "models.config"
    config.write_text("model_config_list { }")
    args = _parse("--model_base_path=/models/m", "--model_name=m", "--rest_api_port=8601", "--port=8600",
                  "--file_system_poll_wait_seconds=1")
    assert (args.model_base_path, args.model_name, args.rest_api_port, args.port, args.poll_seconds) == (
        "/models/m", "m", 8601, 8600, 1.0)
    assert _parse(f"--model_config_file={config}").model_config_file == str(config)
    assert _parse(f"--model_config_file={config}", "--model_config_file_poll_wait_seconds=60",
                  ).model_config_file_poll_wait_seconds == 60.0
    assert _parse(f"--model_config_file={config}", "--model-config-file-poll-wait-seconds", "0.5",
                  ).model_config_file_poll_wait_seconds == 0.5
    assert _parse("--model-base-path", "x", "--rest-api-port", "0").rest_api_port == 0  # the dashed alias


def test_off_turns_an_api_off(tmp_path, capsys):
    assert (_parse("--model-base-path", "x", "--port", "off").port, _parse("--model-base-path", "x").rest_api_port
            ) == (-1, 8501)
    assert _parse("--model-base-path", "x", "--rest_api_port", "OFF").rest_api_port == -1
    assert cli.main(["serve", "--model-base-path", str(tmp_path), "--port", "off", "--rest_api_port", "off"]) == 2
    assert capsys.readouterr().err == "kerasplm: error: --port off and --rest_api_port off: nothing to serve\n"


@pytest.mark.parametrize("argv", [
    ["--model-base-path", "x", "--max-batch-size", "0"],
    ["--model-base-path", "x", "--batch-chunk-size", "-3"],
    ["--model-base-path", "x", "--shutdown-grace-seconds", "-1"],
    ["--model-base-path", "x", "--rest_api_port", "65536"],
    ["--model-base-path", "x", "--port", "-1"],
    ["--model-base-path", "x", "--port", "of"],
    ["--model-base-path", "x", "--model_config_file", "y"],
    # Durations must be finite numbers in range.
    ["--model-base-path", "x", "--model_config_file_poll_wait_seconds", "-1"],
    ["--model-base-path", "x", "--model_config_file_poll_wait_seconds", "nan"],
    ["--model-base-path", "x", "--model_config_file_poll_wait_seconds", "inf"],
    ["--model-base-path", "x", "--model_config_file_poll_wait_seconds", "soon"],
    ["--model-base-path", "x", "--poll-seconds", "inf"],
    ["--model-base-path", "x", "--file_system_poll_wait_seconds", "nan"],
    ["--model-base-path", "x", "--shutdown-grace-seconds", "inf"],
    ["--model-base-path", "x", "--shutdown-grace-seconds", "nan"],
])
def test_bad_flags_exit_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as info:
        _parse(*argv)
    assert info.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_config_poll_needs_a_config_file(tmp_path, capsys):
    assert cli.main(["serve", "--model-base-path", str(tmp_path), "--model_config_file_poll_wait_seconds", "5"]) == 2
    assert capsys.readouterr().err == ("kerasplm: error: --model_config_file_poll_wait_seconds goes with "
                                       "--model_config_file (it re-reads that file)\n")


def test_missing_base_path_is_exit_2(tmp_path, capsys):
    assert cli.main(["serve", "--model-base-path", str(tmp_path / "nowhere"), "--rest_api_port", "0",
                     "--port", "0"]) == 2
    assert capsys.readouterr().err == f"kerasplm: error: model base path {tmp_path / 'nowhere'} is not a directory\n"


@pytest.mark.parametrize("flag,value,expected", [
    ("--model_config_file_poll_wait_seconds", "inf", "expected a number >= 0, got 'inf'"),
    ("--model_config_file_poll_wait_seconds", "-0.5", "expected a number >= 0, got '-0.5'"),
    ("--file_system_poll_wait_seconds", "nan", "expected a number > 0, got 'nan'"),
    ("--shutdown-grace-seconds", "inf", "expected a number >= 0, got 'inf'"),
])
def test_durations_must_be_finite(flag, value, expected, capsys):
    with pytest.raises(SystemExit):
        _parse("--model-base-path", "x", flag, value)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag}: {expected} (see kerasplm serve --help)" in err, err
