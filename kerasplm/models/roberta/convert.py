"""HuggingFace RoBERTa directories -> ``bert`` run directories (``kerasplm convert roberta``).

RoBERTa is a :class:`kerasplm.models.bert.backbone.BertBackbone` with one token type (``num_segments`` 1) whose
positions start at ``padding_idx + 1`` (``position_offset`` 2), under BERT's HuggingFace names (after
``roberta.``); a ``RobertaForMaskedLM`` keeps its MLM head (``lm_head.*``, the decoder tied to the word
embeddings) as a :class:`BertPretrainer`. A pooler the source lacks is drawn fresh from the seed 0 and recorded
as ``fresh_pooler``. The tokenizer is GPT-2's byte-level BPE (``vocab.json``, ``merges.txt``, copied into the
run) with RoBERTa's special tokens, packed ``<s> A </s></s> B </s>``. The plan and run writing are BERT's
(:mod:`kerasplm.models.bert.convert`).
"""
import dataclasses
import os

from kerasplm.models.bert.convert import (assign_plan, bert_plan, config_from_hf, converter_command,
                                          fresh_backbone, mlm_head_plan, pooler_plan, read_hf_tensors, read_json,
                                          split_prefix, tied_decoder, write_converted_run)
from kerasplm.models.bert.pretrainer import PRETRAINING_TASK, BertPretrainer
from kerasplm.text.bert_tokenizer import BertPreprocessor
from kerasplm.text.bpe import BPE_ASSETS, BytePairTokenizer, bpe_tokenizer_files

__all__ = ["ROBERTA_SPECIAL_TOKENS", "roberta_config", "load_hf_roberta", "convert_roberta_to_run",
           "convert_roberta_command"]

# RoBERTa's special tokens (HuggingFace's RobertaTokenizer defaults), recognised when written in the text.
ROBERTA_SPECIAL_TOKENS = {"start": "<s>", "end": "</s>", "pad": "<pad>", "unk": "<unk>", "mask": "<mask>"}


def roberta_config(hf):
    """A :class:`BertConfig` from a RoBERTa ``config.json`` dict: position i reads row ``pad_token_id + 1 + i``
    (HuggingFace numbers the positions of real tokens from ``padding_idx + 1``)."""
    config = config_from_hf(hf)
    return dataclasses.replace(config, position_offset=hf.get("pad_token_id", 1) + 1).validate()


def load_hf_roberta(directory, allow_pickle=False, **config_overrides):
    """``(model, task, options)`` of a HuggingFace RoBERTa directory: a ``RobertaForMaskedLM`` as a
    :class:`BertPretrainer` (MLM only, ``lm_head`` tied to the word embeddings), a bare ``RobertaModel`` as the
    :class:`BertBackbone`."""
    config = dataclasses.replace(roberta_config(read_json(os.path.join(directory, "config.json"))),
                                 **config_overrides).validate()
    backbone = fresh_backbone(config)
    tensors, heads = split_prefix(read_hf_tensors(directory, allow_pickle, keep_heads=True), "roberta.")
    absent = assign_plan(bert_plan(backbone), tensors, directory, optional=[n for n, _, _ in pooler_plan(backbone)])
    options = {"fresh_pooler": bool(absent)}
    if not heads:
        return backbone, "backbone", options
    model = BertPretrainer(backbone, sentence_task="none")
    tied_decoder(heads, "lm_head.decoder.weight", tensors, directory)
    heads.pop("lm_head.decoder.bias", None)   # the same tensor as lm_head.bias
    assign_plan(mlm_head_plan(model.mlm_head, "lm_head.", ("dense", "layer_norm", "bias")), heads, directory)
    return model, PRETRAINING_TASK, {**options, "sentence_task": "none"}


def _bpe_preprocessor(source, run, config):
    """``vocab.json`` + ``merges.txt`` copied into the run; RoBERTa's packing ``<s> A </s></s> B </s>`` over a
    :class:`BytePairTokenizer` of the copies (GPT-2's byte-level BPE)."""
    files = bpe_tokenizer_files(source, config.vocab_size)
    if not files:
        raise ValueError(f"{os.path.join(source, 'vocab.json')}: not found (the run needs the model's byte-level "
                         "BPE: vocab.json and merges.txt)")

    def make():
        tokenizer = BytePairTokenizer(run.file("vocab.json"), run.file("merges.txt"),
                                      special_tokens=ROBERTA_SPECIAL_TOKENS)
        return BertPreprocessor(tokenizer, config.max_positions - config.position_offset, pad_to_length=False,
                                start_token="<s>", end_token="</s>", pad_token="<pad>", pair_separators=2)
    return files, BPE_ASSETS, {}, make


def convert_roberta_to_run(source, out, allow_pickle=False):
    """A ``bert`` run from a HuggingFace RoBERTa directory (``RobertaForMaskedLM``: task ``pretraining``, MLM
    only; bare model: ``backbone``) and its ``vocab.json`` + ``merges.txt``."""
    return write_converted_run(source, out, lambda: load_hf_roberta(source, allow_pickle), "roberta",
                               _bpe_preprocessor)


convert_roberta_command = converter_command(convert_roberta_to_run)
