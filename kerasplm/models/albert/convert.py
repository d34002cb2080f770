"""HuggingFace ALBERT directories -> ``bert`` run directories (``kerasplm convert albert``).

ALBERT is a :class:`kerasplm.models.bert.backbone.BertBackbone` with a factorized embedding (``embedding_size``),
one block shared by every layer (``share_layers``) and GELU's tanh approximation; its HuggingFace names (after
``albert.``): BERT's ``embeddings.*``, ``encoder.embedding_hidden_mapping_in``,
``encoder.albert_layer_groups.0.albert_layers.0.{attention.{query,key,value,dense,LayerNorm},ffn,ffn_output,
full_layer_layer_norm}``, ``pooler``. ``AlbertForPreTraining`` (MLM + SOP) and ``AlbertForMaskedLM`` (MLM) keep
their heads as a :class:`BertPretrainer` (the decoder tied to the word embeddings). The tokenizer is the source's
SentencePiece model (``spiece.model``, copied into the run). The plan and run writing are BERT's
(:mod:`kerasplm.models.bert.convert`).
"""
import dataclasses
import os

from kerasplm.models.bert.convert import (assign_plan, check_activation, config_from_hf, converter_command,
                                          dense_plan, fresh_backbone, mlm_head_plan, norm_plan, read_hf_tensors,
                                          read_json, split_prefix, tied_decoder, write_converted_run)
from kerasplm.models.bert.pretrainer import PRETRAINING_TASK, BertPretrainer
from kerasplm.text.bert_tokenizer import BertPreprocessor
from kerasplm.text.sentencepiece import AlbertSentencePieceTokenizer

__all__ = ["albert_config", "albert_plan", "load_hf_albert", "convert_albert_to_run", "convert_albert_command"]

_ALBERT_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}


def albert_config(hf):
    """A :class:`BertConfig` from an ALBERT ``config.json`` dict: factorized embedding, one shared block."""
    act = check_activation(hf, "hidden_act", tuple(_ALBERT_ACTIVATIONS))
    for key in ("num_hidden_groups", "inner_group_num"):
        if hf.get(key, 1) != 1:
            raise ValueError(f"{key}={hf[key]} is not supported (one shared layer group of one layer, as every "
                             "released ALBERT)")
    config = config_from_hf({**hf, "hidden_act": "gelu"})
    size = hf.get("embedding_size", 128)
    return dataclasses.replace(config, embedding_size=None if size == config.hidden_size else size,
                               share_layers=True, activation=_ALBERT_ACTIVATIONS[act]).validate()


def albert_plan(backbone):
    """``[(HuggingFace name, variable, transposed)]`` of every weight of an ALBERT-shaped ``backbone``."""
    emb = backbone.embeddings
    plan = [("embeddings.word_embeddings.weight", emb.embedding.embeddings, False),
            ("embeddings.position_embeddings.weight", emb.position_embedding.embeddings, False),
            ("embeddings.token_type_embeddings.weight", emb.segment_embedding.embeddings, False)]
    plan += norm_plan("embeddings.LayerNorm", emb.embedding_layernorm)
    if hasattr(emb, "embedding_projection"):
        plan += dense_plan("encoder.embedding_hidden_mapping_in", emb.embedding_projection)
    block, layer = backbone.blocks[0], "encoder.albert_layer_groups.0.albert_layers.0"
    for hf, ours in (("query", block.mha.wq), ("key", block.mha.wk), ("value", block.mha.wv),
                     ("dense", block.mha.dense)):
        plan += dense_plan(f"{layer}.attention.{hf}", ours)
    plan += norm_plan(f"{layer}.attention.LayerNorm", block.layernorm1)
    plan += dense_plan(f"{layer}.ffn", block.ffn.layers[0]) + dense_plan(f"{layer}.ffn_output", block.ffn.layers[1])
    plan += norm_plan(f"{layer}.full_layer_layer_norm", block.layernorm2)
    return plan + dense_plan("pooler", backbone.pooler)


def load_hf_albert(directory, allow_pickle=False, **config_overrides):
    """``(model, task, options)`` of a HuggingFace ALBERT directory: ``AlbertForPreTraining`` (MLM + SOP) or
    ``AlbertForMaskedLM`` (MLM) as a :class:`BertPretrainer` (the decoder tied to the word embeddings), a bare
    ``AlbertModel`` as the :class:`BertBackbone`."""
    config = dataclasses.replace(albert_config(read_json(os.path.join(directory, "config.json"))),
                                 **config_overrides).validate()
    backbone = fresh_backbone(config)
    tensors, heads = split_prefix(read_hf_tensors(directory, allow_pickle, keep_heads=True), "albert.")
    absent = assign_plan(albert_plan(backbone), tensors, directory, optional=["pooler.weight", "pooler.bias"])
    options = {"fresh_pooler": bool(absent)}
    if not heads:
        return backbone, "backbone", options
    sentence_task = "sop" if any(k.startswith("sop_classifier.") for k in heads) else "none"
    model = BertPretrainer(backbone, sentence_task=sentence_task)
    tied_decoder(heads, "predictions.decoder.weight", tensors, directory)
    heads.pop("predictions.decoder.bias", None)   # the same tensor as predictions.bias
    plan = mlm_head_plan(model.mlm_head, "predictions.", ("dense", "LayerNorm", "bias"))
    if sentence_task == "sop":
        plan += dense_plan("sop_classifier.classifier", model.sentence_head)
    assign_plan(plan, heads, directory)
    return model, PRETRAINING_TASK, {**options, "sentence_task": sentence_task}


def _spm_preprocessor(source, run, config):
    """``spiece.model`` copied into the run; ``[CLS] A [SEP] B [SEP]`` over ALBERT's SentencePiece tokenizer of the
    copy (lower case and accents as ``tokenizer_config.json`` says, default: lower-cased, accents removed)."""
    path = os.path.join(source, "spiece.model")
    if not os.path.exists(path):
        raise ValueError(f"{path}: not found (the run needs the model's SentencePiece vocabulary)")
    settings = {}
    tokenizer_config = os.path.join(source, "tokenizer_config.json")
    if os.path.exists(tokenizer_config):
        settings = read_json(tokenizer_config)
    lower_case, keep_accents = bool(settings.get("do_lower_case", True)), bool(settings.get("keep_accents", False))
    AlbertSentencePieceTokenizer(path)   # a damaged file: refused before the run is written
    with open(path, "rb") as f:
        data = f.read()

    def make():
        tokenizer = AlbertSentencePieceTokenizer(run.file("spiece.model"), lower_case=lower_case,
                                                 keep_accents=keep_accents)
        return BertPreprocessor(tokenizer, config.max_positions, pad_to_length=False, pad_token="<pad>")
    return {"spiece.model": data}, {"spm_model": "spiece.model"}, {"lower_case": lower_case,
                                                                    "keep_accents": keep_accents}, make


def convert_albert_to_run(source, out, allow_pickle=False):
    """A ``bert`` run from a HuggingFace ALBERT directory (``AlbertForPreTraining`` / ``AlbertForMaskedLM``: task
    ``pretraining``; bare model: ``backbone``) and its ``spiece.model``."""
    return write_converted_run(source, out, lambda: load_hf_albert(source, allow_pickle), "albert", _spm_preprocessor)


convert_albert_command = converter_command(convert_albert_to_run)
