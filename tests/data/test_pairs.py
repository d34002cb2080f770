"""Parallel-corpus reader, held-out split and the bucketed translation dataset (tiny corpora)."""
import collections
import gzip

import numpy as np
import pytest
import tensorflow as tf

from kerasplm.data import (group_references, make_translation_dataset, read_parallel_tsv,
                           sample_path, train_dev_split)
from kerasplm.text import WordPieceTokenizer, build_wordpiece_vocab
from tests.text.legacy_ids import old_translator_ids

START, END = 2, 3                                         # the translator vocabulary's ids
WORDS = "el la un gato perro casa libro come bebe agua leche the a cat dog house book eats drinks".split()


def _corpus(n=120, seed=0):
    rng = np.random.default_rng(seed)
    src = [" ".join(rng.choice(WORDS, size=rng.integers(1, 12))) + "." for _ in range(n)]
    tgt = [" ".join(rng.choice(WORDS, size=rng.integers(1, 12))) + "!" for _ in range(n)]
    return src, tgt


@pytest.fixture(scope="module")
def tok():
    return WordPieceTokenizer(build_wordpiece_vocab(WORDS + [".", "!"], vocab_size=100,
                                                    learn_params=dict(lower_thresh=1)))


def _write(path, data):
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


# --- reader -----------------------------------------------------------------------------------

def test_reader_reads_columns_and_skips_blank_lines(tmp_path):
    p = _write(tmp_path / "c.tsv", "Go.\tVe.\n\nHi.\tHola.\r\n   \nRun!\t¡Corre!\tx\n")
    assert read_parallel_tsv(p) == (["Ve.", "Hola.", "¡Corre!"], ["Go.", "Hi.", "Run!"])
    assert read_parallel_tsv(p, src_col=0, tgt_col=1, max_pairs=2) == (["Go.", "Hi."],
                                                                        ["Ve.", "Hola."])


def test_reader_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.tsv"):
        read_parallel_tsv(tmp_path / "nope.tsv")


@pytest.mark.parametrize("content", ["", "\n \n\n"])
def test_reader_empty_file(tmp_path, content):
    p = _write(tmp_path / "empty.tsv", content)
    with pytest.raises(ValueError, match=r"empty\.tsv is empty"):
        read_parallel_tsv(p)


def test_reader_missing_column_names_file_and_line(tmp_path):
    lines = ["a\tb"] * 6 + ["only one"] + ["c\td"]
    p = _write(tmp_path / "short.tsv", "\n".join(lines) + "\n")
    with pytest.raises(ValueError) as e:
        read_parallel_tsv(p)
    assert "short.tsv" in str(e.value)
    assert "line 7 has 1 column(s); --src-col 1 needs at least 2" in str(e.value)
    with pytest.raises(ValueError, match="line 1 has 2 column"):
        read_parallel_tsv(p, src_col=0, tgt_col=2)


def test_reader_invalid_utf8_names_line(tmp_path):
    p = _write(tmp_path / "bad.tsv", b"a\tb\n" * 11 + b"ok\t\xff\xfe\n")
    with pytest.raises(ValueError, match=r"bad\.tsv: line 12 is not valid UTF-8"):
        read_parallel_tsv(p)


def test_reader_empty_sentence(tmp_path):
    p = _write(tmp_path / "e.tsv", "a\tb\nc\t \n")
    with pytest.raises(ValueError, match="line 2 has an empty sentence"):
        read_parallel_tsv(p)


def test_reader_reads_gzip_and_names_a_damaged_one(tmp_path):
    p = _write(tmp_path / "c.tsv.gz", gzip.compress("Go.\tVe.\nHi.\tHola.\n".encode("utf-8")))
    assert read_parallel_tsv(p) == (["Ve.", "Hola."], ["Go.", "Hi."])
    bad = _write(tmp_path / "bad.tsv.gz", b"Go.\tVe.\n")
    with pytest.raises(ValueError, match=r"bad\.tsv\.gz: not a valid gzip file"):
        read_parallel_tsv(bad)


# --- split ------------------------------------------------------------------------------------

