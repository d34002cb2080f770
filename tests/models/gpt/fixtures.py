"""GPT fixtures shared by several test files; tests/conftest.py loads this module for the whole suite
(``pytest_plugins``), so a test asks for them by name and imports nothing from another test file.

Module-scoped (each module that asks builds its own): ``data`` (the BERT classifier toy's sentiment task as TSV
files, and two random ``gpt_tiny`` runs: SentencePiece and GPT-2's BPE; the GPT classifier's and legacy-run tests).

Every pytest process loads this module at startup, the xdist controller too, which runs no test: so nothing heavy is
imported at the top; the fixture imports what it needs when it is built."""
import os

import pytest


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from kerasplm.models.gpt.convert import BPE_ASSETS
    from kerasplm.text.sentencepiece import train_sentencepiece
    from tests.models.bert.classifier_toy import FILLER, NAMES, NEGATIVE, POSITIVE, toy_examples, write_tsv
    from tests.models.gpt.toys import write_gpt_run
    from tests.text.bpe_vocab import train_gpt2_vocab

    root = tmp_path_factory.mktemp("gpt_ft")
    examples = toy_examples(256, 0)
    texts = [text for text, _ in examples] + [" ".join(POSITIVE + NEGATIVE + FILLER)]
    train_sentencepiece(texts, vocab_size=300, model_prefix=str(root / "spm"))
    (root / "bpe").mkdir()
    bpe = train_gpt2_vocab(root / "bpe", vocab_size=300, texts=texts)
    return {"root": root, "init": write_gpt_run(root / "gpt", {"spm_model": str(root / "spm.model")}, 300),
            "init_bpe": write_gpt_run(root / "gpt2", {key: os.path.join(bpe, name) for key, name in BPE_ASSETS.items()},
                                      300),
            "train": write_tsv(root / "train.tsv", [(text, NAMES[label]) for text, label in examples],
                               ["sentence", "label"]),
            "dev": write_tsv(root / "dev.tsv", [(t, NAMES[y]) for t, y in toy_examples(64, 1)], ["sentence", "label"]),
            "pairs": write_tsv(root / "pairs.tsv", toy_examples(64, 2, pair=True), ["a", "b", "label"])}
