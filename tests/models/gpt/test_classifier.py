"""GPT-1 fine-tuning at model level: the input transformations, the grown embedding, the extract head, the loss
L3 = task CE + 0.5·LM CE computed by hand, similarity's symmetry and multiple choice's softmax over answers."""
import json
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.gpt.model import GPT, GPTBackbone
from kerasplm.models.gpt.classifier import GPTClassifier, grow_token_embedding
from kerasplm.runs import serialization
from kerasplm.models.gpt.preprocessor import GPTClassifierPreprocessor, special_token_ids
from kerasplm.text.sentencepiece import SentencePieceTokenizer, train_sentencepiece
from tests.harness import check_model

WORDS = ["the", "king", "queen", "speaks", "walks", "to", "a", "castle", "garden", "good", "bad", "sleeps"]
TEXTS = ["the king walks to a castle", "good", "a queen sleeps"]
PAIRS = ["bad garden", "the queen speaks to the king slowly", "good"]


@pytest.fixture(scope="module")
def parts():
    rng = np.random.default_rng(0)
    tokenizer = SentencePieceTokenizer(train_sentencepiece([" ".join(rng.choice(WORDS, 6)) for _ in range(200)],
                                                           vocab_size=290))
    keras.utils.set_random_seed(0)
    pretrained = GPT(backbone=GPTBackbone.from_preset("gpt_tiny", vocab_size=tokenizer.vocab_size, rate=0.0,
                                                      attention_dropout=0.0))
    special = special_token_ids(tokenizer.vocab_size)
    return {"tokenizer": tokenizer, "pretrained": pretrained, "special": special,
            "backbone": grow_token_embedding(pretrained.backbone)}


def preprocessor(parts, task_type, length=64, pad_to_length=True):
    return GPTClassifierPreprocessor(parts["tokenizer"], parts["special"], length, task_type, pad_to_length)


def classifier(parts, task_type, num_labels=2, lm_weight=0.5):
    return GPTClassifier(parts["backbone"], num_labels, task_type=task_type, dropout=0.0, lm_weight=lm_weight,
                         preprocessor=preprocessor(parts, task_type))


def real_rows(inputs):
    """The real tokens of every packed sequence (rows of [B, L] or [B, K, L] inputs, in order)."""
    width = inputs["token_ids"].shape[-1]
    ids, masks = (inputs[k].numpy().reshape(-1, width) for k in ("token_ids", "padding_mask"))
    return [list(row[mask == 1]) for row, mask in zip(ids, masks)]


def test_input_transformations(parts):
    tok, s = parts["tokenizer"], parts["special"]
    ids = [list(r) for r in tok.tokenize(tf.constant(TEXTS)).to_list()]
    pair_ids = [list(r) for r in tok.tokenize(tf.constant(PAIRS)).to_list()]
    assert s == {"start": tok.vocab_size, "delim": tok.vocab_size + 1, "extract": tok.vocab_size + 2}
    start, delim, extract = s["start"], s["delim"], s["extract"]
    single = preprocessor(parts, "classification")(tf.constant(TEXTS))
    assert single["token_ids"].shape == (3, 64)
    assert real_rows(single) == [[start, *a, extract] for a in ids]
    entail = preprocessor(parts, "entailment")(tf.constant(TEXTS), tf.constant(PAIRS))
    assert real_rows(entail) == [[start, *a, delim, *b, extract] for a, b in zip(ids, pair_ids)]
    both = preprocessor(parts, "similarity")(tf.constant(TEXTS), tf.constant(PAIRS))
    assert both["token_ids"].shape == (3, 2, 64)
    assert real_rows(both) == [row for a, b in zip(ids, pair_ids)
                               for row in ([start, *a, delim, *b, extract], [start, *b, delim, *a, extract])]
    choices = preprocessor(parts, "multiple_choice")(tf.constant(TEXTS[:2]), tf.constant([PAIRS, PAIRS[::-1]]))
    assert choices["token_ids"].shape == (2, 3, 64)
    assert real_rows(choices)[5] == [start, *ids[1], delim, *pair_ids[0], extract]
    # Truncation trims text pieces (the longer part first) and keeps the three special tokens.
    cut = real_rows(preprocessor(parts, "entailment", length=7)(tf.constant(TEXTS[:1]), tf.constant(PAIRS[1:2])))[0]
    assert cut == [start, *ids[0][:2], delim, *pair_ids[1][:2], extract]
    with pytest.raises(ValueError, match="takes two inputs"):
        preprocessor(parts, "entailment")(tf.constant(TEXTS))


