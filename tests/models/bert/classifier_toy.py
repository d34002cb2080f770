"""The BERT classifier tests' toy: sentences whose sentiment label is that of the sentiment words they hold, a TSV
writer, and a tiny random BERT (VOCAB, TINY) converted into a run. Used by the classifier job's tests and their
fixtures (tests/models/bert/fixtures.py), and by other families' tests that fine-tune on the same task (GPT's
classifier, sentence embeddings, distillation, multi-worker training)."""
import os
import random

import keras

from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.convert import convert_bert_to_run, save_tf_bert
from kerasplm.text import write_vocab

POSITIVE, NEGATIVE = ["good", "great", "fine", "nice"], ["bad", "awful", "poor", "sad"]
FILLER = ["the", "movie", "film", "was", "is", "a", "plot", "very"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "!", *POSITIVE, *NEGATIVE, *FILLER, "##s"]
TINY = dict(vocab_size=len(VOCAB), num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64, max_positions=32)
NAMES = ["negative", "positive"]


def make_tiny_bert_run(directory):
    """A random tiny BERT written in Google's layout and converted: a run like `kerasplm convert bert` makes."""
    source = os.path.join(directory, "google")
    keras.utils.set_random_seed(0)
    save_tf_bert(BertBackbone(**TINY), source)
    write_vocab(VOCAB, os.path.join(source, "vocab.txt"))
    return convert_bert_to_run(source, os.path.join(directory, "run")).path


def toy_examples(n, seed, pair=False):
    """Sentences whose label is that of the sentiment words they hold (pairs: the label is that of the second text)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randrange(2)
        words = rng.sample(POSITIVE if label else NEGATIVE, 3) + rng.sample(FILLER, 1)
        rng.shuffle(words)
        text = " ".join(words) + rng.choice([" .", " !", ""])
        rows.append((" ".join(rng.sample(FILLER, 2)), text, label) if pair else (text, label))
    return rows


def write_tsv(path, rows, header):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\t".join(header) + "\n")
        for row in rows:
            f.write("\t".join(str(x) for x in row) + "\n")
    return str(path)


def learned_options(toy):
    """The options of the ``learned_run`` fixture: 30 steps on the toy task under a schedule planned over 48."""
    return dict(schedule_steps=48, train=toy["train"], dev=toy["dev"], init=toy["init"], learning_rate=2e-3,
                batch_size=16, max_length=12, dropout=0.0, verbose=0, seed=1)
