"""A small GPT-2-format vocabulary (``vocab.json`` + ``merges.txt``) trained with Hugging Face ``tokenizers``
on generated text, for the BPE tokenizer's tests and the GPT-2 conversion test."""
import random

WORDS = ("the quick brown fox jumps over lazy dog I'll don't it's we're they've you'd she'll can't isn't "
         "Hello World naïve café résumé Ærøskøbing Straße Привет мир пример 中文 字符 日本語 한국어 "
         "hello world tokenizer byte pair encoding").split()
EXTRAS = ["123", "2024", "3.14", "!!!", "...", "?!", "--", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷",
          "\t", "\n", "  ", "\n\n"]


def generated_corpus(lines=400, seed=0):
    """``lines`` sentences of the words above with digits, punctuation, emoji and whitespace runs."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS + EXTRAS) for _ in range(rng.randint(3, 15))) for _ in range(lines)]


def train_gpt2_vocab(directory, vocab_size=600, seed=0):
    """Trains a byte-level BPE (GPT-2's scheme, ``<|endoftext|>`` included) and saves ``vocab.json`` and
    ``merges.txt`` in ``directory``; returns ``directory`` as a str."""
    from tokenizers import ByteLevelBPETokenizer  # noqa: PLC0415

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(generated_corpus(seed=seed), vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tokenizer.save_model(str(directory))
    return str(directory)
