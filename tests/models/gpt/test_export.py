"""GPT generator export: signatures equal TextGenerator, the shared export contract (isolation, bad inputs),
option errors, and `kerasplm serve`'s predict API. One tiny untrained run, exported once through the CLI. The
signatures run the engine's own code: its sampler (tensor options) and its greedy path, screened under XLA."""
import math

import pytest
import tensorflow as tf

from kerasplm import cli
from kerasplm.export import read_metadata, save_version
from kerasplm.models.gpt.export import GeneratorModule
from kerasplm.generation import engine, sampling
from kerasplm.serving import api, load_version
from kerasplm.models.gpt.job import load_text_generator
from kerasplm.runs import load_run
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, load_export, run_isolated
from tests.export.tiny_exports import write_tiny_gpt_run

PROMPTS = ["the king speaks", "", "a garden"]  # each within the export's 16 prompt tokens
SAMPLING = dict(max_new_tokens=4, temperature=0.9, top_k=12, top_p=0.9, seed=5)
MAX_NEW = 6


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A GPT run directory (gpt_tiny, random weights, SentencePiece vocabulary) written without training."""
    return write_tiny_gpt_run(tmp_path_factory.mktemp("gpt") / "run")


@pytest.fixture(scope="module")
def generator(tiny_run):
    return load_text_generator(tiny_run)


@pytest.fixture(scope="module")
def exported(tiny_run, tmp_path_factory):
    base = str(tmp_path_factory.mktemp("export") / "gpt")
    # One prompt width (16) keeps the export to one traced decoding loop per generation signature.
    assert cli.main(["export", "generator", "--run", tiny_run, "--to", base, "--max-new-tokens", str(MAX_NEW),
                     "--max-prompt-tokens", "16"]) == 0
    return base, base + "/1"


@pytest.fixture(scope="module")
def loaded(exported):
    return load_export(exported[1])


def _texts(tensor):
    return [t.decode("utf-8") for t in tensor.numpy()]


def _options(rows, **values):
    """The generate signature's options: one value per row (its inputs are [batch] vectors)."""
    return {k: tf.fill([rows], tf.constant(v, tf.float32 if isinstance(v, float) else tf.int32))
            for k, v in values.items()}


def _each_alone(generator, prompts, **options):
    """TextGenerator.generate of each prompt alone: a batch-safe signature samples each row with its own seed."""
    return [generator.generate([p], **options)[0] for p in prompts]


def test_signatures_equal_the_text_generator(generator, loaded, exported):
    assert max(len(ids) for ids in generator.tokenizer.tokenize(tf.constant(PROMPTS)).to_list()) <= 16
    greedy = generator.generate(PROMPTS, max_new_tokens=MAX_NEW, jit_compile=False)
    assert _texts(loaded.signatures["serving_default"](prompt=tf.constant(PROMPTS))["text"]) == greedy
    options = _options(len(PROMPTS), **SAMPLING)
    sampled = _texts(loaded.signatures["generate"](prompt=tf.constant(PROMPTS), **options)["text"])
    assert sampled == _each_alone(generator, PROMPTS, jit_compile=False, **SAMPLING)
    zeros = {k: tf.zeros_like(v) for k, v in options.items()}  # 0 = defaults: greedy, MAX_NEW tokens
    assert _texts(loaded.signatures["generate"](prompt=tf.constant(PROMPTS), **zeros)["text"]) == greedy
    scores = loaded.signatures["score"](text=tf.constant(PROMPTS))
    for i, expected in enumerate(generator.score(PROMPTS)):
        assert int(scores["num_tokens"][i]) == expected["num_tokens"]
        assert float(scores["log_likelihood"][i]) == pytest.approx(expected["log_likelihood"], rel=1e-5, abs=1e-5)
        assert float(scores["perplexity"][i]) == pytest.approx(expected["perplexity"], rel=1e-5)
    metadata = read_metadata(exported[1])
    assert metadata["family"] == "gpt" and metadata["training_step"] == 7
    assert metadata["generation"]["max_new_tokens"] == MAX_NEW and metadata["tokenizer"] == "SentencePieceTokenizer"
    assert metadata["generation"]["prompt_widths"] == [16]
    assert sorted(metadata["signatures"]) == ["generate", "metadata", "score", "serving_default"]


def test_loads_and_runs_without_kerasplm(loaded, exported):
    per_row = {k: [v] * len(PROMPTS) for k, v in SAMPLING.items()}
    outputs = run_isolated(exported[1], [("serving_default", {"prompt": PROMPTS}),
                                         ("generate", {"prompt": PROMPTS, **per_row}),
                                         ("score", {"text": PROMPTS})])
    assert outputs[0]["text"] == _texts(loaded.signatures["serving_default"](prompt=tf.constant(PROMPTS))["text"])
    options = _options(len(PROMPTS), **SAMPLING)
    assert outputs[1]["text"] == _texts(loaded.signatures["generate"](prompt=tf.constant(PROMPTS), **options)["text"])
    assert outputs[2]["num_tokens"] == loaded.signatures["score"](text=tf.constant(PROMPTS))["num_tokens"].numpy().tolist()


