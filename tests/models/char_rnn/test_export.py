"""`kerasplm export generator` of a character RNN run: the GPT generator's signatures (prompt -> text, per-row
options, score) equal TextGenerator, load without kerasplm, take the bad-input battery, are batch-safe with warmup
records, and `kerasplm serve`'s predict API answers them. One tiny random-weight run, exported once."""
import math

import pytest
import tensorflow as tf

from kerasplm import cli
from kerasplm.export import read_metadata
from kerasplm.models.gpt.generator import load_text_generator
from kerasplm.serving import api, load_version
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, load_export, run_isolated

PROMPTS = ["ROMEO: wherefore", "", "é東"]          # the last: characters the vocabulary lacks (<unk>)
SAMPLING = dict(max_new_tokens=5, temperature=0.9, top_k=12, top_p=0.9, seed=5)
MAX_NEW = 6
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nROMEO: wherefore art thou?\n"


def write_tiny_char_rnn_run(path):
    """A ``char_rnn`` run (char_rnn_tiny, random weights, training step 5) written without training."""
    from kerasplm.models.char_rnn.job import ASSETS
    from kerasplm.models.char_rnn.model import CharRNNBackbone, CharRNNLanguageModel
    from kerasplm.models.presets import get_preset
    from kerasplm.runs import RunDir
    from kerasplm.text.char_vocab import CharacterTokenizer, build_char_vocab, write_char_vocab

    run = RunDir(str(path))
    vocab = build_char_vocab(TEXT)
    path.mkdir(parents=True)
    write_char_vocab(vocab, run.file(ASSETS["char_vocab"]))
    tf.keras.utils.set_random_seed(4)
    model = CharRNNLanguageModel(CharRNNBackbone.from_config_object(
        get_preset("char_rnn_tiny", vocab_size=len(vocab), cell="lstm", num_layers=2), name="char_rnn_tiny"))
    run.write_config("char_rnn", "char_lm", "char_rnn_tiny", model, {}, assets=ASSETS,
                     preprocessor=CharacterTokenizer(run.file(ASSETS["char_vocab"])))
    step = tf.Variable(5, dtype=tf.int64)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model, step=step), run.checkpoint_dir, 1).save()
    return run.path


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return write_tiny_char_rnn_run(tmp_path_factory.mktemp("char") / "run")


@pytest.fixture(scope="module")
def generator(tiny_run):
    return load_text_generator(tiny_run)


@pytest.fixture(scope="module")
def exported(tiny_run, tmp_path_factory):
    base = str(tmp_path_factory.mktemp("export") / "char")
    assert cli.main(["export", "generator", "--run", tiny_run, "--to", base, "--max-new-tokens", str(MAX_NEW),
                     "--max-prompt-tokens", "16"]) == 0
    return base, base + "/1", load_export(base + "/1")


def _texts(tensor):
    return [t.decode("utf-8") for t in tensor.numpy()]


def _options(rows, **values):
    return {k: tf.fill([rows], tf.constant(v, tf.float32 if isinstance(v, float) else tf.int32))
            for k, v in values.items()}


def _each_alone(generator, prompts, **options):
    return [generator.generate([p], jit_compile=False, **options)[0] for p in prompts]


def test_signatures_equal_the_text_generator(generator, exported):
    loaded = exported[2]
    greedy = generator.generate(PROMPTS, max_new_tokens=MAX_NEW, jit_compile=False)
    assert _texts(loaded.signatures["serving_default"](prompt=tf.constant(PROMPTS))["text"]) == greedy
    sampled = _texts(loaded.signatures["generate"](prompt=tf.constant(PROMPTS),
                                                    **_options(len(PROMPTS), **SAMPLING))["text"])
    assert sampled == _each_alone(generator, PROMPTS, **SAMPLING)
    again = _texts(loaded.signatures["generate"](prompt=tf.constant(PROMPTS[:1] * 2),
                                                  **_options(2, **SAMPLING))["text"])
    assert again == sampled[:1] * 2                          # per-row seeds: a row's text is its own
    scores = loaded.signatures["score"](text=tf.constant(PROMPTS))
    for i, expected in enumerate(generator.score(PROMPTS)):
        assert int(scores["num_tokens"][i]) == expected["num_tokens"] == len(PROMPTS[i])
        assert float(scores["log_likelihood"][i]) == pytest.approx(expected["log_likelihood"], rel=1e-5, abs=1e-5)
    metadata = read_metadata(exported[1])
    assert metadata["family"] == "char_rnn" and metadata["training_step"] == 5
    assert metadata["tokenizer"] == "CharacterTokenizer" and metadata["model"]["cell"] == "lstm"
    assert sorted(metadata["signatures"]) == ["generate", "metadata", "score", "serving_default"]


def test_loads_and_runs_without_kerasplm(exported):
    loaded = exported[2]
    per_row = {k: [v] * len(PROMPTS) for k, v in SAMPLING.items()}
    outputs = run_isolated(exported[1], [("serving_default", {"prompt": PROMPTS}),
                                         ("generate", {"prompt": PROMPTS, **per_row})])
    assert outputs[0]["text"] == _texts(loaded.signatures["serving_default"](prompt=tf.constant(PROMPTS))["text"])
    assert outputs[1]["text"] == _texts(loaded.signatures["generate"](
        prompt=tf.constant(PROMPTS), **_options(len(PROMPTS), **SAMPLING))["text"])


def test_bad_input_battery_batch_safety_and_warmup(exported):
    def check_scores(texts, outputs):
        assert all(math.isfinite(p) and p >= 1.0 for p in outputs["perplexity"])
        for text, count in zip(texts, outputs["num_tokens"]):   # one token per character of valid UTF-8
            try:
                assert count == len(text.decode("utf-8") if isinstance(text, bytes) else text)
            except UnicodeDecodeError:
                assert count >= 1

    check_bad_inputs(exported[2], "serving_default", "prompt")
    check_bad_inputs(exported[2], "score", "text", output_check=check_scores)
    check_batch_safe(exported[1])
    check_warmup(exported[1])


def test_kerasplm_serve_answers_generate(exported, generator):
    version = load_version(exported[0], 1)
    assert api.predict(version, {"instances": PROMPTS}) == {
        "predictions": generator.generate(PROMPTS, max_new_tokens=MAX_NEW, jit_compile=False)}
    rows = [{"prompt": p, **SAMPLING} for p in PROMPTS]
    assert api.predict(version, {"signature_name": "generate", "instances": rows}) == {
        "predictions": _each_alone(generator, PROMPTS, **SAMPLING)}
