"""The tiny BERT of the multiple-choice tests (a 14-piece cat-and-dog vocabulary, one block of width 16): VOCAB and
TINY. The sentence-embedding models' tests build their backbones from it too."""
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "dog", "sat", "ran", "on", "mat", "away", "."]
TINY = dict(vocab_size=len(VOCAB), num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32, max_positions=16)
