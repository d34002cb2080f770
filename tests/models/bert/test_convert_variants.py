"""HF DistilBERT / ELECTRA (/ RoBERTa / ALBERT) -> ``bert`` runs: hidden states and head logits against
``transformers`` on tiny randomly initialized models saved to a temp dir, and the run's in-graph tokenizer
against the HF tokenizer of the same files on hard inputs."""
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


# ------------------------------------------------------------------------------------------------ DistilBERT
@pytest.fixture(scope="module")
def distilbert(tmp_path_factory):
    config = transformers.DistilBertConfig(vocab_size=len(WORDPIECE_VOCAB), dim=16, n_layers=2, n_heads=2,
                                           hidden_dim=32, max_position_embeddings=12)
    model = randomize(transformers.DistilBertForMaskedLM(config))
    source = save(model, tmp_path_factory.mktemp("hf_distilbert"))
    return source, model, convert("distilbert", source, tmp_path_factory.mktemp("runs") / "distilbert")


def test_distilbert_hidden_states_and_token_ids_match_transformers(distilbert):
    source, model, run_dir = distilbert
    loaded = load_run(run_dir)
    config = json.loads(open(os.path.join(run_dir, "config.json")).read())
    assert (config["task"], config["options"]["model"], config["options"]["fresh_pooler"]) == (
        "backbone", "distilbert", True)
    assert loaded.config.num_segments == 0 and not hasattr(loaded.embeddings, "segment_embedding")
    assert_hidden_states_match(ours(loaded)["hidden_states"], hf_outputs(model.distilbert, segments=False).hidden_states)
    assert_same_ids(run_dir, transformers.DistilBertTokenizer(os.path.join(source, "vocab.txt")))


def test_distilbert_errors_name_every_problem(distilbert, tmp_path):
    from safetensors.numpy import load_file, save_file

    source, _, _ = distilbert
    tensors = load_file(os.path.join(source, "model.safetensors"))
    del tensors["distilbert.transformer.layer.1.ffn.lin2.bias"]
    tensors["distilbert.transformer.layer.0.ffn.lin1.weight"] = tensors[
        "distilbert.transformer.layer.0.ffn.lin1.weight"][:5]
    tensors["distilbert.transformer.layer.0.rotary.weight"] = np.zeros(3, np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    for name in ("config.json", "vocab.txt"):
        (tmp_path / name).write_bytes(open(os.path.join(source, name), "rb").read())
    with pytest.raises(ValueError) as error:
        from kerasplm.models.bert.convert_variants import load_hf_distilbert
        load_hf_distilbert(str(tmp_path))
    message = str(error.value)
    assert "3 weight problem(s)" in message and "missing transformer.layer.1.ffn.lin2.bias (16,)" in message
    assert "shape of transformer.layer.0.ffn.lin1.weight: (16, 5) (transposed), expected (16, 32)" in message
    assert "unknown transformer.layer.0.rotary.weight (3,)" in message
    assert cli.main(["convert", "distilbert", "--from", str(tmp_path), "--out", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------ ELECTRA
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


# ------------------------------------------------------------------------------------------------ RoBERTa
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


# ------------------------------------------------------------------------------------------------ ALBERT
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


# ------------------------------------------------------------------------------------------------ the rails
@pytest.mark.parametrize("variant", ["roberta", "albert"])
def test_byte_level_and_sentencepiece_runs_embed_with_their_own_packing(variant, request):
    """`export embedder` reads a converted RoBERTa / ALBERT run with the run's own packing (<s> ... </s>, or
    [CLS] ... [SEP] with its pad token): the mean of the backbone's states (computed for ALBERT only: tracing the
    BPE into a graph costs ~15 s)."""
    from kerasplm.models.sentence_embedding.embedder_export import EmbedderModule, bert_run_parts

    _, _, run_dir = request.getfixturevalue(variant)
    backbone, tokenizer, _ = bert_run_parts(run_dir)
    module = EmbedderModule(backbone, tokenizer, pooling="mean", normalize=False)
    texts = tf.constant(["the cat sat on the mat.", "hello"])
    stored = load_run(run_dir).preprocessor
    assert module.preprocessor.get_config() == {**stored.get_config(), "sequence_length": stored.sequence_length}
    if variant == "roberta":
        return
    packed = stored(texts)
    states = backbone(packed, training=False)["sequence_output"].numpy()[0]
    np.testing.assert_allclose(module.embed(texts)["embedding"].numpy()[0], states.mean(0), atol=1e-5)


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
