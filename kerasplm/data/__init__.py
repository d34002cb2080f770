"""Corpus readers and tf.data pipelines, plus the Tatoeba Spanish-English data bundled with the package:
a 20,000-pair sample of short sentences, a 500-sentence held-out split, and the whole corpus less those
held-out sentences (gzip; the main job's default training data). See ``kerasplm/data/make_sample.py``."""
from importlib import resources

from kerasplm.data.conll import Sentence, iob1_to_iob2, label_vocabulary, read_conll
from kerasplm.data.pairs import (
    DEFAULT_BUCKET_LENGTHS,
    ParallelSplit,
    group_references,
    make_translation_dataset,
    read_parallel_tsv,
    train_dev_split,
)
from kerasplm.data.pretraining import (
    Instances,
    PretrainingMasker,
    create_instances,
    make_pretraining_dataset,
    masker_for_tokenizer,
    read_documents,
    tokenize_documents,
)

SAMPLE_FILES = ("spa-eng-train.tsv", "spa-eng-dev.tsv", "spa-eng-all-train.tsv.gz", "LICENSE-tatoeba.txt")


def sample_path(name):
    """Installed path (str) of a bundled sample file, e.g. sample_path("spa-eng-train.tsv")."""
    if name not in SAMPLE_FILES:
        raise ValueError(f"unknown sample file {name!r}; bundled files: {', '.join(SAMPLE_FILES)}")
    path = resources.files("kerasplm.data").joinpath("sample", name)
    if not path.is_file():
        raise FileNotFoundError(f"bundled sample file missing from the installation: {path}")
    return str(path)


__all__ = ["sample_path", "read_parallel_tsv", "train_dev_split", "group_references",
           "make_translation_dataset", "ParallelSplit", "DEFAULT_BUCKET_LENGTHS", "SAMPLE_FILES",
           "read_documents", "tokenize_documents", "create_instances", "Instances", "PretrainingMasker",
           "masker_for_tokenizer", "make_pretraining_dataset",
           "read_conll", "iob1_to_iob2", "label_vocabulary", "Sentence"]
