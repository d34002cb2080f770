"""BERT pretraining data: corpus reading, NSP/SOP instances, in-graph masking statistics and determinism."""
import math

import numpy as np
import pytest
import tensorflow as tf

from kerasplm.data.pretraining import (BERT_SPECIAL_TOKENS, FEATURES, create_instances, make_pretraining_dataset,
                                       masker_for_tokenizer, read_documents, tokenize_documents)
from kerasplm.text import WordPieceTokenizer

WORDS = [f"w{i}" for i in range(150)]
TAGS = [f"d{i}" for i in range(40)] + [f"s{i}" for i in range(60)]
VOCAB = list(BERT_SPECIAL_TOKENS) + WORDS + TAGS + ["##x", "##y", "##z"]


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer(VOCAB)


def tagged_documents(num_documents=12, sentences=30, seed=0):
    """Each sentence starts with its document and index tags ("d3 s7 ..."); some words have 2-3 pieces."""
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(num_documents):
        doc = []
        for s in range(sentences):
            words = [WORDS[i] + "".join(rng.choice(["", "x", "xy", "zz"], p=[.55, .2, .15, .1]))
                     for i in rng.integers(len(WORDS), size=rng.integers(2, 6))]
            doc.append(" ".join([f"d{d}", f"s{s}", *words]))
        docs.append(doc)
    return docs


def batches(ds, n):
    return [{k: v.numpy() for k, v in b.items()} for b in ds.take(n)]


def original_ids(batch):
    """The unmasked ids: masked_ids scattered back at masked_positions."""
    ids = batch["token_ids"].copy()
    for row in range(len(ids)):
        real = batch["masked_weights"][row] > 0
        ids[row, batch["masked_positions"][row][real]] = batch["masked_ids"][row][real]
    return ids


def test_read_documents_formats_and_errors(tmp_path):
    lines = tmp_path / "corpus.txt"
    lines.write_text("First sentence.\nSecond one.\n\n\nOther document.\n", encoding="utf-8")
    assert read_documents(lines) == [["First sentence.", "Second one."], ["Other document."]]
    wiki = tmp_path / "wiki.valid.tokens"
    wiki.write_text(" \n = Alpha = \n \n Alpha is a thing . It is big . \n = = History = = \n Then it ended . \n"
                    " = Beta = \n Beta too ? Yes ! \n", encoding="utf-8")
    assert read_documents(wiki) == [["Alpha is a thing .", "It is big .", "Then it ended ."], ["Beta too ?", "Yes !"]]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nbroken \xff here\n")
    with pytest.raises(ValueError, match="bad.txt: line 2 is not valid UTF-8"):
        read_documents(bad)
    with pytest.raises(FileNotFoundError, match="corpus not found"):
        read_documents(tmp_path / "missing.txt")


def _tags(ids):
    """[(doc, sentence)] of the sentences in a segment's ids, read from their tags."""
    tokens = [VOCAB[i] for i in ids]
    return [(int(d[1:]), int(s[1:])) for d, s in zip(tokens, tokens[1:]) if d.startswith("d") and s.startswith("s")]


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_sentence_pair_labels(tokenizer, task):
    docs = tokenize_documents(tagged_documents(30, 30), tokenizer)
    inst = create_instances(docs, max_seq_length=96, sentence_task=task, short_seq_prob=0.0, seed=3)
    fair = []
    for a_ids, b_ids, label in zip(inst.a_ids, inst.b_ids, inst.labels):
        a, b = _tags(a_ids), _tags(b_ids)
        assert a and b
        if task == "sop":  # always one document, consecutive; swapped when label 1
            first, second = (b, a) if label else (a, b)
            assert first[-1][0] == second[0][0] and first[-1][1] + 1 == second[0][1]
            fair.append(label)
        elif label == 0:  # B is A's actual continuation
            assert a[-1][0] == b[0][0] and a[-1][1] + 1 == b[0][1]
        else:  # B is a stretch of another document
            assert {d for d, _ in b} == {b[0][0]} and b[0][0] != a[0][0]
        if task == "nsp" and len(a) >= 2:  # the chunk had >= 3 sentences: the label was a fair coin
            fair.append(label)
    n = len(fair)
    assert n > 50
    assert abs(np.mean(fair) - 0.5) <= 4 * math.sqrt(0.25 / n)


