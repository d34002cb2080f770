"""The in-graph character vocabulary: ids, round trips of any UTF-8, unknown characters, the stored file."""
import json

import pytest
import tensorflow as tf

from kerasplm.runs.serialization import asset_root
from kerasplm.text.char_vocab import (CharacterTokenizer, build_char_vocab, read_char_vocab, write_char_vocab)

TEXT = "First Citizen:\nBefore we proceed, hear me speak.\nÉté 東京 🙂\n"


def test_ids_are_the_special_tokens_then_characters_by_frequency():
    vocab = build_char_vocab("abbccc")
    assert vocab == ["<pad>", "<unk>", "<|endoftext|>", "c", "b", "a"]
    assert build_char_vocab("abbccc", max_size=5) == ["<pad>", "<unk>", "<|endoftext|>", "c", "b"]
    tokenizer = CharacterTokenizer(vocab)
    assert tokenizer.tokenize(tf.constant(["cab", ""])).to_list() == [[3, 5, 4], []]
    assert (tokenizer.pad_id, tokenizer.end_of_text_id, tokenizer.token_to_id("<|endoftext|>")) == (0, 2, 2)


def test_any_utf8_round_trips_and_unknown_characters_become_one_id():
    tokenizer = CharacterTokenizer(build_char_vocab(TEXT))
    assert tokenizer.detokenize(tokenizer.tokenize(tf.constant([TEXT, ""]))).numpy().tolist() == [TEXT.encode(), b""]
    ids = tokenizer.tokenize(tf.constant(["xé?", b"a\xffb"])).to_list()
    assert ids[0][0] == 1 and ids[0][2] == 1 and ids[1] == [tokenizer.token_to_id("a"), 1, 1]
    assert tokenizer.detokenize(tf.ragged.constant([[1, 2, 0, 999, -4]], tf.int64)).numpy()[0] == "\ufffd" .encode() * 3


def test_the_vocabulary_file_round_trips_through_a_run(tmp_path):
    vocab = build_char_vocab(TEXT)
    path = tmp_path / "chars.json"
    write_char_vocab(vocab, path)
    assert read_char_vocab(path) == vocab and json.loads(path.read_text(encoding="utf-8")) == vocab
    with asset_root(tmp_path):
        tokenizer = CharacterTokenizer(str(path))
        config = tokenizer.get_config()
        assert config["vocabulary"] == "chars.json"
        again = CharacterTokenizer.from_config(config)
    assert again.vocab == vocab
    # The tokenizer survives a SavedModel whose loader knows no kerasplm class.
    module = tf.Module()
    module.tokenizer = tokenizer
    module.encode = tf.function(lambda s: tokenizer.tokenize(s).to_tensor(),
                                input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    expected = tokenizer.tokenize(tf.constant(["hear 東"])).to_tensor().numpy()
    assert (loaded.encode(tf.constant(["hear 東"])).numpy() == expected).all()


@pytest.mark.parametrize("content,message", [
    ("not json", "not a JSON character vocabulary"),
    ('["a", "b"]', "a list starting with"),
    ('["<pad>", "<unk>", "<|endoftext|>", "ab"]', "single characters, got 'ab'"),
    ('["<pad>", "<unk>", "<|endoftext|>", "a", "a"]', "listed twice"),
])
def test_a_damaged_vocabulary_file_is_named(tmp_path, content, message):
    path = tmp_path / "chars.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError) as error:
        read_char_vocab(path)
    assert str(path) in str(error.value) and message in str(error.value)