def test_grown_embedding_keeps_the_pretrained_model(parts):
    pretrained, grown = parts["pretrained"], parts["backbone"]
    old_table = pretrained.backbone.embeddings.embedding.embeddings.numpy()
    new_table = grown.embeddings.embedding.embeddings.numpy()
    assert new_table.shape == (old_table.shape[0] + 3, old_table.shape[1])
    np.testing.assert_array_equal(new_table[:-3], old_table)
    assert 0.005 < new_table[-3:].std() < 0.05        # drawn like the other rows (std 0.02, truncated)
    ids = parts["tokenizer"].tokenize(tf.constant(TEXTS[:1])).to_tensor()
    np.testing.assert_allclose(GPT(backbone=grown)(ids)[..., :-3], pretrained(ids), atol=1e-5)


def test_head_reads_the_extract_position_whatever_the_padding(parts):
    model = classifier(parts, "entailment")
    fixed = preprocessor(parts, "entailment")(tf.constant(TEXTS), tf.constant(PAIRS))
    tight = preprocessor(parts, "entailment", pad_to_length=False)(tf.constant(TEXTS), tf.constant(PAIRS))
    assert tight["token_ids"].shape[1] < 64
    logits = model(fixed).numpy()
    np.testing.assert_allclose(model(tight).numpy(), logits, atol=1e-5)
    # Other ids in the padding change nothing; by hand: the head on the hidden state at the last real token.
    noisy = dict(fixed, token_ids=tf.where(fixed["padding_mask"] == 1, fixed["token_ids"], 7))
    np.testing.assert_allclose(model(noisy).numpy(), logits, atol=1e-5)
    hidden = parts["backbone"](fixed["token_ids"])["sequence_output"].numpy()
    last = fixed["padding_mask"].numpy().sum(-1) - 1
    assert (fixed["token_ids"].numpy()[np.arange(3), last] == parts["special"]["extract"]).all()
    np.testing.assert_allclose(model.head(hidden[np.arange(3), last]).numpy(), logits, atol=1e-5)


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_loss_is_task_cross_entropy_plus_half_the_lm_loss(parts):
    model = classifier(parts, "classification")
    inputs = preprocessor(parts, "classification")(tf.constant(TEXTS))
    labels = np.array([1, 0, 1])
    ids, mask = inputs["token_ids"].numpy(), inputs["padding_mask"].numpy()
    task = -log_softmax(model(inputs).numpy())[np.arange(3), labels].mean()
    lm_logits = GPT(backbone=parts["backbone"])(inputs["token_ids"]).numpy()      # the tied LM head
    token_nll = -np.take_along_axis(log_softmax(lm_logits[:, :-1]), ids[:, 1:, None], -1)[..., 0]
    lm = (token_nll * mask[:, 1:]).sum() / mask[:, 1:].sum()
    sums = model.compute_loss_sums((inputs, labels), training=False)
    (task_sum, examples), (lm_sum, tokens, lam) = sums["losses"]["task"], sums["losses"]["lm"]
    assert (float(examples), float(tokens), lam) == (3.0, mask[:, 1:].sum(), 0.5)
    # The Trainer's objective: Σ λ_i S_i / C_i (kerasplm.training.trainer, tested there).
    np.testing.assert_allclose([task_sum / examples, lm_sum / tokens, task_sum / examples + lam * lm_sum / tokens],
                               [task, lm, task + 0.5 * lm], rtol=1e-5)
    without_lm = classifier(parts, "classification", lm_weight=0.0).compute_loss_sums((inputs, labels), False)
    assert set(without_lm["losses"]) == {"task"}


