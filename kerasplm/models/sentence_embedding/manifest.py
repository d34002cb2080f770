"""Sentence embeddings and semantic search: the command-line face of the family, declared without TensorFlow.

``kerasplm finetune bert-simcse|bert-sbert``, ``export embedder``: sentence embeddings of a BERT run (runs of
families ``bert_simcse``, ``bert_sbert``); ``kerasplm index build|add``, ``kerasplm search``, ``kerasplm export
retriever``: a Faiss index of a corpus embedded by a BERT run, searched in process or through a retriever
SavedModel.
"""
import dataclasses

from kerasplm.models.bert.manifest import SCHEDULE_STEPS_HELP
from kerasplm.options import LENGTH_BUCKET_HELP, SESSION, ExportOptions, FineTuningOptions, JobOptions, option
from kerasplm.registry import Command

INDEX_TYPES = ["flat", "ivf", "ivfpq"]
_POOLINGS = "kerasplm.models.bert.classifier:POOLINGS"


@dataclasses.dataclass(frozen=True)
class SimCSEOptions(FineTuningOptions):
    """Options of ``finetune_bert_simcse`` / ``kerasplm finetune bert-simcse`` (declared once)."""

    train: str = option(None, "plain-text file, one sentence per line (empty lines skipped)", file=True,
                        metavar="TXT")
    dev: str = option(None, "held-out sentences (one per line): uniformity and mean cosine at the end",
                      file=True, metavar="TXT")
    init: str = option(None, "BERT run directory to start from (kerasplm convert bert / train bert)",
                       metavar="RUN_DIR")
    pooling: str = option("cls", "sentence representation: [CLS] (the paper's) or the mean over tokens",
                          choices=["cls", "mean"])
    mlp: bool = option(True, "no dense+tanh layer on [CLS] during training (cls pooling only)", flag="--no-mlp",
                       const=False, choices=[True, False])
    temperature: float = option(0.05, "softmax temperature of the cosine similarities", kind=float, minimum=0,
                                exclusive_minimum=True)
    normalize: bool = option(True, "the exported embeddings are not L2-normalized", flag="--no-normalize",
                             const=False, choices=[True, False])
    max_length: int = option(32, "word pieces per sentence, [CLS]/[SEP] included", kind=int, minimum=3)
    length_bucket: int = option(None, LENGTH_BUCKET_HELP.format(length="--max-length"), kind=int, minimum=0)
    batch_size: int = option(64, "sentences per batch (each the others' negatives)", kind=int, minimum=2)
    learning_rate: float = option(3e-5, "peak learning rate (AdamW)", kind=float, minimum=0, exclusive_minimum=True)
    warmup_fraction: float = option(0.0, "share of the steps with linear warmup", kind=float, minimum=0, maximum=1)
    schedule_steps: int = option(None, SCHEDULE_STEPS_HELP, kind=int, minimum=0, exclusive_minimum=True)
    weight_decay: float = option(0.0, "AdamW weight decay (not on biases and LayerNorm)", kind=float, minimum=0)
    layer_decay: float = option(None, "layer-wise learning-rate decay factor (none: off)", kind=float, minimum=0,
                                maximum=1, exclusive_minimum=True)
    max_examples: int = option(None, "read at most this many training sentences", kind=int, minimum=2)