def test_split_is_deterministic_and_disjoint_by_source():
    src = [f"s{i % 40}" for i in range(100)]               # 40 sources, several translations
    tgt = [f"t{i}" for i in range(100)]
    src += src[:5]
    tgt += tgt[:5]                                          # exact duplicates are dropped
    a = train_dev_split(src, tgt, dev_size=8, seed=3)
    assert a == train_dev_split(src, tgt, dev_size=8, seed=3)
    assert a != train_dev_split(src, tgt, dev_size=8, seed=4)
    assert not set(a.train_src) & set(a.dev_src)
    assert len(set(a.dev_src)) == 8
    assert len(a.train_src) + len(a.dev_src) == 100
    assert set(zip(a.train_src, a.train_tgt)) | set(zip(a.dev_src, a.dev_tgt)) == set(zip(src, tgt))
    sources, refs = group_references(a.dev_src, a.dev_tgt)
    assert len(sources) == 8 and sum(map(len, refs)) == len(a.dev_tgt)
    assert all(len(r) >= 2 for r in refs)                  # every source has 2-3 translations
    b = train_dev_split(src, tgt, dev_fraction=0.1)
    assert len(set(b.dev_src)) == 4


def test_split_rejects_bad_sizes():
    with pytest.raises(ValueError, match="dev_size"):
        train_dev_split(["a", "b"], ["x", "y"], dev_size=2)
    with pytest.raises(ValueError, match="differ in length"):
        train_dev_split(["a"], [], dev_size=1)


# --- dataset ----------------------------------------------------------------------------------

def _batches(ds):
    return [(s.numpy(), ti.numpy(), to.numpy()) for (s, ti), to in ds]


def test_dataset_shapes_dtypes_padding_and_shift(tok):
    src, tgt = _corpus()
    ds = make_translation_dataset(src, tgt, tok, tok, batch_size=16, max_length=16,
                                  bucket_lengths=(8, 16))
    (s_spec, ti_spec), to_spec = ds.element_spec
    assert s_spec.dtype == ti_spec.dtype == to_spec.dtype == tf.int64
    batches = _batches(ds)
    assert sum(len(s) for s, _, _ in batches) == len(src)  # nothing is long: all pairs kept
    seq_shapes = {(s.shape[1], ti.shape[1]) for s, ti, _ in batches}
    assert seq_shapes <= {(8, 7), (16, 15)}                 # <= number of buckets
    for s, ti, to in batches:
        assert len(s) == len(ti) == len(to) and len(s) <= 16
        assert (s[:, 0] == START).all() and (ti[:, 0] == START).all()
        full_tgt = np.concatenate([ti, to[:, -1:]], axis=1)  # tgt_in / tgt_out are one-step shifts
        assert (full_tgt[:, 1:] == to).all()
        for row in np.concatenate([s, full_tgt]):
            end = list(row).index(END)
            assert (row[end + 1:] == 0).all() and (row[:end] != 0).all()


def test_dataset_content_matches_tokenizer(tok):
    src, tgt = _corpus(30)
    ds = make_translation_dataset(src, tgt, tok, tok, batch_size=64, shuffle=False)
    got = {tok.detokenize(tf.constant(s)).numpy()[i]: tok.detokenize(tf.constant(to)).numpy()[i]
           for s, _, to in _batches(ds) for i in range(len(s))}
    expected = dict(zip(tok.detokenize(tok.tokenize(tf.constant(src))).numpy(),
                        tok.detokenize(tok.tokenize(tf.constant(tgt))).numpy()))
    assert got == expected


def _rows(batch):
    return [[int(x) for x in row if x != 0] for row in batch]


@pytest.mark.parametrize("drop_long", [True, False])
def test_dataset_ids_equal_the_old_behaviour(tok, drop_long):
    """Existing run directories must train on exactly the ids they had before preprocessors existed."""
    src, tgt = _corpus(40, seed=3)
    src[5], tgt[7] = " ".join(["gato"] * 20), " ".join(["cat"] * 20) + "!"      # longer than max_length
    got = sorted((tuple(s), tuple(ti[:1] + to)) for bs, bti, bto in _batches(make_translation_dataset(
        src, tgt, tok, tok, batch_size=8, max_length=12, bucket_lengths=(8, 12), shuffle=False,
        drop_long=drop_long)) for s, ti, to in zip(_rows(bs), _rows(bti), _rows(bto)))
    old_src = old_translator_ids(tok.vocab, src, None if drop_long else 12)
    old_tgt = old_translator_ids(tok.vocab, tgt, None if drop_long else 12)
    expected = sorted((tuple(s), tuple(t)) for s, t in zip(old_src, old_tgt) if len(s) <= 12 and len(t) <= 12)
    assert got == expected and (len(got) < 40 if drop_long else len(got) == 40)


