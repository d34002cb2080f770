"""Sentence embeddings and retrieval: Sentence-BERT, SimCSE, whitening and a Faiss index. Base family: ``bert``.

``sbert.py``, ``simcse.py`` (task models), ``sbert_job.py``, ``simcse_job.py`` (over ``job.py``"s base),
``embedder.py`` (``SentenceEmbedder``), ``whitening.py``, ``vector_index.py`` (``kerasplm index`` /
``search``), ``embedder_export.py``, ``retriever_export.py``, ``manifest.py``.
"""
from kerasplm.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "sbert": ["BertSentenceBert"],
    "simcse": ["BertSimCSE"],
    "sbert_job": ["finetune_bert_sbert"],
    "simcse_job": ["finetune_bert_simcse"],
    "embedder": ["SentenceEmbedder", "bert_run_parts"],
    "whitening": ["fit_whitening", "whiten"],
    "vector_index": ["VectorIndex", "VectorIndexError", "build_index", "add_to_index", "load_index", "search_index"],
    "embedder_export": ["EmbedderModule", "export_embedder", "export_embedder_run"],
    "retriever_export": ["RetrieverModule", "export_retriever"],
})
