"""A generation request's options are declared once (kerasplm.options.DecodingRequestOptions): the CLI's flags, the
engine's request defaults and TextGenerator.generate's defaults all come from that declaration."""
import inspect

import pytest

from kerasplm.models.gpt.manifest import GenerateOptions
from kerasplm.generation.options import DEFAULT_SEED, REQUEST_DEFAULTS, max_new_tokens_for, resolve_request
from kerasplm.models.gpt.generator import TextGenerator
from kerasplm.options import DecodingRequestOptions


def test_the_cli_flags_are_the_request_declaration():
    assert issubclass(GenerateOptions, DecodingRequestOptions)
    declared = DecodingRequestOptions.specs()
    assert {name: GenerateOptions.specs()[name] for name in declared} == declared
    assert set(REQUEST_DEFAULTS) == {"max_new_tokens", "temperature", "top_k", "top_p", "num_beams", "seed"}
    assert DEFAULT_SEED == REQUEST_DEFAULTS["seed"]


def test_an_unnamed_length_fits_the_models_context():
    """``kerasplm generate`` without --max-new-tokens on a 64-position model (gpt_tiny, the README's) generates 63."""
    assert REQUEST_DEFAULTS["max_new_tokens"] is None
    assert max_new_tokens_for(None, 1024) == 64 and max_new_tokens_for(None, 64) == 63
    assert max_new_tokens_for(10, 64) == 10


def test_text_generator_defaults_equal_the_declaration():
    parameters = inspect.signature(TextGenerator.generate).parameters
    assert {name: parameters[name].default for name in REQUEST_DEFAULTS} == REQUEST_DEFAULTS


def test_the_declared_defaults_are_greedy_decoding():
    d = REQUEST_DEFAULTS
    assert resolve_request(d["temperature"], d["top_k"], d["top_p"], d["num_beams"]) == ("greedy", {})


@pytest.mark.parametrize("flag, value", [("--temperature", "inf"), ("--temperature", "nan"), ("--top-p", "-inf"),
                                         ("--temperature", "1e400")])
def test_non_finite_option_values_are_one_line_errors(capsys, flag, value):
    """Every numeric option of every command is parsed by one declaration (kerasplm.options): infinity and NaN are
    refused before anything loads (they used to reach the sampler: NaN decoded greedily, inf gave empty text)."""
    from kerasplm.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["generate", "--run", "no/such/run", f"{flag}={value}", "ROMEO:"])  # "=": -inf is no flag
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1
    assert f"argument {flag}" in err and "finite" in err and repr(value) in err