@dataclasses.dataclass(frozen=True)
class SentenceBertOptions(FineTuningOptions):
    """Options of ``finetune_bert_sbert`` / ``kerasplm finetune bert-sbert`` (declared once)."""

    train: str = option(None, "tab-separated examples, no header: sentence1, sentence2, label (classification); "
                              "sentence1, sentence2, score (regression); anchor, positive, negative (triplet)",
                        file=True, metavar="TSV")
    dev: str = option(None, "held-out examples (same columns) scored at the end: accuracy (classification, "
                            "triplet), Spearman and Pearson of the cosine against the score (regression)",
                      file=True, metavar="TSV")
    init: str = option(None, "BERT run directory to start from (kerasplm convert bert / train bert)",
                       metavar="RUN_DIR")
    objective: str = option("classification", "softmax over (u, v, |u-v|), MSE of cos(u, v) against the score, or "
                            "the triplet margin loss", choices="kerasplm.models.sentence_embedding.sbert:OBJECTIVES")
    pooling: str = option("mean", "sentence vector: [CLS], or the mean or max over the real tokens",
                          choices="kerasplm.models.bert.classifier:POOLINGS")
    margin: float = option(1.0, "triplet objective: margin of max(||a-p|| - ||a-n|| + margin, 0)", kind=float,
                           minimum=0, exclusive_minimum=True)
    score_scale: float = option(1.0, "regression: gold scores lie in [0, SCALE] and are divided by it (STS-B: 5)",
                                kind=float, minimum=0, exclusive_minimum=True, metavar="SCALE")
    header: bool = option(False, "the files' first line is a header (skipped)", flag="--header", const=True,
                          choices=[True, False])
    normalize: bool = option(True, "the exported embeddings are not L2-normalized", flag="--no-normalize",
                             const=False, choices=[True, False])
    max_length: int = option(128, "word pieces per sentence, [CLS]/[SEP] included", kind=int, minimum=3)
    length_bucket: int = option(None, LENGTH_BUCKET_HELP.format(length="--max-length"), kind=int, minimum=0)
    batch_size: int = option(16, "examples per batch (the paper's 16)", kind=int, minimum=1)
    epochs: float = option(1.0, "epochs over the training file (the paper's 1): the run's length without --steps, "
                                "and the most a --time-budget run trains",
                           kind=float, minimum=0, exclusive_minimum=True)
    learning_rate: float = option(2e-5, "peak learning rate (AdamW; the paper's 2e-5)", kind=float, minimum=0,
                                  exclusive_minimum=True)
    warmup_fraction: float = option(0.1, "share of the steps with linear warmup (the paper's 10%%)", kind=float,
                                    minimum=0, maximum=1)
    schedule_steps: int = option(None, SCHEDULE_STEPS_HELP, kind=int, minimum=0, exclusive_minimum=True)
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases and LayerNorm)", kind=float, minimum=0)
    layer_decay: float = option(None, "layer-wise learning-rate decay factor (none: off)", kind=float, minimum=0,
                                maximum=1, exclusive_minimum=True)
    max_examples: int = option(None, "read at most this many training examples", kind=int, minimum=1)
    eval_batch_size: int = option(128, "sentences per batch when scoring --dev", kind=int, minimum=1, scope=SESSION)


@dataclasses.dataclass(frozen=True)
class EmbedderExportOptions(ExportOptions):
    """``kerasplm export embedder``."""
    pooling: str = option(None, "cls, mean or max pooling (default: the run's recorded sentence-transformers "
                          "pooling, else mean)", choices="kerasplm.models.bert.classifier:POOLINGS")
    normalize: bool = option(None, "L2-normalize the embeddings (default: as the run records, else yes)", kind=bool)
    sequence_length: int = option(None, "cap on tokens per text, [CLS]/[SEP] included (default: the run's "
                                  "max_seq_length, else the model's positions)", kind=int, minimum=3)
    whitening: str = option(None, "fit BERT-whitening (Su et al. 2021) on this corpus, one sentence per line, and "
                            "apply it in the export after the pooling, before the normalization", file=True,
                            metavar="CORPUS")
    whitening_dim: int = option(None, "whitened dimensions kept: the k of largest variance (default: all)", kind=int,
                                minimum=1, metavar="K")

    def check(self):
        if self.whitening_dim is not None and self.whitening is None:
            raise ValueError("option whitening_dim needs --whitening CORPUS")