def test_the_module_takes_the_model_load_run_gives(tiny_run, generator):
    module = GeneratorModule(load_run(tiny_run), max_new_tokens=MAX_NEW, max_prompt_tokens=16)
    assert module.family == "gpt" and module.tokenizer.vocabulary_file == generator.tokenizer.vocabulary_file
    scores = module.score(tf.constant(PROMPTS))
    for i, expected in enumerate(generator.score(PROMPTS)):
        assert float(scores["log_likelihood"][i]) == pytest.approx(expected["log_likelihood"], rel=1e-5, abs=1e-5)


def test_bad_input_battery(loaded):
    def check_scores(texts, outputs):
        assert all(math.isfinite(p) and p >= 1.0 for p in outputs["perplexity"])
        assert all(n >= 0 for n in outputs["num_tokens"])

    check_bad_inputs(loaded, "serving_default", "prompt")
    check_bad_inputs(loaded, "score", "text", output_check=check_scores)


@pytest.mark.parametrize("option, value, message", [
    ("max_new_tokens", MAX_NEW + 1, f"max_new_tokens must be <= {MAX_NEW}"),
    ("temperature", -1.0, "temperature must be >= 0"),
    ("top_p", 1.5, "top_p must be in [0, 1]"),
    ("top_k", -2, "top_k must be >= 0"),
    ("temperature", float("inf"), "temperature must be finite"),
    ("temperature", float("nan"), "temperature must be"),
])
def test_bad_options_name_the_option(loaded, option, value, message):
    options = {"max_new_tokens": 0, "temperature": 0.0, "top_k": 0, "top_p": 0.0, "seed": 0, option: value}
    options = _options(1, **options)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message.replace("[", r"\[").replace("]", r"\]")):
        loaded.signatures["generate"](prompt=tf.constant(["the king"]), **options)


def test_kerasplm_serve_answers_generate_and_score(exported, generator):
    version = load_version(exported[0], 1)
    greedy = api.predict(version, {"instances": PROMPTS})
    assert greedy == {"predictions": generator.generate(PROMPTS, max_new_tokens=MAX_NEW, jit_compile=False)}
    rows = [{"prompt": p, **SAMPLING} for p in PROMPTS]
    sampled = api.predict(version, {"signature_name": "generate", "instances": rows})
    assert sampled == {"predictions": _each_alone(generator, PROMPTS, jit_compile=False, **SAMPLING)}
    scored = api.predict(version, {"signature_name": "score", "inputs": {"text": PROMPTS[:1]}})
    assert scored["outputs"]["num_tokens"] == [generator.score(PROMPTS[:1])[0]["num_tokens"]]
    # A non-finite temperature (JSON's Infinity, or 1e400, which parses as infinity) is the client's error: 400.
    for raw in ('Infinity', '1e400', 'NaN'):
        body = api.parse_json_body(('{"signature_name": "generate", "instances": [{"prompt": "the", "max_new_tokens": 0, '
                                    f'"temperature": {raw}, "top_k": 0, "top_p": 0.0, "seed": 0}}]}}').encode())
        with pytest.raises(api.RequestError) as refused:
            api.predict(version, body)
        assert refused.value.status == 400 and "temperature must be" in refused.value.message, raw


# A request's settings (temperature, top_k, top_p, seed), 0 = off: plain, top-k, nucleus, both, filters that
# are off (top_k 0 or >= the vocabulary, top_p 0 or 1), greedy (temperature 0) with filters ignored.
REQUESTS = [(1.0, 0, 0.0, 0), (0.7, 5, 0.0, 3), (1.3, 0, 0.8, 11), (0.9, 12, 0.9, 5), (1.0, 1000, 1.0, 2),
            (2.0, 0, 0.0, -7), (0.0, 7, 0.5, 9)]


def _request(temperature, top_k, top_p, seed, max_new_tokens=MAX_NEW, rows=len(PROMPTS)):
    return _options(rows, max_new_tokens=max_new_tokens, temperature=float(temperature), top_k=top_k,
                    top_p=float(top_p), seed=seed)


def _in_process(generator, temperature, top_k, top_p, seed, jit_compile=False, prompts=PROMPTS):
    """TextGenerator.generate (engine.generate) of each prompt alone, the same request spelled in Python (0 = off)."""
    if temperature == 0:
        top_k = top_p = 0  # ignored by the export's greedy path; TextGenerator refuses them without sampling
    return _each_alone(generator, prompts, max_new_tokens=MAX_NEW, temperature=temperature, top_k=top_k,
                       top_p=top_p, seed=seed, jit_compile=jit_compile)


def test_generate_signature_equals_the_engine_for_every_request(generator, loaded):
    for temperature, top_k, top_p, seed in REQUESTS:
        out = loaded.signatures["generate"](prompt=tf.constant(PROMPTS[:1]),
                                            **_request(temperature, top_k, top_p, seed, rows=1))
        assert _texts(out["text"]) == _in_process(generator, temperature, top_k, top_p, seed, prompts=PROMPTS[:1]), \
            (temperature, top_k, top_p, seed)


