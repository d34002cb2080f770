"""HF ELECTRA -> ``bert`` runs (``kerasplm convert electra``): the discriminator's hidden states and
replaced-token-detection logits, and the generator's MLM logits, against ``transformers`` on tiny randomly
initialized models saved to a temp dir; the run's in-graph tokenizer against the HF tokenizer on hard inputs."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from kerasplm.runs import load_run  # noqa: E402
from tests.models.bert.hf_variants import (MASK, SEGMENTS, TOKENS, WORDPIECE_VOCAB,  # noqa: E402
                                           assert_hidden_states_match, assert_same_ids, convert, hf_outputs, ours,
                                           randomize, save)


def electra_config(**kwargs):
    return transformers.ElectraConfig(vocab_size=len(WORDPIECE_VOCAB), embedding_size=8, num_hidden_layers=2,
                                      num_attention_heads=2, max_position_embeddings=12, **kwargs)


@pytest.fixture(scope="module")
def electra(tmp_path_factory):
    discriminator = randomize(transformers.ElectraForPreTraining(electra_config(hidden_size=16, intermediate_size=32)))
    generator = randomize(transformers.ElectraForMaskedLM(electra_config(hidden_size=8, intermediate_size=16)))
    runs = tmp_path_factory.mktemp("runs")
    sources = [save(discriminator, tmp_path_factory.mktemp("hf_disc")), save(generator, tmp_path_factory.mktemp("hf_gen"))]
    return (sources, (discriminator, generator),
            (convert("electra", sources[0], runs / "disc"), convert("electra", sources[1], runs / "gen")))


def test_electra_discriminator_hidden_states_and_rtd_logits_match_transformers(electra):
    (source, _), (discriminator, _), (run_dir, _) = electra
    model = load_run(run_dir)
    config = json.loads(open(os.path.join(run_dir, "config.json")).read())
    assert (config["task"], config["options"]["electra"]) == ("electra_discriminator", "discriminator")
    backbone = model.backbone
    assert backbone.config.embedding_size == 8 and backbone.config.hidden_size == 16
    expected = hf_outputs(discriminator)
    assert_hidden_states_match(ours(backbone)["hidden_states"], expected.hidden_states)
    logits = model({"token_ids": tf.constant(TOKENS), "segment_ids": tf.constant(SEGMENTS),
                    "padding_mask": tf.constant(MASK)}, training=False)["rtd_logits"]
    real = MASK.astype(bool)
    np.testing.assert_allclose(logits.numpy()[real], expected.logits.numpy()[real], atol=1e-4)
    assert_same_ids(run_dir, transformers.ElectraTokenizer(os.path.join(source, "vocab.txt")))


def test_electra_generator_mlm_logits_match_transformers(electra):
    _, (_, generator), (_, run_dir) = electra
    model = load_run(run_dir)
    config = json.loads(open(os.path.join(run_dir, "config.json")).read())
    assert (config["task"], config["options"]["electra"]) == ("pretraining", "generator")
    positions = np.array([[1, 2, 5], [1, 2, 2]])
    outputs = model({"token_ids": tf.constant(TOKENS), "segment_ids": tf.constant(SEGMENTS),
                     "padding_mask": tf.constant(MASK), "masked_positions": tf.constant(positions)}, training=False)
    expected = hf_outputs(generator).logits.numpy()
    np.testing.assert_allclose(outputs["mlm_logits"].numpy(), np.take_along_axis(expected, positions[..., None], 1),
                               atol=1e-4)
    # `kerasplm fill-mask` reads the generator run: its top tokens are transformers' at the [MASK].
    from kerasplm.models.bert.fill_mask import fill_mask_module

    (candidates,), = fill_mask_module(run_dir, top_k=3).fill(["the [MASK] sat"])
    ids = [WORDPIECE_VOCAB.index(t) for t in ("[CLS]", "the", "[MASK]", "sat", "[SEP]")]
    with torch.no_grad():
        probabilities = torch.softmax(generator(input_ids=torch.tensor([ids])).logits[0, 2], -1).numpy()
    best = np.argsort(-probabilities)[:3]
    assert [t for t, _ in candidates] == [WORDPIECE_VOCAB[i] for i in best]
    np.testing.assert_allclose([p for _, p in candidates], probabilities[best], atol=1e-5)


def test_a_converted_electra_discriminator_is_a_fine_tuning_init(electra, tmp_path):
    """The discriminator run is what `finetune bert-classifier --init` and `export embedder` read."""
    from kerasplm.models.sentence_embedding.embedder_export import bert_run_parts

    _, (discriminator, _), (run_dir, _) = electra
    backbone, tokenizer, options = bert_run_parts(run_dir)
    assert backbone.config.embedding_size == 8 and tokenizer.vocab_size == len(WORDPIECE_VOCAB)
    assert options["fresh_pooler"] is True
