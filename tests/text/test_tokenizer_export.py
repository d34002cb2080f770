"""Every tokenizer's id-taking graph functions (``detokenize``; WordPiece's ``lookup`` too) take dense or ragged ids
once exported, although a tokenizer traces them only when a SavedModel is written, not when it is made."""
import os

import pytest
import tensorflow as tf

from kerasplm.text import SentencePieceTokenizer, train_sentencepiece
from kerasplm.text.char_vocab import CharacterTokenizer, build_char_vocab
from kerasplm.text.wordpiece import WordPieceTokenizer, build_wordpiece_vocab

TEXTS = ["the cat sat on the mat.", "a dog barked at the cat", "the mat was red and the dog was brown"]


def _wordpiece(tmp_path):
    return WordPieceTokenizer(build_wordpiece_vocab(TEXTS * 5, vocab_size=120))


def _characters(tmp_path):
    return CharacterTokenizer(build_char_vocab(" ".join(TEXTS)))


def _sentencepiece(tmp_path):
    prefix = str(tmp_path / "spm")
    train_sentencepiece(TEXTS * 20, vocab_size=40, model_prefix=prefix, seed=1, byte_fallback=False)
    return SentencePieceTokenizer(prefix + ".model")


def _byte_pairs(tmp_path):
    pytest.importorskip("tokenizers")
    pytest.importorskip("regex")
    from kerasplm.text.bpe import BytePairTokenizer  # noqa: PLC0415
    from tests.text.bpe_vocab import train_gpt2_vocab  # noqa: PLC0415
    (tmp_path / "bpe").mkdir()
    directory = train_gpt2_vocab(tmp_path / "bpe", vocab_size=300, texts=TEXTS * 20)
    return BytePairTokenizer(os.path.join(directory, "vocab.json"), os.path.join(directory, "merges.txt"))


@pytest.mark.parametrize("make", [_wordpiece, _characters, _sentencepiece, _byte_pairs],
                         ids=["wordpiece", "characters", "sentencepiece", "byte_pairs"])
def test_a_fresh_tokenizer_exports_its_id_functions_for_dense_and_ragged_ids(make, tmp_path):
    tokenizer = make(tmp_path)
    names = tokenizer.id_functions
    assert "detokenize" in names
    # Nothing traced yet: making a tokenizer (every load_run does) pays for no graph.
    assert all(not getattr(tokenizer, name).experimental_get_tracing_count() for name in names)
    tf.saved_model.save(tokenizer, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    ragged = tokenizer.tokenize(tf.constant(TEXTS))
    for name in names:
        for ids in (ragged, ragged.to_tensor()):
            got, expected = getattr(loaded, name)(ids), getattr(tokenizer, name)(ids)
            assert _as_list(got) == _as_list(expected), (name, type(ids).__name__)
    assert loaded.detokenize(ragged).numpy()[0].decode().strip().startswith("the")


def _as_list(tensor):
    return tensor.to_list() if isinstance(tensor, tf.RaggedTensor) else tensor.numpy().tolist()
