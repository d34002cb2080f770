"""GPT-2 BPE helpers for tests and benchmarks: a small GPT-2-format vocabulary (``vocab.json`` + ``merges.txt``)
trained with Hugging Face ``tokenizers`` on generated text, and GPT-2's algorithm in plain Python."""
import random

import regex

from kerasplm.text.bpe import GPT2_SPLIT_PATTERN, byte_alphabet

WORDS = ("the quick brown fox jumps over lazy dog I'll don't it's we're they've you'd she'll can't isn't "
         "Hello World naïve café résumé Ærøskøbing Straße Привет мир пример 中文 字符 日本語 한국어 "
         "hello world tokenizer byte pair encoding").split()
EXTRAS = ["123", "2024", "3.14", "!!!", "...", "?!", "--", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷",
          "\t", "\n", "  ", "\n\n"]


def generated_corpus(lines=400, seed=0):
    """``lines`` sentences of the words above with digits, punctuation, emoji and whitespace runs."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS + EXTRAS) for _ in range(rng.randint(3, 15))) for _ in range(lines)]


def train_gpt2_vocab(directory, vocab_size=600, seed=0, texts=None):
    """Trains a byte-level BPE (GPT-2's scheme, ``<|endoftext|>`` included) on ``texts`` (default: the
    generated corpus) and saves ``vocab.json`` and ``merges.txt`` in ``directory``; returns it as a str."""
    from tokenizers import ByteLevelBPETokenizer  # noqa: PLC0415

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(texts or generated_corpus(seed=seed), vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tokenizer.save_model(str(directory))
    return str(directory)


def read_merge_ranks(merges_path):
    """{(left, right): rank} of a ``merges.txt`` with its ``#version`` line."""
    with open(merges_path, encoding="utf-8") as f:
        return {tuple(line.split()): i for i, line in enumerate(f.read().splitlines()[1:])}


def gpt2_reference_ids(text, vocab, ranks):
    """GPT-2's algorithm (Radford et al. 2019, section 2.2) in plain Python: regex pieces, bytes -> symbols,
    then in each piece merge the lowest-ranked pair (every occurrence, left to right) until none ranks."""
    alphabet, ids = byte_alphabet(), []
    for piece in regex.findall(GPT2_SPLIT_PATTERN, text):
        word = [alphabet[b] for b in piece.encode("utf-8")]
        while len(word) > 1:
            pair = min(zip(word, word[1:]), key=lambda p: ranks.get(p, float("inf")))
            if pair not in ranks:
                break
            merged, i = [], 0
            while i < len(word):
                if word[i:i + 2] == list(pair):
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        ids += [vocab[symbol] for symbol in word]
    return ids