@dataclasses.dataclass(frozen=True)
class IndexBuildOptions(JobOptions):
    """``kerasplm index build``."""
    embedder: str = option(None, "BERT run directory whose sentence vectors fill the index (converted, pretrained "
                           "or fine-tuned)", metavar="RUN_DIR", required=True)
    corpus: str = option(None, "one sentence or passage per line (blank lines skipped)", file=True, metavar="FILE",
                         required=True)
    out: str = option(None, "the index directory to write", metavar="INDEX", required=True)
    type: str = option("flat", "flat: exact (IndexFlatIP); ivf: k-means cells (IndexIVFFlat); ivfpq: cells and "
                       "product-quantized codes (IndexIVFPQ)", choices=INDEX_TYPES)
    nlist: int = option(16, "ivf/ivfpq: number of k-means cells, trained on the corpus", kind=int, minimum=1)
    m: int = option(8, "ivfpq: codes per vector (must divide the dimension)", kind=int, minimum=1)
    nbits: int = option(8, "ivfpq: bits per code (2^nbits centroids per sub-quantizer)", kind=int, minimum=1,
                        maximum=16)
    nprobe: int = option(4, "ivf/ivfpq: cells visited per query (recorded; `search --nprobe` overrides)", kind=int,
                         minimum=1)
    pooling: str = option(None, "cls or mean pooling (default: the run's recorded sentence-transformers pooling, "
                          "else mean)", choices=_POOLINGS)
    sequence_length: int = option(None, "cap on tokens per text, [CLS]/[SEP] included (default: the run's "
                                  "max_seq_length, else the model's positions)", kind=int, minimum=3)
    whitening: str = option(None, "fit BERT-whitening on this corpus (one sentence per line; may be --corpus) and "
                            "whiten every vector before the normalization", file=True, metavar="CORPUS")
    whitening_dim: int = option(None, "whitened dimensions kept (default: all)", kind=int, minimum=1, metavar="K")
    batch_size: int = option(64, "sentences embedded per batch", kind=int, minimum=1)
    seed: int = option(0, "seed of Faiss' k-means (IVF cells, PQ codebooks)", kind=int, minimum=0)
    overwrite: bool = option(False, "replace an existing index", const=True, choices=[True, False])

    def check(self):
        if self.whitening_dim is not None and self.whitening is None:
            raise ValueError("option whitening_dim needs --whitening CORPUS")


@dataclasses.dataclass(frozen=True)
class IndexAddOptions(JobOptions):
    """``kerasplm index add``."""
    index: str = option(None, "index directory written by `kerasplm index build`", metavar="INDEX", required=True)
    corpus: str = option(None, "more sentences, one per line: their ids continue the index's", file=True,
                         metavar="FILE", required=True)
    embedder: str = option(None, "the BERT run to embed with (default: the run that built the index; a run of other "
                           "weights is refused)", metavar="RUN_DIR")
    batch_size: int = option(64, "sentences embedded per batch", kind=int, minimum=1)


@dataclasses.dataclass(frozen=True)
class SearchOptions(JobOptions):
    """``kerasplm search``."""
    queries: tuple = option((), "query texts", positional=True, nargs="+", metavar="QUERY")
    index: str = option(None, "index directory written by `kerasplm index build`", metavar="INDEX", required=True)
    top_k: int = option(5, "hits per query", kind=int, minimum=1)
    nprobe: int = option(None, "ivf/ivfpq: cells visited per query (default: the index's)", kind=int, minimum=1)
    json_output: bool = option(False, "print JSON: a list of {id, score, text} (one list per query when several)",
                               flag="--json", const=True, choices=[True, False])
    embedder: str = option(None, "the BERT run that embeds the queries (default: the index's; a run of other "
                           "weights is refused)", metavar="RUN_DIR")


@dataclasses.dataclass(frozen=True)
class RetrieverExportOptions(JobOptions):
    """``kerasplm export retriever``."""
    index: str = option(None, "index directory written by `kerasplm index build`", metavar="INDEX", required=True)
    to: str = option("export/retriever", "model base path: the SavedModel goes to <to>/<version>/", metavar="DIR")
    top_k: int = option(5, "hits per query, fixed in the SavedModel", kind=int, minimum=1)
    int8: bool = option(False, "store the corpus matrix as int8 with one float32 scale per vector (a quarter of "
                        "the memory; scores approximate)", const=True, choices=[True, False])
    embedder: str = option(None, "the BERT run that embeds the queries (default: the index's; a run of other "
                           "weights is refused)", metavar="RUN_DIR")
    version: int = option(None, "version number (default: the next free one)", kind=int, minimum=1)
    overwrite: bool = option(False, "replace an existing version", const=True, choices=[True, False])