def test_drop_vs_trim_long_pairs(tok):
    src = ["el gato come."] * 3 + [" ".join(["gato"] * 30)]
    tgt = ["the cat eats."] * 3 + ["the cat."]
    kept = _batches(make_translation_dataset(src, tgt, tok, tok, batch_size=8, max_length=10))
    assert sum(len(s) for s, _, _ in kept) == 3
    trimmed = _batches(make_translation_dataset(src, tgt, tok, tok, batch_size=8, max_length=10,
                                                drop_long=False, shuffle=False))
    rows = [r for s, _, _ in trimmed for r in s]
    assert len(rows) == 4
    longest = max(rows, key=lambda r: (r != 0).sum())
    assert (longest != 0).sum() == 10 and longest[9] == END


def test_same_batches_on_reiteration_and_rebuild(tok):
    src, tgt = _corpus(100, seed=1)
    kw = dict(batch_size=8, max_length=16, bucket_lengths=(8, 16), seed=7)
    ds = make_translation_dataset(src, tgt, tok, tok, **kw)
    first, second = _batches(ds), _batches(ds)
    rebuilt = _batches(make_translation_dataset(src, tgt, tok, tok, **kw))
    other_seed = _batches(make_translation_dataset(src, tgt, tok, tok, **{**kw, "seed": 8}))
    same = lambda x, y: len(x) == len(y) and all(
        all(np.array_equal(u, v) for u, v in zip(bx, by)) for bx, by in zip(x, y))
    assert same(first, second) and same(first, rebuilt)
    assert not same(first, other_seed)


def test_repeat_gives_a_new_deterministic_order_each_epoch(tok):
    src, tgt = _corpus(40, seed=2)
    kw = dict(batch_size=40, max_length=16, bucket_lengths=(16,), repeat=True)
    ds = make_translation_dataset(src, tgt, tok, tok, **kw)
    e1, e2 = [s for (s, _), _ in ds.take(2).as_numpy_iterator()]
    assert sorted(map(bytes, e1)) == sorted(map(bytes, e2))   # same pairs ...
    assert not np.array_equal(e1, e2)                         # ... in a new order
    again = [s for (s, _), _ in make_translation_dataset(src, tgt, tok, tok, **kw)
             .take(2).as_numpy_iterator()]
    assert np.array_equal(again[0], e1) and np.array_equal(again[1], e2)


def test_dataset_rejects_bad_arguments(tok):
    with pytest.raises(ValueError, match="differ in length"):
        make_translation_dataset(["a"], [], tok, tok)
    with pytest.raises(ValueError, match="bucket_lengths"):
        make_translation_dataset(["a"], ["b"], tok, tok, max_length=40, bucket_lengths=(8, 16))
    with pytest.raises(ValueError, match="longer than max_length"):
        make_translation_dataset(["gato " * 20], ["cat " * 20], tok, tok, max_length=5,
                                 bucket_lengths=(5,))


# --- bundled sample ---------------------------------------------------------------------------

def test_bundled_sample():
    spa, eng = read_parallel_tsv(sample_path("spa-eng-train.tsv"))
    dev_spa, dev_eng = read_parallel_tsv(sample_path("spa-eng-dev.tsv"))
    assert len(spa) == 20000 and len(set(dev_spa)) == 500
    assert not set(spa) & set(dev_spa)
    assert max(len(s.split()) for s in spa + dev_spa) <= 8
    assert collections.Counter(zip(spa, eng)).most_common(1)[0][1] == 1
    all_spa, all_eng = read_parallel_tsv(sample_path("spa-eng-all-train.tsv.gz"))  # the whole corpus, less dev
    assert len(all_spa) == 115703 and not set(all_spa) & set(dev_spa)
    assert set(zip(spa, eng)) <= set(zip(all_spa, all_eng))
    assert collections.Counter(zip(all_spa, all_eng)).most_common(1)[0][1] == 1
    with open(sample_path("LICENSE-tatoeba.txt"), encoding="utf-8") as f:
        text = f.read()
    assert "CC-BY 2.0 FR" in text and "tatoeba.org" in text and "manythings.org/anki" in text
    assert "115703 distinct pairs" in text
    with pytest.raises(ValueError, match="unknown sample file"):
        sample_path("nope.tsv")