def test_generate_rows_with_different_options_equal_each_row_alone(loaded):
    """Batch-safe: a batch whose rows ask for different requests (as TF Serving's batching merges them) answers
    each row as that row alone; rows of equal options are decoded together, each with its own seed."""
    rows = [(p, request) for request in REQUESTS for p in PROMPTS[::2]]
    columns = {name: [request[i] for _, request in rows] for i, name in
               enumerate(("temperature", "top_k", "top_p", "seed"))}
    merged = loaded.signatures["generate"](
        prompt=tf.constant([p for p, _ in rows]), max_new_tokens=tf.constant([MAX_NEW - i % 3 for i in range(len(rows))]),
        temperature=tf.constant(columns["temperature"], tf.float32), top_k=tf.constant(columns["top_k"]),
        top_p=tf.constant(columns["top_p"], tf.float32), seed=tf.constant(columns["seed"]))
    alone = [loaded.signatures["generate"](prompt=tf.constant([p]),
                                           **_request(*request, max_new_tokens=MAX_NEW - i % 3, rows=1))["text"][0]
             for i, (p, request) in enumerate(rows)]
    assert merged["text"].numpy().tolist() == alone
    twice = loaded.signatures["generate"](prompt=tf.constant(PROMPTS[:1] * 2), **_request(1.0, 0, 0.0, 3, rows=2))
    assert len(set(twice["text"].numpy().tolist())) == 1   # the same prompt, options and seed: the same text


def test_generate_signature_calls_the_engines_sampler(generator, monkeypatch):
    """The signature's sampling branch is built by kerasplm.generation.sampling.make_sampler, with the request's
    scalar tensors as its options (nothing export-specific in between)."""
    calls = []
    original = sampling.make_sampler

    def spy(seed, temperature=1.0, top_k=None, top_p=None):
        calls.append((seed, temperature, top_k, top_p))
        return original(seed, temperature, top_k, top_p)

    monkeypatch.setattr(sampling, "make_sampler", spy)
    module = GeneratorModule(generator, max_new_tokens=MAX_NEW, max_prompt_tokens=16)
    texts = _texts(module.generate(tf.constant(PROMPTS), **_request(0.9, 12, 0.9, 5))["text"])
    assert len(calls) == 1 and all(tf.is_tensor(option) for option in calls[0])   # one width: one sampling loop
    assert texts == _in_process(generator, 0.9, 12, 0.9, 5)   # (whose own, Python-valued, call may be cached)


def _count_screens(monkeypatch):
    screens = []
    original = engine.ScreenedArgmax
    monkeypatch.setattr(engine, "ScreenedArgmax", lambda *a, **k: screens.append(original(*a, **k)) or screens[-1])
    return screens


def test_greedy_export_takes_the_engines_screened_path(generator, monkeypatch, tmp_path):
    """Where the engine screens greedy decoding (XLA, two or more rows, a float32 tied table), so does the export's
    greedy path (serving_default, generate with temperature 0): the same ScreenedArgmax, the same tokens as
    TextGenerator.generate (XLA, screened). Without XLA neither screens."""
    assert generator.model.output_table is not None
    screens = _count_screens(monkeypatch)
    expected = generator.generate(PROMPTS, max_new_tokens=MAX_NEW)                      # in process, screened
    assert len(screens) == 1
    module = GeneratorModule(generator, max_new_tokens=MAX_NEW, max_prompt_tokens=16, jit_compile=True)
    greedy = _texts(module.serving_default(tf.constant(PROMPTS))["text"])
    assert len(screens) == 2 and greedy == expected                                     # traced with the screen
    request = _texts(module.generate(tf.constant(PROMPTS), **_request(0.0, 0, 0.0, 0))["text"])
    assert len(screens) == 3 and request == expected                                    # temperature 0: the same path
    sampled = _texts(module.generate(tf.constant(PROMPTS), **_request(0.9, 12, 0.9, 5))["text"])
    assert sampled[:1] == _in_process(generator, 0.9, 12, 0.9, 5, jit_compile=True, prompts=PROMPTS[:1])
    plain = GeneratorModule(generator, max_new_tokens=MAX_NEW, max_prompt_tokens=16)       # no XLA: full logits
    assert _texts(plain.serving_default(tf.constant(PROMPTS))["text"]) == \
        generator.generate(PROMPTS, max_new_tokens=MAX_NEW, jit_compile=False)
    assert len(screens) == 3
    # Through the SavedModel (XLA-compiled at run time): the same texts; one row takes the plain path at run time.
    path = save_version(module, str(tmp_path / "gpt_xla"), metadata={"test": True})
    xla = tf.saved_model.load(path)
    assert _texts(xla.signatures["serving_default"](prompt=tf.constant(PROMPTS))["text"]) == expected
    assert _texts(xla.signatures["serving_default"](prompt=tf.constant(PROMPTS[:1]))["text"]) == \
        generator.generate(PROMPTS[:1], max_new_tokens=MAX_NEW)


def test_batch_safe_with_warmup_records(exported):
    """TF Serving's batching rule holds for every signature, and the warmup records cover and replay on each."""
    check_batch_safe(exported[1])
    check_warmup(exported[1])
