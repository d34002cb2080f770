"""HuggingFace ELECTRA directories -> ``bert`` run directories (``kerasplm convert electra``).

ELECTRA's encoder is a :class:`kerasplm.models.bert.backbone.BertBackbone` with a factorized embedding
(``embedding_size`` E -> H, HuggingFace's ``embeddings_project``) and no pooler, under BERT's HuggingFace names
(after ``electra.``). The heads decide the run's model: ``discriminator_predictions.*`` (``ElectraForPreTraining``)
-> an :class:`ElectraDiscriminator` with its replaced-token-detection head; ``generator_predictions`` +
``generator_lm_head`` (``ElectraForMaskedLM``) -> a :class:`BertPretrainer` with MLM only, the decoder tied to
the word embeddings; none (``ElectraModel``) -> the backbone. The pooler is drawn fresh from the seed 0 and
recorded as ``fresh_pooler``; the vocabulary is the source's ``vocab.txt``. The plan and run writing are BERT's
(:mod:`kerasplm.models.bert.convert`).
"""
import dataclasses
import os

from kerasplm.models.bert.convert import (assign_plan, bert_plan, config_from_hf, converter_command, dense_plan,
                                          fresh_backbone, norm_plan, pooler_plan, read_hf_tensors, read_json,
                                          split_prefix, tied_decoder, wordpiece_preprocessor, write_converted_run)
from kerasplm.models.bert.pretrainer import PRETRAINING_TASK, BertPretrainer
from kerasplm.models.electra.model import DISCRIMINATOR_TASK, ElectraDiscriminator

__all__ = ["electra_config", "load_hf_electra", "convert_electra_to_run", "convert_electra_command"]


def electra_config(hf):
    """A :class:`BertConfig` from an ELECTRA ``config.json`` dict (``embedding_size`` when it differs from H)."""
    config = config_from_hf(hf)
    size = hf.get("embedding_size", config.hidden_size)
    return dataclasses.replace(config, embedding_size=None if size == config.hidden_size else size).validate()


def load_hf_electra(directory, allow_pickle=False, **config_overrides):
    """``(model, task, options)`` of a HuggingFace ELECTRA directory: the discriminator
    (``ElectraForPreTraining``: an :class:`ElectraDiscriminator`, its replaced-token-detection head kept), the
    generator (``ElectraForMaskedLM``: a :class:`BertPretrainer` with MLM only, the decoder tied to the word
    embeddings), or a bare ``ElectraModel`` (the :class:`BertBackbone`)."""
    config = dataclasses.replace(electra_config(read_json(os.path.join(directory, "config.json"))),
                                 **config_overrides).validate()
    backbone = fresh_backbone(config)
    tensors, heads = split_prefix(read_hf_tensors(directory, allow_pickle, keep_heads=True), "electra.")
    pooler = [n for n, _, _ in pooler_plan(backbone)]
    absent = assign_plan(bert_plan(backbone), tensors, directory, optional=pooler)
    options = {"fresh_pooler": bool(absent)}
    if any(k.startswith("discriminator_predictions.") for k in heads):
        model = ElectraDiscriminator(backbone)
        plan = (dense_plan("discriminator_predictions.dense", model.rtd_dense)
                + dense_plan("discriminator_predictions.dense_prediction", model.rtd_prediction))
        assign_plan(plan, heads, directory)
        return model, DISCRIMINATOR_TASK, {**options, "electra": "discriminator"}
    if any(k.startswith("generator_") for k in heads):
        model = BertPretrainer(backbone, sentence_task="none")
        head = model.mlm_head
        tied_decoder(heads, "generator_lm_head.weight", tensors, directory)
        plan = (dense_plan("generator_predictions.dense", head.dense)
                + norm_plan("generator_predictions.LayerNorm", head.layer_norm)
                + [("generator_lm_head.bias", head.bias, False)])
        assign_plan(plan, heads, directory)
        return model, PRETRAINING_TASK, {**options, "electra": "generator", "sentence_task": "none"}
    if heads:
        raise ValueError(f"{directory}: unknown tensors {sorted(heads)[:5]} (expected ELECTRA's discriminator or "
                         "generator heads)")
    return backbone, "backbone", options


def convert_electra_to_run(source, out, allow_pickle=False):
    """A ``bert`` run from a HuggingFace ELECTRA directory (discriminator: task ``electra_discriminator``;
    generator: task ``pretraining``, MLM only; bare model: ``backbone``) and its ``vocab.txt``."""
    return write_converted_run(source, out, lambda: load_hf_electra(source, allow_pickle), "electra",
                               wordpiece_preprocessor)


convert_electra_command = converter_command(convert_electra_to_run)
