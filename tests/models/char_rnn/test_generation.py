"""The character RNN through the one generation engine (the state after every position is the cache): token for
token what a naive loop that re-runs the whole sequence from a zero state for every character gives, greedy and
sampled (temperature, top-k, top-p) under the same seed, for right-padded prompts of different lengths."""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.generation import engine
from kerasplm.generation.sampling import make_sampler
from kerasplm.models.char_rnn.model import CharRNNBackbone, CharRNNLanguageModel

VOCAB, NEW = 24, 10
LENGTHS = np.array([1, 4, 7], np.int32)


@pytest.fixture(scope="module", params=["gru", "lstm"])
def model(request):
    keras_seed = {"gru": 1, "lstm": 2}[request.param]
    tf.keras.utils.set_random_seed(keras_seed)
    return CharRNNLanguageModel(CharRNNBackbone(vocab_size=VOCAB, cell=request.param, num_layers=2, units=16,
                                                embedding_dim=8 if request.param == "gru" else 0, max_positions=32))


def prompts():
    ids = np.random.RandomState(3).randint(3, VOCAB, (3, 7)).astype(np.int32)
    return ids * (np.arange(7) < LENGTHS[:, None])          # right-padded with 0 (<pad>)


def naive(model, prompt_ids, choose):
    """Every step re-runs ``model`` on the whole sequences from a zero state (rows right-padded together: the RNN is
    causal, so a row's last position sees its own characters only) and chooses all rows' tokens at once (the
    sampler's draw at step t takes row r's number from the step's stream, as in the engine)."""
    rows = [list(p[:n]) for p, n in zip(prompt_ids, LENGTHS)]
    for step in range(NEW):
        width = max(len(r) for r in rows)
        batch = np.array([r + [0] * (width - len(r)) for r in rows], np.int32)
        logits = model(tf.constant(batch)).numpy()[np.arange(len(rows)), [len(r) - 1 for r in rows]]
        logits[:, 0] = -np.inf                               # the engine never generates <pad>
        tokens = choose(tf.constant(logits), tf.constant(step)).numpy()
        for r, token in zip(rows, tokens):
            r.append(int(token))
    return np.array([r[n:] for r, n in zip(rows, LENGTHS)])


def generate(model, **options):
    return engine.generate(model, prompts(), LENGTHS, max_new_tokens=NEW, **options).tokens.numpy()


def test_cached_generation_equals_recomputing_from_scratch(model):
    cell = model.backbone.config.cell
    sampling = dict(temperature=0.8) if cell == "gru" else dict(temperature=1.3, top_k=5, top_p=0.9)
    expected = naive(model, prompts(), make_sampler(7, **sampling))
    assert (generate(model, strategy="sample", seed=7, jit_compile=False, **sampling) == expected).all()
    assert (generate(model, strategy="sample", seed=8, jit_compile=False, **sampling) != expected).any()
    greedy = naive(model, prompts(), lambda logits, step: tf.argmax(logits, -1))
    assert (generate(model, strategy="greedy", jit_compile=False) == greedy).all()
