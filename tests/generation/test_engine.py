"""The decoding engine on a tiny decoder-only model and on synthetic distributions."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.generation import (causal_lm_search, filter_logits, generate, greedy_search, make_generate_fn, make_sampler,
                                 make_translate_fn, request_checks, resolve_request, sequence_log_probs)
from kerasplm.generation.sampling import nucleus_mask
from kerasplm.models.gpt import CausalLM
from kerasplm.models.transformer import Transformer
from tests.reference_loops import generate_uncached

# Right-padded prompts of lengths 3, 1 and 5.
PROMPTS = tf.constant([[5, 6, 7, 0, 0], [9, 0, 0, 0, 0], [4, 8, 12, 16, 20]])
LENGTHS = [3, 1, 5]


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(3)
    return CausalLM.from_preset("causal_lm_tiny")


def test_prefill_and_steps_equal_the_full_model(model):
    full = model(PROMPTS, training=False).numpy()
    cache = model.init_cache(3, 8)
    logits, _, cache = model.call_with_cache(PROMPTS[:, :2], cache, 0)
    np.testing.assert_allclose(logits.numpy(), full[:, :2], atol=1e-5)
    for t in range(2, 5):
        logits, _, cache = model.call_with_cache(PROMPTS[:, t:t + 1], cache, t)
        np.testing.assert_allclose(logits.numpy()[:, 0], full[:, t], atol=1e-5)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_cached_greedy_equals_uncached_token_for_token(model, jit_compile):
    reference = generate_uncached(model, PROMPTS, max_new_tokens=6).numpy()
    out = generate(model, PROMPTS, max_new_tokens=6, jit_compile=jit_compile)
    np.testing.assert_array_equal(out.tokens.numpy(), reference)
    assert out.lengths.numpy().tolist() == [6, 6, 6] and out.scores is None
    # Generated tokens follow each row's own prompt.
    seq = out.sequences.numpy()
    for row, n in enumerate(LENGTHS):
        assert seq[row, :n].tolist() == PROMPTS.numpy()[row, :n].tolist()
        assert seq[row, n:n + 6].tolist() == reference[row].tolist()
        assert not seq[row, n + 6:].any()


def test_stop_ids_end_rows_and_the_loop(model):
    reference = generate_uncached(model, PROMPTS, max_new_tokens=6).numpy()
    stop = int(reference[0, 1])  # row 0's second token becomes a stop token
    expected = generate_uncached(model, PROMPTS, max_new_tokens=6, stop_ids=(stop,)).numpy()
    out = generate(model, PROMPTS, max_new_tokens=6, stop_ids=(stop,), jit_compile=False)
    np.testing.assert_array_equal(out.tokens.numpy(), expected)
    first = reference[0].tolist().index(stop)  # row 0 ends at the first occurrence, stop id kept
    assert out.lengths.numpy()[0] == first + 1 and out.tokens.numpy()[0, first] == stop
    assert not out.tokens.numpy()[0, first + 1:].any()


def test_top_k_one_equals_greedy_and_seeds_are_reproducible(model):
    greedy = generate(model, PROMPTS, max_new_tokens=5, jit_compile=False).tokens.numpy()
    top1 = generate(model, PROMPTS, max_new_tokens=5, strategy="sample", top_k=1, seed=7, jit_compile=False)
    np.testing.assert_array_equal(top1.tokens.numpy(), greedy)
    fn = make_generate_fn(model, max_new_tokens=8, strategy="sample", temperature=2.0, jit_compile=True)
    first, again = fn(PROMPTS, seed=11).tokens.numpy(), fn(PROMPTS, seed=11).tokens.numpy()
    np.testing.assert_array_equal(first, again)
    others = [fn(PROMPTS, seed=s).tokens.numpy() for s in (12, 13)]
    assert any(not np.array_equal(first, o) for o in others)
    assert fn.core.experimental_get_tracing_count() == 1  # new seeds reuse the compiled loop


def test_beam_search_on_prompts(model):
    greedy = generate(model, PROMPTS, max_new_tokens=4, jit_compile=False).tokens.numpy()
    beam1 = generate(model, PROMPTS, max_new_tokens=4, strategy="beam", beam_size=1, alpha=0.6, jit_compile=False)
    np.testing.assert_array_equal(beam1.tokens.numpy(), greedy)
    beam = generate(model, PROMPTS, max_new_tokens=4, strategy="beam", beam_size=3, alpha=0.0, jit_compile=True)

    def log_prob(tokens):
        out = []
        for row, n in enumerate(LENGTHS):
            seq = PROMPTS.numpy()[row, :n].tolist() + tokens[row].tolist()
            logits = model(tf.constant([seq]), training=False).numpy()[0]
            logits[:, 0] = -np.inf  # the pad id is excluded, as in decoding
            logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
                - logits.max(-1, keepdims=True)
            out.append(sum(logp[n - 1 + t, tok] for t, tok in enumerate(tokens[row])))
        return np.array(out)

    np.testing.assert_allclose(beam.scores.numpy(), log_prob(beam.tokens.numpy()), atol=1e-4)
    assert (log_prob(beam.tokens.numpy()) >= log_prob(greedy) - 1e-4).all()


def test_bad_arguments_are_named(model):
    with pytest.raises(ValueError, match="between 1 and 5 tokens"):
        generate(model, PROMPTS, prompt_lengths=[3, 0, 5], max_new_tokens=2)
    with pytest.raises(ValueError, match="max_positions=64"):
        generate(model, PROMPTS, max_new_tokens=61, jit_compile=False)
    with pytest.raises(ValueError, match="top_p"):
        generate(model, PROMPTS, max_new_tokens=2, strategy="sample", top_p=1.5)
    with pytest.raises(ValueError, match="unknown strategy"):
        generate(model, PROMPTS, max_new_tokens=2, strategy="nucleus")
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, PROMPTS, max_new_tokens=0)


# A synthetic "model": next-token probabilities depend on the last token only.
PROBS = np.array([0.0, 0.30, 0.25, 0.15, 0.12, 0.08, 0.06, 0.04], np.float32)


def nucleus(p, top_p):
    """Token ids of the smallest set of most probable tokens with total probability >= top_p."""
    order = np.argsort(-p, kind="stable")
    before = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])
    return set(order[before < top_p].tolist())


@pytest.mark.parametrize("top_k,top_p", [(None, 0.6), (None, 0.85), (4, 0.8), (3, None)])
def test_samples_never_leave_the_nucleus_or_top_k(top_k, top_p):
    log_table = tf.math.log(tf.constant(np.tile(PROBS, (8, 1)) + 1e-12))

    def step_fn(ids, step, state):
        return tf.gather(log_table, ids), state

    sampler = make_sampler(tf.constant([0, 5]), temperature=1.0, top_k=top_k, top_p=top_p)
    ids, _ = tf.function(lambda: greedy_search(step_fn, (), tf.fill([256], 6), 6, start_id=1, end_id=(),
                                               choose=sampler), jit_compile=True)()
    sampled = set(ids.numpy()[:, 1:].ravel().tolist())
    allowed = set(range(1, 8))
    if top_k:
        allowed &= set(np.argsort(-PROBS, kind="stable")[:top_k].tolist())
    if top_p:
        p = PROBS.copy()
        if top_k:
            p[[i for i in range(8) if i not in allowed]] = 0
            p /= p.sum()
        allowed &= nucleus(p, top_p)
    assert sampled <= allowed
    assert len(sampled) == len(allowed)  # 1536 draws reach every allowed token
    values, token_ids = filter_logits(tf.math.log(tf.constant(PROBS[None] + 1e-12)), top_k, top_p)
    token_ids = np.arange(8) if token_ids is None else token_ids.numpy()[0]
    assert set(token_ids[np.isfinite(values.numpy()[0])].tolist()) == allowed


def test_translator_sampling_with_top_k_one_is_greedy():
    keras.utils.set_random_seed(1)
    translator = Transformer.from_preset("transformer_tiny", input_vocab_size=30, target_vocab_size=30)
    src = tf.constant([[2, 5, 6, 7, 3], [2, 9, 3, 0, 0]])
    greedy, _ = make_translate_fn(translator, max_length=6, jit_compile=False)(src)
    sampled, _ = make_translate_fn(translator, strategy="sample", top_k=1, max_length=6, jit_compile=False)(src, 3)
    np.testing.assert_array_equal(sampled.numpy(), greedy.numpy())
    hot, _ = make_translate_fn(translator, strategy="sample", temperature=5.0, max_length=6, jit_compile=True)(src, 3)
    assert np.isfinite(sequence_log_probs(translator, src, hot).numpy()).all()


def test_nucleus_mask_against_the_sorted_definition():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.full(50, 0.3), size=40).astype(np.float32)
    for top_p in (0.3, 0.75, 0.95):
        mask = nucleus_mask(tf.constant(probs), top_p).numpy()
        for row, p in zip(mask, probs):
            assert set(np.flatnonzero(row).tolist()) == nucleus(p, top_p)


def test_sampler_draws_from_the_softmax_distribution():
    probs = np.array([0.0, 0.5, 0.3, 0.0, 0.2])
    logits = tf.math.log(tf.constant(np.tile(probs, (20000, 1)), tf.float32))
    draws = make_sampler(tf.constant([0, 9]))(logits, tf.constant(0)).numpy()
    freq = np.bincount(draws, minlength=5) / len(draws)
    assert freq[0] == freq[3] == 0  # probability-0 tokens are never drawn
    np.testing.assert_allclose(freq, probs, atol=4 * np.sqrt(0.25 / len(draws)))  # 4 standard errors
    hot = make_sampler(tf.constant([0, 9]), temperature=100.0)(logits, tf.constant(0)).numpy()
    np.testing.assert_allclose(np.bincount(hot, minlength=5)[[1, 2, 4]] / len(hot), 1 / 3, atol=0.02)


def test_draws_are_the_same_in_eager_graph_and_xla():
    """The sampler's uniforms are integer hashes: XLA draws the numbers the CPU kernels draw (TensorFlow's
    stateless Philox does not: under XLA it gives others for the same seed), so a jit-compiled generator samples
    the tokens of the eager one. Per-row seeds equal one-row calls; the numbers look uniform."""
    from kerasplm.generation.sampling import counter_uniforms, row_seeds

    seed, step = tf.constant([3, 11]), tf.constant(5)
    eager = counter_uniforms(seed, step, 4096).numpy()
    np.testing.assert_array_equal(tf.function(counter_uniforms)(seed, step, 4096).numpy(), eager)
    np.testing.assert_array_equal(tf.function(counter_uniforms, jit_compile=True)(seed, step, 4096).numpy(), eager)
    assert eager.min() >= 0 and eager.max() < 1 and abs(eager.mean() - 0.5) < 0.02 and abs(eager.var() - 1 / 12) < 0.005
    assert len(np.unique(eager)) > 4000 and not np.array_equal(eager, counter_uniforms(seed, step + 1, 4096))
    per_row = counter_uniforms(row_seeds(tf.constant([7, 8, 7])), step, 3).numpy()
    alone = [counter_uniforms(tf.constant([0, s]), step, 1).numpy()[0] for s in (7, 8)]
    np.testing.assert_array_equal(per_row, [alone[0], alone[1], alone[0]])

    logits = tf.random.stateless_normal([8, 50], seed=[1, 2]) * 3
    sample = make_sampler(tf.constant([0, 9]), temperature=1.5, top_p=0.9)
    expected = sample(logits, step).numpy()
    np.testing.assert_array_equal(tf.function(sample, jit_compile=True)(logits, step).numpy(), expected)


def test_negative_pad_id_lets_every_token_be_generated():
    """GPT-2's vocabulary has no padding token and its id 0 is "!": with pad_id=-1 id 0 is generated."""
    keras.utils.set_random_seed(4)
    lm = CausalLM.from_preset("causal_lm_tiny")
    plain_logits = lm._logits
    lm._logits = lambda hidden: plain_logits(hidden) + tf.one_hot(0, lm.vocab_size, on_value=50.0)
    prompts = tf.constant([[5, 6, 7, -1], [9, 4, 8, 12]])
    out = generate(lm, prompts, tf.constant([3, 4]), max_new_tokens=3, pad_id=-1, jit_compile=False)
    assert out.tokens.numpy().tolist() == [[0, 0, 0], [0, 0, 0]]
    np.testing.assert_array_equal(out.tokens.numpy(), generate_uncached(lm, prompts, tf.constant([3, 4]),
                                                                        max_new_tokens=3, pad_id=-1).numpy())
    assert out.sequences.numpy()[0].tolist() == [5, 6, 7, 0, 0, 0, -1]   # padded with -1 after the row
    # With the default pad_id=0, id 0 is the padding and is never generated.
    assert 0 not in generate(lm, tf.maximum(prompts, 0), tf.constant([3, 4]), max_new_tokens=3,
                             jit_compile=False).tokens.numpy()


