"""HF RoBERTa -> a ``bert`` run (``kerasplm convert roberta``): hidden states and MLM logits against
``transformers`` on a tiny randomly initialized model saved to a temp dir; the run's byte-level BPE and its
packing against HF's tokenizer of the same files on hard inputs."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from kerasplm import cli  # noqa: E402
from kerasplm.runs import load_run  # noqa: E402
from tests.models.bert.hf_variants import (MASK, SEGMENTS, TOKENS, assert_embedder_packs_as_the_run,  # noqa: E402
                                           assert_hidden_states_match, assert_same_ids, convert, randomize)


def roberta_tokenizer_files(directory):
    """A tiny byte-level BPE with RoBERTa's special tokens: <s> <pad> </s> <unk> = 0..3, <mask> last."""
    from tests.text.bpe_vocab import train_gpt2_vocab

    train_gpt2_vocab(directory, vocab_size=300)
    trained = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    tokens = ["<s>", "<pad>", "</s>", "<unk>"] + [t for t in sorted(trained, key=trained.get)
                                                 if t != "<|endoftext|>"] + ["<mask>"]
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}), encoding="utf-8")
    return len(tokens)


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
    source = tmp_path_factory.mktemp("hf_roberta")
    vocab_size = roberta_tokenizer_files(source)
    config = transformers.RobertaConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=12,
                                        type_vocab_size=1, pad_token_id=1)
    model = randomize(transformers.RobertaForMaskedLM(config))
    model.save_pretrained(str(source), safe_serialization=True)
    return str(source), model, convert("roberta", str(source), tmp_path_factory.mktemp("runs") / "roberta")


def test_roberta_hidden_states_logits_and_token_ids_match_transformers(roberta):
    source, reference, run_dir = roberta
    model = load_run(run_dir)
    config = json.loads(open(os.path.join(run_dir, "config.json")).read())
    assert (config["task"], config["assets"]) == ("pretraining", {"bpe_vocab": "vocab.json", "bpe_merges": "merges.txt"})
    backbone = model.backbone
    assert (backbone.config.num_segments, backbone.config.position_offset, backbone.config.max_positions) == (1, 2, 12)
    tokens = np.where(MASK == 1, TOKENS + 3, 1)            # RoBERTa's <pad> is 1
    inputs = {"token_ids": tf.constant(tokens), "segment_ids": tf.constant(SEGMENTS), "padding_mask": tf.constant(MASK)}
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(MASK),
                             output_hidden_states=True)
    assert_hidden_states_match(backbone(inputs, training=False, output_hidden_states=True)["hidden_states"],
                               expected.hidden_states)
    positions = np.array([[1, 2, 5], [1, 2, 2]])
    logits = model({**inputs, "masked_positions": tf.constant(positions)}, training=False)["mlm_logits"]
    np.testing.assert_allclose(logits.numpy(), np.take_along_axis(expected.logits.numpy(), positions[..., None], 1),
                               atol=1e-4)
    hf_tokenizer = transformers.RobertaTokenizer(os.path.join(source, "vocab.json"), os.path.join(source, "merges.txt"))
    assert_same_ids(run_dir, hf_tokenizer)
    # Packing as HF's: <s> A </s> and <s> A </s></s> B </s>, truncated longest-first to the 10 usable positions.
    preprocessor = model.preprocessor
    texts, pairs = ["the quick brown fox jumps over the lazy dog", "naïve"], ["Hello world", "中文 字符 日本語 한국어"]
    packed = preprocessor(tf.constant(texts), tf.constant(pairs))
    for row, (a, b) in enumerate(zip(texts, pairs)):
        want = hf_tokenizer(a, b, truncation=True, max_length=10)["input_ids"]
        got = packed["token_ids"][row].numpy()[packed["padding_mask"][row].numpy() == 1].tolist()
        assert got == want, (a, b)
    single = preprocessor(tf.constant(texts))
    assert single["token_ids"][1].numpy().tolist()[:3] == hf_tokenizer(texts[1])["input_ids"][:3]


def test_a_byte_level_run_embeds_with_its_own_packing(roberta):
    """`export embedder` reads a converted RoBERTa run with its <s> ... </s> packing (the embedding itself is
    computed in ALBERT's test: tracing the BPE into a graph costs ~15 s)."""
    assert_embedder_packs_as_the_run(roberta[2], compute=False)


def test_a_tokenizer_that_does_not_fit_leaves_no_run(roberta, tmp_path, capsys):
    """RoBERTa's special tokens missing from vocab.json: one line, exit 2, no directory written."""
    source, _, _ = roberta
    for name in ("config.json", "model.safetensors", "merges.txt"):
        (tmp_path / name).write_bytes(open(os.path.join(source, name), "rb").read())
    vocab = json.loads(open(os.path.join(source, "vocab.json"), encoding="utf-8").read())
    del vocab["<mask>"]
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    assert cli.main(["convert", "roberta", "--from", str(tmp_path), "--out", str(tmp_path / "run")]) == 2
    assert "special tokens {'mask': '<mask>'} are not in the vocabulary" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
