"""Semantic search: a Faiss index of a corpus embedded by a BERT run, searched in process or through a retriever
SavedModel. ``kerasplm index build|add``, ``kerasplm search``, ``kerasplm export retriever``."""
import dataclasses

from kerasplm.options import JobOptions, option
from kerasplm.registry import Command

INDEX_TYPES = ["flat", "ivf", "ivfpq"]
_POOLINGS = "kerasplm.models.bert.classifier:POOLINGS"


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
# Where the classes of runs written before the family became one folder live now.
FORMER_MODULES = {
    "kerasplm.models.bert_sbert": "kerasplm.models.sentence_embedding.sbert",
    "kerasplm.models.bert_simcse": "kerasplm.models.sentence_embedding.simcse",
    "kerasplm.models.sentence_embedder": "kerasplm.models.sentence_embedding.embedder",
    "kerasplm.models.vector_index": "kerasplm.models.sentence_embedding.vector_index",
    "kerasplm.models.whitening": "kerasplm.models.sentence_embedding.whitening",
}

COMMANDS = [
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