# A request's settings (temperature, top_k, top_p, seed; 0 = off, as the generator export's signature).
REQUESTS = [(1.0, 0, 0.0, 0), (0.7, 5, 0.0, 3), (1.3, 0, 0.8, 11), (0.9, 12, 0.9, 5), (1.0, 100, 1.0, 2),
            (3.0, 1, 0.0, 4), (0.0, 0, 0.0, 1)]


def test_one_sampler_for_python_and_tensor_options():
    """make_sampler with scalar-tensor options (a signature's inputs, resolved at run time) draws the tokens it
    draws with the same options as Python values (resolved when traced), step after step."""
    logits = tf.constant(np.random.default_rng(0).normal(0, 2, (64, 50)), tf.float32)
    for temperature, top_k, top_p, seed in REQUESTS[:-1]:
        strategy, options = resolve_request(temperature, top_k, top_p)
        assert strategy == "sample"
        python = make_sampler(seed, **options)
        tensor = make_sampler(tf.constant(seed), tf.constant(temperature), tf.constant(top_k), tf.constant(top_p))
        traced = tf.function(tensor)
        for step in range(3):
            expected = python(logits, tf.constant(step)).numpy()
            np.testing.assert_array_equal(tensor(logits, tf.constant(step)).numpy(), expected)
            np.testing.assert_array_equal(traced(logits, tf.constant(step)).numpy(), expected)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_tensor_request_equals_generate(model, jit_compile):
    """causal_lm_search with a request's tensors (one trace for every request; temperature 0 = the greedy path)
    gives generate's tokens for the same request spelled in Python."""
    @tf.function(jit_compile=jit_compile)
    def search(temperature, top_k, top_p, seed):
        ids, _, steps = causal_lm_search(model, tf.maximum(PROMPTS, 0), tf.constant(LENGTHS), 5, strategy="sample",
                                         temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, end_id=())
        return ids[:, 1:], steps

    # Under XLA each request's in-process function compiles: three of them (both filters, none, greedy).
    for temperature, top_k, top_p, seed in [REQUESTS[i] for i in (3, 4, 6)] if jit_compile else REQUESTS:
        strategy, options = resolve_request(temperature, top_k, top_p)
        expected = generate(model, PROMPTS, LENGTHS, max_new_tokens=5, strategy=strategy, seed=seed,
                            jit_compile=jit_compile, **options).tokens.numpy()
        tokens, _ = search(tf.constant(temperature), tf.constant(top_k), tf.constant(top_p), tf.constant(seed))
        np.testing.assert_array_equal(tokens.numpy(), expected)
    assert search.experimental_get_tracing_count() == 1