def test_nsp_off_fills_one_segment(tokenizer):
    docs = tokenize_documents(tagged_documents(4), tokenizer)
    inst = create_instances(docs, max_seq_length=48, sentence_task="none", short_seq_prob=0.0)
    assert all(len(b) == 0 for b in inst.b_ids) and (inst.labels == 0).all()
    lengths = np.array([len(a) for a in inst.a_ids])
    assert (lengths >= 46).mean() > 0.5                    # most instances fill [CLS] A [SEP]
    for a_ids in inst.a_ids:                              # consecutive sentences of one document
        tags = _tags(a_ids)
        assert len({d for d, _ in tags}) == 1 and all(y == x + 1 for (_, x), (_, y) in zip(tags, tags[1:]))
    with pytest.raises(ValueError, match="at least 2 documents"):
        create_instances(docs[:1], 48, "nsp")


def test_masking_rate_proportions_and_specials(tokenizer):
    """Each row masks exactly min(cap, ceil(15% of its maskable pieces)); the 80/10/10 split and the per-position
    rate are within 4 binomial standard deviations; [CLS]/[SEP]/[PAD] are never chosen."""
    rng = np.random.default_rng(0)
    n, length = 400, 40
    docs = [[(rng.integers(5, len(VOCAB), size=length).astype(np.int32), np.ones(length, bool))] for _ in range(n)]
    inst = create_instances(docs, max_seq_length=length + 2, sentence_task="none", short_seq_prob=0.0)
    masker = masker_for_tokenizer(tokenizer, max_seq_length=48, max_predictions_per_seq=20)
    batch = batches(make_pretraining_dataset(inst, masker, n, shuffle=False, repeat=False), 1)[0]
    weights = batch["masked_weights"]
    assert (weights.sum(axis=1) == math.ceil(0.15 * length)).all()
    ids = original_ids(batch)
    chosen = batch["masked_positions"][weights > 0]
    assert chosen.min() >= 1 and chosen.max() <= length            # never [CLS] (0), [SEP] (41) or [PAD]
    total = len(chosen)
    counts = np.bincount(chosen, minlength=length + 1)[1:]
    p = math.ceil(0.15 * length) / length
    assert np.all(np.abs(counts - n * p) <= 4.5 * math.sqrt(n * p * (1 - p)))
    rows = np.repeat(np.arange(n), weights.sum(axis=1).astype(int))
    replaced = batch["token_ids"][rows, chosen]
    originals = ids[rows, chosen]
    v = len(VOCAB)
    mask_id = tokenizer.token_to_id("[MASK]")
    for observed, prob in (((replaced == mask_id).sum(), 0.8 + 0.1 / v), ((replaced == originals).sum(), 0.1 + 0.1 / v)):
        assert abs(observed - total * prob) <= 4 * math.sqrt(total * prob * (1 - prob)), (observed, total * prob)


