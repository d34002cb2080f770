"""The BERT tagger tests' toy: a tiny BERT token classifier (VOCAB, TINY, five TAGS) and hand-made CoNLL sentences
with a writer of the shared CoNLL files' layout. Used by the tagger's, tagger job's and tagger export's tests, the
fixtures of tests/models/bert/fixtures.py, tests/export/tiny_exports.py and the distillation tests."""
import keras

from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.models.bert.tagger import BertTokenClassifier

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "johan", "##son", "lives", "in", "new", "york", "1996",
         "-", "08", "30", "."]
TINY = dict(vocab_size=len(VOCAB), num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32,
            max_positions=16)
TAGS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
SENTENCES = [
    [("Johanson", "I-PER"), ("lives", "O"), ("in", "O"), ("New", "I-LOC"), ("York", "I-LOC"), (".", "O")],
    [("New", "I-LOC"), ("York", "I-LOC"), ("lives", "O"), ("in", "O"), ("1996-08-30", "O")],
    [("Johanson", "I-PER"), ("in", "O"), ("New", "I-LOC"), ("York", "I-LOC")],
]


def tiny_tagger(**overrides):
    keras.utils.set_random_seed(0)
    return BertTokenClassifier(BertBackbone(**TINY), num_labels=5, **overrides)


def write_conll(path, sentences):
    lines = [line for s in sentences for line in [f"{w} NNP I-NP {t}" for w, t in s] + [""]]
    path.write_text("\n".join(lines) + "\n-DOCSTART- -X- O O")       # the shared files' layout
    return str(path)