def test_request_rules_are_declared_once():
    assert resolve_request() == ("greedy", {})
    assert resolve_request(0.8, 0, 1.0) == ("sample", {"temperature": 0.8, "top_k": None, "top_p": None})
    assert resolve_request(0.8, 40, 0.9) == ("sample", {"temperature": 0.8, "top_k": 40, "top_p": 0.9})
    assert resolve_request(num_beams=3) == ("beam", {"beam_size": 3})
    for kwargs, message in [({"temperature": -1.0}, "temperature must be >= 0"), ({"top_k": -1}, "top_k must be >= 0"),
                            ({"temperature": 1.0, "top_p": 1.5}, r"top_p must be in \[0, 1\]"),
                            ({"top_k": 3}, "top_k and top_p need sampling"),
                            ({"temperature": 1.0, "num_beams": 2}, "beam search"), ({"num_beams": 0}, "num_beams")]:
        with pytest.raises(ValueError, match=message):
            resolve_request(**kwargs)
    for options, message in [((-1.0, 0, 0.0), "temperature must be >= 0"), ((1.0, -2, 0.0), "top_k must be >= 0"),
                             ((1.0, 0, 1.5), r"top_p must be in \[0, 1\]")]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            request_checks(tf.constant(options[0]), tf.constant(options[1]), tf.constant(options[2]))