@pytest.mark.parametrize("masking", ["whole_word", "ngram", "span"])
def test_specials_cap_and_whole_units(tokenizer, masking):
    """[CLS]/[SEP]/[PAD] never chosen; at most the cap of pieces;
    a word (``##`` pieces), an n-gram and a given span are masked whole or not at all."""
    raw = tagged_documents(6, seed=masking == "span")
    separator = "|" if masking == "span" else None
    if masking == "span":  # the tags of each sentence and its first two words are one given span
        raw = [[" ".join(s.split()[:4]) + " | " + " ".join(s.split()[4:]) for s in doc] for doc in raw]
    docs = tokenize_documents(raw, tokenizer, span_separator=separator)
    inst = create_instances(docs, max_seq_length=64, sentence_task="nsp", seed=2)
    cap = 6
    masker = masker_for_tokenizer(tokenizer, max_seq_length=64, max_predictions_per_seq=cap, masking=masking)
    rows = [masker.mask_pair(a, sa, b, sb, tf.constant([7, i], tf.int64))        # the traced per-instance masker
            for i, (a, sa, b, sb) in enumerate(zip(inst.a_ids, inst.a_starts, inst.b_ids, inst.b_starts))]
    batch = {k: np.stack([r[k].numpy() for r in rows]) for k in rows[0]}
    ids = original_ids(batch)
    real = batch["masked_weights"] > 0
    specials = [tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")]
    assert not np.isin(ids[np.nonzero(real)[0], batch["masked_positions"][real]], specials).any()
    assert (batch["token_ids"][:, 0] == specials[0]).all()
    assert real.sum(axis=1).max() <= cap and real.sum() > 0
    words = [t.startswith("##") for t in VOCAB]
    spans = 0
    for row in range(len(ids)):
        masked = np.zeros(64, bool)
        masked[batch["masked_positions"][row][batch["masked_weights"][row] > 0]] = True
        n = int(batch["padding_mask"][row].sum())
        word_id = np.cumsum([not words[i] for i in ids[row][:n]])
        for w in np.unique(word_id):          # every word is masked whole or not at all
            assert len(set(masked[:n][word_id == w])) == 1
        if masking == "span":                  # a given span ("dN sM wA wB") is masked whole or not at all
            tokens = [VOCAB[i] for i in ids[row][:n]]
            for start in [i for i, t in enumerate(tokens) if t.startswith("d") and tokens[i + 1].startswith("s")]:
                end, words_seen = start, 0
                while end < n and tokens[end] != "[SEP]":
                    if not tokens[end].startswith("##"):
                        if words_seen == 4:
                            break
                        words_seen += 1
                    end += 1
                piece = masked[start:end]
                spans += piece.any()
                assert len(set(piece)) == 1, (tokens[start:end], piece)
        spans += (np.diff(masked.astype(int)) == 1).sum() if masking != "span" else 0
    assert spans > 0


def test_deterministic_static_dynamic_and_resume(tokenizer):
    docs = tokenize_documents(tagged_documents(4, 8), tokenizer)
    inst = create_instances(docs, max_seq_length=32, seed=5)
    inst_again = create_instances(docs, max_seq_length=32, seed=5)
    assert len(inst) >= 8
    assert all(np.array_equal(x, y) for x, y in zip(inst.a_ids, inst_again.a_ids))
    masker = masker_for_tokenizer(tokenizer, max_seq_length=32, max_predictions_per_seq=5)
    n = len(inst)

    def two_epochs(seed, dynamic, shuffle):
        ds = make_pretraining_dataset(inst, masker, n, seed=seed, dynamic_masking=dynamic, shuffle=shuffle)
        return ds, batches(ds, 2)

    def rows(batch):  # the instances of a batch as a sorted list, whatever their order
        return sorted(tuple(np.concatenate([np.ravel(batch[k][i]) for k in FEATURES])) for i in range(n))

    dynamic_ds, dynamic = two_epochs(0, True, shuffle=False)
    _, again = two_epochs(0, True, shuffle=False)
    for key in FEATURES:                                                        # same seed, same batches
        assert all(np.array_equal(x[key], y[key]) for x, y in zip(dynamic, again))
    assert not np.array_equal(dynamic[0]["token_ids"], dynamic[1]["token_ids"])    # re-drawn each epoch
    assert np.array_equal(original_ids(dynamic[0]), original_ids(dynamic[1]))
    _, static = two_epochs(0, False, shuffle=False)
    assert all(np.array_equal(static[0][k], static[1][k]) for k in FEATURES)      # drawn once
    # Shuffled static epochs: a new order each epoch, each instance with its own fixed mask; another seed
    # draws other masks.
    _, shuffled = two_epochs(1, False, shuffle=True)
    assert not np.array_equal(shuffled[0]["next_sentence_label"], shuffled[1]["next_sentence_label"]) or \
        not np.array_equal(shuffled[0]["token_ids"], shuffled[1]["token_ids"])
    assert rows(shuffled[0]) == rows(shuffled[1]) and rows(shuffled[0]) != rows(static[0])
    # A resume skips the consumed batches and sees exactly the rest.
    resumed = batches(dynamic_ds.skip(1), 1)
    for key in FEATURES:
        assert np.array_equal(dynamic[1][key], resumed[0][key])