# The families whose public modules this one imports (the layering contracts check it).
BASES = ("bert",)
# Builders of this family's runs of format 1-2 (kerasplm convert run).
LEGACY_BUILDERS = "kerasplm.models.sentence_embedding.legacy:BUILDERS"
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.bert_sbert": "kerasplm.models.sentence_embedding.sbert",
    "kerasplm.models.bert_simcse": "kerasplm.models.sentence_embedding.simcse",
    "kerasplm.models.sentence_embedder": "kerasplm.models.sentence_embedding.embedder",
    "kerasplm.models.vector_index": "kerasplm.models.sentence_embedding.vector_index",
    "kerasplm.models.whitening": "kerasplm.models.sentence_embedding.whitening",
}

_RESUMABLE = "Rerun the same command to resume."
COMMANDS = [
    Command("finetune", "bert-simcse", "unsupervised SimCSE sentence embeddings on a BERT run", SimCSEOptions,
            "kerasplm.models.sentence_embedding.simcse_job:finetune_bert_simcse",
            description="Train sentence embeddings with unsupervised SimCSE (dropout noise, in-batch negatives) from "
                        "a BERT run (--init) on a text file, one sentence per line; export the run with `kerasplm "
                        "export embedder`. " + _RESUMABLE),
    Command("finetune", "bert-sbert", "Sentence-BERT: siamese / triplet sentence embeddings on a BERT run",
            SentenceBertOptions, "kerasplm.models.sentence_embedding.sbert_job:finetune_bert_sbert",
            description="Train sentence embeddings with Sentence-BERT (Reimers & Gurevych 2019) from a BERT run "
                        "(--init) on tab-separated pairs with a label (NLI: softmax over (u, v, |u-v|)) or a score "
                        "(STS: cosine regression), or on triplets (margin loss); cls, mean or max pooling; export "
                        "the run with `kerasplm export embedder`. " + _RESUMABLE),
    Command("export", "embedder", "export a BERT run as a sentence-embedding SavedModel", EmbedderExportOptions,
            "kerasplm.models.sentence_embedding.embedder_export:export_embedder_run",
            description="Export a BERT run (converted, pretrained or fine-tuned): `text` strings -> `embedding` "
                        "vectors, pooled and normalized as the run records; --whitening CORPUS fits BERT-whitening "
                        "on the corpus and applies it in graph."),
    Command("index", "build", "embed a corpus with a BERT run into a Faiss index", IndexBuildOptions,
            "kerasplm.models.sentence_embedding.vector_index:build_index_command",
            description="Embed every line of --corpus with the BERT run --embedder (L2-normalized sentence vectors: "
                        "inner product = cosine) and write a Faiss index directory: the index, the texts, their "
                        "ids and a manifest recording the embedder and a hash of its weights."),
    Command("index", "add", "append a corpus to an index (ids continue)", IndexAddOptions,
            "kerasplm.models.sentence_embedding.vector_index:add_index_command",
            description="Embed --corpus with the index's embedder and append it; an IVF index keeps its trained "
                        "cells. An embedder whose weights differ from the index's is refused."),
    Command("", "search", "the top-k sentences of an index for queries", SearchOptions,
            "kerasplm.models.sentence_embedding.vector_index:search_command",
            description="Embed each query with the index's embedder and print its top-k hits: rank, id, score "
                        "(cosine) and text; --json prints a list of {id, score, text} (one per query)."),
    Command("export", "retriever", "export an index and its embedder as a retriever SavedModel",
            RetrieverExportOptions, "kerasplm.models.sentence_embedding.retriever_export:export_retriever_command",
            description="Export a SavedModel whose serving_default takes query strings and returns the top-k ids, "
                        "scores and texts: the embedder and the corpus matrix (float32, or int8 with scales) are in "
                        "the graph; no kerasplm or Faiss is needed to serve it."),
]
