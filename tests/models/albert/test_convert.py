"""HF ALBERT -> a ``bert`` run (``kerasplm convert albert``): hidden states, MLM and SOP logits against
``transformers`` on a tiny randomly initialized model saved to a temp dir; the run's SentencePiece tokenizer and
its packing against HF's tokenizer of the same file on hard inputs; the run as a fine-tuning init."""
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
from tests.models.bert.hf_variants import (MASK, SEGMENTS, TOKENS, assert_embedder_packs_as_the_run,  # noqa: E402
                                           assert_hidden_states_match, assert_same_ids, convert, hf_outputs, ours,
                                           randomize)


def albert_spiece(path):
    """A tiny unigram SentencePiece model with ALBERT's ids: <pad> <unk> [CLS] [SEP] [MASK] = 0..4."""
    import io
    import random

    import sentencepiece as spm

    rng = random.Random(0)
    words = ("the quick brown fox jumps over lazy dog hello world naive cafe resume emoji zero width 中文 字符 "
             "日本語 tokenizer piece").split()
    lines = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(300)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=60,
                                   model_type="unigram", pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                                   control_symbols=["[CLS]", "[SEP]", "[MASK]"], num_threads=1, minloglevel=2)
    path.write_bytes(model.getvalue())
    return 60


@pytest.fixture(scope="module")
def albert(tmp_path_factory):
    source = tmp_path_factory.mktemp("hf_albert")
    vocab_size = albert_spiece(source / "spiece.model")
    config = transformers.AlbertConfig(vocab_size=vocab_size, embedding_size=8, hidden_size=16, num_hidden_layers=3,
                                       num_attention_heads=2, intermediate_size=32, max_position_embeddings=12)
    model = randomize(transformers.AlbertForPreTraining(config))
    model.save_pretrained(str(source), safe_serialization=True)
    return str(source), model, convert("albert", str(source), tmp_path_factory.mktemp("runs") / "albert")


def test_albert_hidden_states_logits_and_token_ids_match_transformers(albert):
    source, reference, run_dir = albert
    model = load_run(run_dir)
    config = json.loads(open(os.path.join(run_dir, "config.json")).read())
    assert (config["task"], config["assets"], config["options"]["sentence_task"]) == (
        "pretraining", {"spm_model": "spiece.model"}, "sop")
    backbone = model.backbone
    c = backbone.config
    assert (c.embedding_size, c.share_layers, c.activation, len(backbone.blocks)) == (8, True, "gelu_tanh", 1)
    expected = hf_outputs(reference)
    assert_hidden_states_match(ours(backbone)["hidden_states"], expected.hidden_states)
    positions = np.array([[1, 2, 5], [1, 2, 2]])
    outputs = model({"token_ids": tf.constant(TOKENS), "segment_ids": tf.constant(SEGMENTS),
                     "padding_mask": tf.constant(MASK), "masked_positions": tf.constant(positions)}, training=False)
    np.testing.assert_allclose(outputs["mlm_logits"].numpy(),
                               np.take_along_axis(expected.prediction_logits.numpy(), positions[..., None], 1), atol=1e-4)
    np.testing.assert_allclose(outputs["sentence_logits"].numpy(), expected.sop_logits.numpy(), atol=1e-4)
    hf_tokenizer = transformers.AlbertTokenizer.from_pretrained(source)
    assert_same_ids(run_dir, hf_tokenizer)
    packed = model.preprocessor(tf.constant(["The quick fox"]), tf.constant(["héllo WORLD"]))
    assert packed["token_ids"][0].numpy().tolist() == hf_tokenizer("The quick fox", "héllo WORLD")["input_ids"]
    ids, segments = packed["token_ids"][0].numpy().tolist(), packed["segment_ids"][0].numpy().tolist()
    first_sep = ids.index(3)
    assert segments == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)


def test_a_sentencepiece_run_embeds_with_its_own_packing(albert):
    """`export embedder` reads a converted ALBERT run with its [CLS] ... [SEP] packing and pad token: the mean of
    the backbone's states."""
    assert_embedder_packs_as_the_run(albert[2])


def test_a_sentencepiece_run_fine_tunes_a_classifier(albert, tmp_path):
    """A converted ALBERT run is a `finetune bert-classifier --init`: its tokenizer file is copied, its packing
    kept, and the classifier run reloads and predicts; the tagger refuses a non-WordPiece run in one line."""
    from kerasplm.models.bert.classifier_job import finetune_bert_classifier
    from kerasplm.models.bert.tagger_job import finetune_bert_tagger

    _, _, run_dir = albert
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "".join(f"{t}\t{i % 2}\n" for i, t in enumerate(
        ["the cat sat", "hello world", "naïve café", "the quick fox", "lazy dog", "中文 字符"])), encoding="utf-8")
    out = tmp_path / "classifier"
    finetune_bert_classifier(str(out), log=lambda *_: None, steps=2, train=str(train), init=run_dir,
                             batch_size=3, max_length=8, verbose=0, seed=0)
    assert json.loads((out / "config.json").read_text())["assets"] == {"spm_model": "spiece.model"}
    assert (out / "spiece.model").read_bytes() == open(os.path.join(run_dir, "spiece.model"), "rb").read()
    classifier = load_run(str(out))
    assert classifier.preprocessor.pad_id == 0 and classifier.preprocessor.sequence_length == 8
    assert np.asarray(classifier.predict_texts(["the cat", "hello"])).shape == (2, 2)
    conll = tmp_path / "train.conll"
    conll.write_text("the DT B-NP O\ncat NN I-NP B-PER\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="needs a WordPiece \\(BERT\\) tokenizer"):
        finetune_bert_tagger(str(tmp_path / "tagger"), train=str(conll), init=run_dir, steps=1, sequence_length=8,
                             verbose=0)