def test_similarity_is_symmetric(parts):
    model = classifier(parts, "similarity")
    prep = model.preprocessor
    forward = model(prep(tf.constant(TEXTS), tf.constant(PAIRS))).numpy()
    np.testing.assert_allclose(model(prep(tf.constant(PAIRS), tf.constant(TEXTS))).numpy(), forward, atol=1e-5)
    # ... and is the head on the sum of the two orders' extract states.
    one_order = classifier(parts, "entailment")
    hidden = [one_order.backbone(preprocessor(parts, "entailment")(tf.constant(a), tf.constant(b))["token_ids"])
              for a, b in ((TEXTS, PAIRS), (PAIRS, TEXTS))]
    ends = [preprocessor(parts, "entailment")(tf.constant(a), tf.constant(b))["padding_mask"].numpy().sum(-1) - 1
            for a, b in ((TEXTS, PAIRS), (PAIRS, TEXTS))]
    summed = sum(h["sequence_output"].numpy()[np.arange(3), e] for h, e in zip(hidden, ends))
    np.testing.assert_allclose(model.head(summed).numpy(), forward, atol=1e-4)


def test_multiple_choice_is_a_softmax_over_the_answers(parts):
    model = classifier(parts, "multiple_choice", num_labels=1)
    answers = [PAIRS, PAIRS[::-1]]
    logits = model(model.preprocessor(tf.constant(TEXTS[:2]), tf.constant(answers))).numpy()
    assert logits.shape == (2, 3)
    permuted = model(model.preprocessor(tf.constant(TEXTS[:2]), tf.constant([a[::-1] for a in answers]))).numpy()
    np.testing.assert_allclose(permuted, logits[:, ::-1], atol=1e-5)
    probabilities = model.predict_texts(TEXTS[:2], answers)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-6)
    sums = model.compute_loss_sums((model.preprocessor(tf.constant(TEXTS[:2]), tf.constant(answers)), [2, 0]), False)
    task_sum, count = (float(x) for x in sums["losses"]["task"])
    np.testing.assert_allclose(task_sum / count, -log_softmax(logits)[[0, 1], [2, 0]].mean(), rtol=1e-5)
    with pytest.raises(ValueError, match="num_labels must be 1 for multiple_choice"):
        GPTClassifier(parts["backbone"], 2, task_type="multiple_choice")


def test_harness(parts, tmp_path):
    inputs = preprocessor(parts, "entailment")(tf.constant(TEXTS), tf.constant(PAIRS))
    check_model(lambda: GPTClassifier(GPTBackbone.from_config_object(parts["backbone"].config), 2,
                                      task_type="entailment"),
                inputs, expected_shapes=(3, 2), tmp_path=tmp_path, checks=("config", "checkpoint"))


def test_config_round_trips_labels_pair_input_and_the_preprocessor(parts, tmp_path):
    """What a run's config.json stores: the classifier's labels and pair_input, the preprocessor with its tokenizer
    (the file named relative to the run when it lies inside it); check_preprocessor refuses a misfit."""
    model = GPTClassifier(GPTBackbone.from_config_object(parts["backbone"].config), 2, task_type="similarity",
                          labels=["neg", "pos"], dropout=0.0)
    clone = serialization.deserialize(json.loads(json.dumps(serialization.serialize(model, tmp_path))), tmp_path)
    assert (clone.labels, clone.pair_input, clone.num_labels, clone.task_type) == (["neg", "pos"], True, 2,
                                                                                   "similarity")
    assert clone.get_config() == model.get_config()
    assert GPTClassifier(parts["backbone"], 2).pair_input is False
    with pytest.raises(ValueError, match="3 labels"):
        GPTClassifier(parts["backbone"], 2, labels=["a", "b", "c"])
    shutil.copyfile(parts["tokenizer"].vocabulary_file, tmp_path / "spm.model")
    original = GPTClassifierPreprocessor(SentencePieceTokenizer(str(tmp_path / "spm.model")), parts["special"], 48,
                                         "similarity")
    spec = json.loads(json.dumps(serialization.serialize(original, tmp_path)))
    assert spec["config"]["tokenizer"]["config"]["model"] == "spm.model"
    rebuilt = serialization.deserialize(spec, tmp_path)
    assert (rebuilt.sequence_length, rebuilt.task_type, rebuilt.special_ids) == (48, "similarity", parts["special"])
    for key, value in rebuilt(tf.constant(TEXTS), tf.constant(PAIRS)).items():
        np.testing.assert_array_equal(value.numpy(), original(tf.constant(TEXTS), tf.constant(PAIRS))[key].numpy())
    clone.check_preprocessor(rebuilt)
    with pytest.raises(ValueError, match="special ids .* outside the model's"):
        clone.check_preprocessor(GPTClassifierPreprocessor(parts["tokenizer"], special_token_ids(1000), 48))
