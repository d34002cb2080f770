"""The real corpus the quality comparison uses (../shared/data; skipped where a clone lacks it)."""
from kerasplm.data import group_references, read_parallel_tsv
from kerasplm.models.translator.job import TranslatorOptions, _prepare_data


def test_full_tatoeba_reads_and_splits_by_source(shared_data):
    path = str(shared_data / "tatoeba_spa_eng" / "spa-eng.tsv")
    src, tgt = read_parallel_tsv(path, src_col=1, tgt_col=0)
    assert len(src) == 116_230
    assert src[0] == "Ve." and tgt[0] == "Go."
    options = TranslatorOptions(data=path, src_col=1, tgt_col=0, dev_size=1000, seed=0)
    (train_src, _), _, (dev_sources, dev_refs) = _prepare_data(options)
    assert len(dev_sources) == 1000 and all(refs for refs in dev_refs)
    assert not set(dev_sources) & set(train_src)          # honest held-out BLEU
    # Deterministic: the seed baseline and kerasplm's run score the same sentences.
    assert _prepare_data(options)[2] == (dev_sources, dev_refs)
    assert group_references(["a", "a", "b"], ["x", "y", "z"]) == (["a", "b"], [["x", "y"], ["z"]])


def test_make_sample_regenerates_the_bundled_files_exactly(shared_data, tmp_path):
    from kerasplm.data import SAMPLE_FILES, make_sample, sample_path

    make_sample.main(["--input", str(shared_data / "tatoeba_spa_eng" / "spa-eng.tsv"), "--out-dir", str(tmp_path)])
    for name in SAMPLE_FILES:
        with open(sample_path(name), "rb") as bundled:
            assert (tmp_path / name).read_bytes() == bundled.read(), name
