"""What the tests of the BERT variants' converters share (``tests/models/{distilbert,electra,roberta,albert}/
test_convert.py``): tiny HuggingFace models drawn at random and saved to a temp dir, our outputs and the run's
in-graph tokenizer set against ``transformers``' on hard inputs. Import it after ``pytest.importorskip("torch")``
and ``("transformers")``."""
import numpy as np
import tensorflow as tf
import torch

from kerasplm import cli
from kerasplm.runs import load_run

# Accents, CJK, emoji, control and format characters, a very long word, the empty string, whitespace only.
HARD_TEXTS = ["Héllo, naïve café RÉSUMÉ!", "中文字符 日本語 한국어", "emoji 😀👍🏽 🇫🇷", "a\x00b\x01c\x7fd zero\u200bwidth",
              "x" * 120, "", "  \t\n ", "the cat sat on the mat."]
PIECES = ["the", "cat", "sat", "on", "mat", "hello", "naive", "cafe", "resume", "emoji", "zero", "width", "中", "文",
          "字", "日", "本", "x", "##x", "a", "b", "c", "d", "##a", "##e", ",", "!", ".", "h", "##ello"]
WORDPIECE_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + PIECES
TOKENS = np.array([[2, 7, 12, 9, 3, 15, 3], [2, 20, 21, 3, 0, 0, 0]])
MASK = (TOKENS != 0).astype(np.int64)
SEGMENTS = np.array([[0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0]])


def randomize(model):
    """Every weight drawn again, larger than HF's init (std 0.02 hides mapping mistakes), LayerNorm gains near 1."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name:
                parameter.copy_((1 if name.endswith("weight") else 0) + 0.2 * torch.randn_like(parameter))
            else:
                parameter.normal_(0, 0.2)
    return model.eval()


def save(model, directory, vocab=WORDPIECE_VOCAB):
    model.save_pretrained(str(directory), safe_serialization=True)
    (directory / "vocab.txt").write_text("".join(f"{t}\n" for t in vocab), encoding="utf-8")
    return str(directory)


def hf_outputs(model, segments=True, **kwargs):
    args = {"input_ids": torch.tensor(TOKENS), "attention_mask": torch.tensor(MASK), **kwargs}
    if segments:
        args["token_type_ids"] = torch.tensor(SEGMENTS)
    with torch.no_grad():
        return model(**args, output_hidden_states=True)


def ours(backbone):
    inputs = {"token_ids": tf.constant(TOKENS), "segment_ids": tf.constant(SEGMENTS),
              "padding_mask": tf.constant(MASK)}
    return backbone(inputs, training=False, output_hidden_states=True)


def assert_hidden_states_match(mine, theirs):
    real = MASK.astype(bool)
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs):
        np.testing.assert_allclose(np.asarray(a)[real], b.numpy()[real], atol=1e-4)


def assert_same_ids(run_dir, reference):
    """The run's stored preprocessor tokenizes HARD_TEXTS into the HF tokenizer's ids."""
    tokenizer = load_run(run_dir).preprocessor.tokenizer
    got = tokenizer.tokenize(tf.constant(HARD_TEXTS)).to_list()
    for text, ids in zip(HARD_TEXTS, got):
        assert ids == reference(text, add_special_tokens=False)["input_ids"], text


def convert(kind, source, out):
    assert cli.main(["convert", kind, "--from", source, "--out", str(out)]) == 0
    return str(out)


def assert_embedder_packs_as_the_run(run_dir, compute=True):
    """`export embedder` reads a converted run with the run's own packing (<s> ... </s>, or [CLS] ... [SEP] with
    its pad token); with ``compute``, its embedding is the mean of the backbone's states (tracing a BPE into a
    graph costs ~15 s, so RoBERTa's test leaves it out)."""
    from kerasplm.models.sentence_embedding.embedder_export import EmbedderModule, bert_run_parts

    backbone, tokenizer, _ = bert_run_parts(run_dir)
    module = EmbedderModule(backbone, tokenizer, pooling="mean", normalize=False)
    texts = tf.constant(["the cat sat on the mat.", "hello"])
    stored = load_run(run_dir).preprocessor
    assert module.preprocessor.get_config() == {**stored.get_config(), "sequence_length": stored.sequence_length}
    if not compute:
        return
    packed = stored(texts)
    states = backbone(packed, training=False)["sequence_output"].numpy()[0]
    np.testing.assert_allclose(module.embed(texts)["embedding"].numpy()[0], states.mean(0), atol=1e-5)
