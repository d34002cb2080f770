"""HuggingFace DistilBERT directories -> ``bert`` run directories (``kerasplm convert distilbert``).

DistilBERT is a :class:`kerasplm.models.bert.backbone.BertBackbone` without token types (``num_segments`` 0) and
without a pooler, so a converted run is read by ``load_run``, by every BERT fine-tuning job's ``--init``, by
``kerasplm distill`` and by the BERT exports exactly as a ``kerasplm convert bert`` run. Its HuggingFace names
(after ``distilbert.``): ``embeddings.{word,position}_embeddings``, ``embeddings.LayerNorm``,
``transformer.layer.{i}.attention.{q,k,v,out}_lin``, ``sa_layer_norm``, ``ffn.lin{1,2}``, ``output_layer_norm``;
the heads (e.g. ``DistilBertForMaskedLM``'s ``vocab_*``) are left out. The pooler, which DistilBERT lacks, is
drawn fresh from the seed 0 and recorded as ``fresh_pooler``; the vocabulary is the source's ``vocab.txt``. The
plan and run writing are BERT's (:mod:`kerasplm.models.bert.convert`).
"""
import dataclasses
import os

from kerasplm.models.bert.backbone import BertConfig
from kerasplm.models.bert.convert import (assign_plan, check_activation, converter_command, dense_plan,
                                          fresh_backbone, norm_plan, pooler_plan, read_hf_tensors, read_json,
                                          split_prefix, wordpiece_preprocessor, write_converted_run)

__all__ = ["distilbert_config", "distilbert_plan", "load_hf_distilbert", "convert_distilbert_to_run",
           "convert_distilbert_command"]


def distilbert_config(hf):
    """A :class:`BertConfig` from a DistilBERT ``config.json`` dict (no token types; LayerNorm eps 1e-12)."""
    check_activation(hf, "activation", ("gelu",))
    missing = [k for k in ("vocab_size", "dim", "n_layers", "n_heads", "hidden_dim") if k not in hf]
    if missing:
        raise ValueError(f"DistilBERT config lacks {missing}")
    return BertConfig(vocab_size=hf["vocab_size"], num_layers=hf["n_layers"], hidden_size=hf["dim"],
                      num_heads=hf["n_heads"], intermediate_size=hf["hidden_dim"],
                      max_positions=hf.get("max_position_embeddings", 512), num_segments=0,
                      dropout=hf.get("dropout", 0.1), attention_dropout=hf.get("attention_dropout", 0.1),
                      initializer_range=hf.get("initializer_range", 0.02)).validate()


def distilbert_plan(backbone):
    """``[(HuggingFace name, variable, transposed)]`` of every weight of a DistilBERT-shaped ``backbone``."""
    emb = backbone.embeddings
    plan = [("embeddings.word_embeddings.weight", emb.embedding.embeddings, False),
            ("embeddings.position_embeddings.weight", emb.position_embedding.embeddings, False)]
    plan += norm_plan("embeddings.LayerNorm", emb.embedding_layernorm)
    for i, block in enumerate(backbone.blocks):
        layer = f"transformer.layer.{i}"
        for hf, ours in (("q_lin", block.mha.wq), ("k_lin", block.mha.wk), ("v_lin", block.mha.wv),
                         ("out_lin", block.mha.dense)):
            plan += dense_plan(f"{layer}.attention.{hf}", ours)
        plan += norm_plan(f"{layer}.sa_layer_norm", block.layernorm1)
        plan += dense_plan(f"{layer}.ffn.lin1", block.ffn.layers[0]) + dense_plan(f"{layer}.ffn.lin2",
                                                                                  block.ffn.layers[1])
        plan += norm_plan(f"{layer}.output_layer_norm", block.layernorm2)
    return plan + pooler_plan(backbone)


def load_hf_distilbert(directory, allow_pickle=False, **config_overrides):
    """``(backbone, options)``: a :class:`BertBackbone` with a HuggingFace DistilBERT directory's weights (its
    heads, e.g. ``DistilBertForMaskedLM``'s ``vocab_*``, are left out)."""
    config = dataclasses.replace(distilbert_config(read_json(os.path.join(directory, "config.json"))),
                                 **config_overrides).validate()
    backbone = fresh_backbone(config)
    tensors, _ = split_prefix(read_hf_tensors(directory, allow_pickle, keep_heads=True), "distilbert.")
    plan = distilbert_plan(backbone)
    absent = assign_plan(plan, tensors, directory, optional=[n for n, _, _ in pooler_plan(backbone)])
    return backbone, {"fresh_pooler": bool(absent)}


def convert_distilbert_to_run(source, out, allow_pickle=False):
    """A ``bert`` run (task ``backbone``) from a HuggingFace DistilBERT directory and its ``vocab.txt``."""
    def load():
        backbone, options = load_hf_distilbert(source, allow_pickle)
        return backbone, "backbone", options
    return write_converted_run(source, out, load, "distilbert", wordpiece_preprocessor)


convert_distilbert_command = converter_command(convert_distilbert_to_run)
