"""HuggingFace DistilBERT, ELECTRA, RoBERTa and ALBERT directories -> ``bert`` run directories.

Each of these models is a :class:`kerasplm.models.bert.backbone.BertBackbone` with some of its options set (see
:class:`kerasplm.models.bert.backbone.BertConfig`), so a converted run is read by ``load_run``, by every BERT fine-tuning
job's ``--init`` and by the BERT exports exactly as a ``kerasplm convert bert`` run:

==========  ==========================================  ======================================================
model       backbone options                            HuggingFace names (after the model's prefix)
==========  ==========================================  ======================================================
DistilBERT  num_segments 0, no pooler                   ``transformer.layer.{i}.attention.{q,k,v,out}_lin``,
                                                        ``sa_layer_norm``, ``ffn.lin{1,2}``, ``output_layer_norm``
ELECTRA     embedding_size (E -> H ``embeddings_project``),  BERT's ``encoder.layer.{i}.*``; heads
            no pooler                                   ``discriminator_predictions.*`` (kept: the run's model is
                                                        an :class:`ElectraDiscriminator`) or ``generator_predictions``
                                                        + ``generator_lm_head`` (a :class:`BertPretrainer`, MLM only)
RoBERTa     num_segments 1, position_offset 2           BERT's names; byte-level BPE (``vocab.json``, ``merges.txt``)
ALBERT      embedding_size, share_layers, gelu_tanh     ``encoder.albert_layer_groups.0.albert_layers.0.*``;
                                                        SentencePiece (``spiece.model``)
==========  ==========================================  ======================================================

A pooler the source lacks (DistilBERT, ELECTRA, a RoBERTa saved without one) is drawn fresh from the seed 0 and
recorded in the run's options (``fresh_pooler``): fine-tuning trains it like the task's head. Every tensor goes
through one explicit list of ``(HuggingFace name, variable, transposed)``; unknown, missing and mis-shaped tensors
are reported together in one ``ValueError`` and nothing is assigned unless all fit.
"""
import dataclasses
import os
import shutil

import keras
import numpy as np
import tensorflow as tf

from kerasplm.models.bert.convert import _read_json, config_from_hf, hf_name, read_hf_tensors, weight_map
from kerasplm.models.bert.backbone import RUN_FAMILY, BertBackbone, BertConfig, bert_run_preprocessor
from kerasplm.models.bert.pretrainer import PRETRAINING_TASK, BertPretrainer
from kerasplm.models.electra.model import DISCRIMINATOR_TASK, ElectraDiscriminator
from kerasplm.runs import RunDir
from kerasplm.text.bert_tokenizer import BertTokenizer

_BUFFERS = ("position_ids", "token_type_ids")   # registered buffers some checkpoints save, not weights


def _dense(name, layer):
    return [(f"{name}.weight", layer.kernel, True), (f"{name}.bias", layer.bias, False)]


def _norm(name, layer):
    return [(f"{name}.weight", layer.gamma, False), (f"{name}.bias", layer.beta, False)]


def assign_plan(plan, tensors, source, optional=()):
    """Assigns ``tensors`` (name -> array) through ``plan`` (``[(name, variable, transposed)]``: PyTorch's
    ``Linear`` stores (out, in), a Keras kernel (in, out)). Names in ``optional`` may be absent (their variables
    keep their values). Returns the absent optional names; one ValueError names every problem."""
    tensors = {k: v for k, v in tensors.items() if not k.endswith(_BUFFERS)}
    problems, assignments, absent = [], [], []
    for name, variable, transposed in plan:
        if name not in tensors:
            (absent if name in optional else problems).append(name if name in optional
                                                               else f"missing {name} {tuple(variable.shape)}")
            continue
        value = np.asarray(tensors[name])
        value = value.T if transposed else value
        if value.shape != tuple(variable.shape):
            problems.append(f"shape of {name}: {value.shape}{' (transposed)' if transposed else ''}, expected "
                            f"{tuple(variable.shape)}")
            continue
        assignments.append((variable, value))
    known = {name for name, _, _ in plan}
    problems += [f"unknown {name} {np.shape(tensors[name])}" for name in sorted(set(tensors) - known)]
    if problems:
        raise ValueError(f"{source}: {len(problems)} weight problem(s):\n  " + "\n  ".join(problems))
    for variable, value in assignments:
        variable.assign(value.astype(variable.dtype))
    return absent


def _split_prefix(tensors, prefix):
    """(backbone tensors without ``prefix``, the other tensors: a task's heads). A bare backbone (no name with
    the prefix) is all backbone."""
    if not any(k.startswith(prefix) for k in tensors):
        return tensors, {}
    return ({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)},
            {k: v for k, v in tensors.items() if not k.startswith(prefix)})


def _check_activation(hf, key, allowed):
    act = hf.get(key, allowed[0])
    if act not in allowed:
        raise ValueError(f"{key}={act!r} is not supported (expected one of {list(allowed)})")
    return act


def _pooler_plan(backbone):
    return _dense("pooler.dense", backbone.pooler)


def _bert_plan(backbone, projection="embeddings_project"):
    """BERT's HuggingFace names for ``backbone`` (pooler included), the E -> H projection named ``projection``."""
    plan = []
    for path, kind, variable in weight_map(backbone):
        name = hf_name(path, kind)
        if name.startswith("encoder.embedding_hidden_mapping_in."):
            name = name.replace("encoder.embedding_hidden_mapping_in", projection)
        plan.append((name, variable, kind == "kernel"))
    return plan


def _fresh_backbone(config):
    """A backbone of ``config`` whose weights the source does not hold (the pooler) are seeded draws."""
    keras.utils.set_random_seed(0)
    return BertBackbone.from_config_object(config)


# ------------------------------------------------------------------------------------------------ DistilBERT
def distilbert_config(hf):
    """A :class:`BertConfig` from a DistilBERT ``config.json`` dict (no token types; LayerNorm eps 1e-12)."""
    _check_activation(hf, "activation", ("gelu",))
    missing = [k for k in ("vocab_size", "dim", "n_layers", "n_heads", "hidden_dim") if k not in hf]
    if missing:
        raise ValueError(f"DistilBERT config lacks {missing}")
    return BertConfig(vocab_size=hf["vocab_size"], num_layers=hf["n_layers"], hidden_size=hf["dim"],
                      num_heads=hf["n_heads"], intermediate_size=hf["hidden_dim"],
                      max_positions=hf.get("max_position_embeddings", 512), num_segments=0,
                      dropout=hf.get("dropout", 0.1), attention_dropout=hf.get("attention_dropout", 0.1),
                      initializer_range=hf.get("initializer_range", 0.02)).validate()


def distilbert_plan(backbone):
    emb = backbone.embeddings
    plan = [("embeddings.word_embeddings.weight", emb.embedding.embeddings, False),
            ("embeddings.position_embeddings.weight", emb.position_embedding.embeddings, False)]
    plan += _norm("embeddings.LayerNorm", emb.embedding_layernorm)
    for i, block in enumerate(backbone.blocks):
        layer = f"transformer.layer.{i}"
        for hf, ours in (("q_lin", block.mha.wq), ("k_lin", block.mha.wk), ("v_lin", block.mha.wv),
                         ("out_lin", block.mha.dense)):
            plan += _dense(f"{layer}.attention.{hf}", ours)
        plan += _norm(f"{layer}.sa_layer_norm", block.layernorm1)
        plan += _dense(f"{layer}.ffn.lin1", block.ffn.layers[0]) + _dense(f"{layer}.ffn.lin2", block.ffn.layers[1])
        plan += _norm(f"{layer}.output_layer_norm", block.layernorm2)
    return plan + _pooler_plan(backbone)


def load_hf_distilbert(directory, allow_pickle=False, **config_overrides):
    """``(backbone, options)``: a :class:`BertBackbone` with a HuggingFace DistilBERT directory's weights (its
    heads, e.g. ``DistilBertForMaskedLM``'s ``vocab_*``, are left out)."""
    config = dataclasses.replace(distilbert_config(_read_json(os.path.join(directory, "config.json"))),
                                 **config_overrides).validate()
    backbone = _fresh_backbone(config)
    tensors, _ = _split_prefix(read_hf_tensors(directory, allow_pickle, keep_heads=True), "distilbert.")
    plan = distilbert_plan(backbone)
    absent = assign_plan(plan, tensors, directory, optional=[n for n, _, _ in _pooler_plan(backbone)])
    return backbone, {"fresh_pooler": bool(absent)}


# ------------------------------------------------------------------------------------------------ ELECTRA
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
    config = dataclasses.replace(electra_config(_read_json(os.path.join(directory, "config.json"))),
                                 **config_overrides).validate()
    backbone = _fresh_backbone(config)
    tensors, heads = _split_prefix(read_hf_tensors(directory, allow_pickle, keep_heads=True), "electra.")
    pooler = [n for n, _, _ in _pooler_plan(backbone)]
    absent = assign_plan(_bert_plan(backbone), tensors, directory, optional=pooler)
    options = {"fresh_pooler": bool(absent)}
    if any(k.startswith("discriminator_predictions.") for k in heads):
        model = ElectraDiscriminator(backbone)
        plan = (_dense("discriminator_predictions.dense", model.rtd_dense)
                + _dense("discriminator_predictions.dense_prediction", model.rtd_prediction))
        assign_plan(plan, heads, directory)
        return model, DISCRIMINATOR_TASK, {**options, "electra": "discriminator"}
    if any(k.startswith("generator_") for k in heads):
        model = BertPretrainer(backbone, sentence_task="none")
        head = model.mlm_head
        decoder = heads.pop("generator_lm_head.weight", None)
        if decoder is not None and not np.array_equal(decoder, tensors["embeddings.word_embeddings.weight"]):
            raise ValueError(f"{directory}: generator_lm_head.weight differs from the word embeddings (only a tied "
                             "decoder is supported)")
        plan = (_dense("generator_predictions.dense", head.dense) + _norm("generator_predictions.LayerNorm",
                                                                          head.layer_norm)
                + [("generator_lm_head.bias", head.bias, False)])
        assign_plan(plan, heads, directory)
        return model, PRETRAINING_TASK, {**options, "electra": "generator", "sentence_task": "none"}
    if heads:
        raise ValueError(f"{directory}: unknown tensors {sorted(heads)[:5]} (expected ELECTRA's discriminator or "
                         "generator heads)")
    return backbone, "backbone", options


# ------------------------------------------------------------------------------------------------ RoBERTa
def roberta_config(hf):
    """A :class:`BertConfig` from a RoBERTa ``config.json`` dict: position i reads row ``pad_token_id + 1 + i``
    (HuggingFace numbers the positions of real tokens from ``padding_idx + 1``)."""
    config = config_from_hf(hf)
    return dataclasses.replace(config, position_offset=hf.get("pad_token_id", 1) + 1).validate()


def _mlm_head_plan(head, prefix, names):
    """An MLM head's weights under ``prefix`` with ``names`` = (dense, layer norm, bias)."""
    dense, norm, bias = names
    return (_dense(f"{prefix}{dense}", head.dense) + _norm(f"{prefix}{norm}", head.layer_norm)
            + [(f"{prefix}{bias}", head.bias, False)])


def _tied_decoder(heads, name, tensors, directory):
    """Drops the decoder ``name`` from ``heads`` after checking it is the word-embedding table."""
    decoder = heads.pop(name, None)
    if decoder is not None and not np.array_equal(decoder, tensors["embeddings.word_embeddings.weight"]):
        raise ValueError(f"{directory}: {name} differs from the word embeddings (only a tied decoder is supported)")


def load_hf_roberta(directory, allow_pickle=False, **config_overrides):
    """``(model, task, options)`` of a HuggingFace RoBERTa directory: a ``RobertaForMaskedLM`` as a
    :class:`BertPretrainer` (MLM only, ``lm_head`` tied to the word embeddings), a bare ``RobertaModel`` as the
    :class:`BertBackbone`."""
    config = dataclasses.replace(roberta_config(_read_json(os.path.join(directory, "config.json"))),
                                 **config_overrides).validate()
    backbone = _fresh_backbone(config)
    tensors, heads = _split_prefix(read_hf_tensors(directory, allow_pickle, keep_heads=True), "roberta.")
    absent = assign_plan(_bert_plan(backbone), tensors, directory, optional=[n for n, _, _ in _pooler_plan(backbone)])
    options = {"fresh_pooler": bool(absent)}
    if not heads:
        return backbone, "backbone", options
    model = BertPretrainer(backbone, sentence_task="none")
    _tied_decoder(heads, "lm_head.decoder.weight", tensors, directory)
    heads.pop("lm_head.decoder.bias", None)   # the same tensor as lm_head.bias
    assign_plan(_mlm_head_plan(model.mlm_head, "lm_head.", ("dense", "layer_norm", "bias")), heads, directory)
    return model, PRETRAINING_TASK, {**options, "sentence_task": "none"}


# ------------------------------------------------------------------------------------------------ ALBERT
_ALBERT_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}


def albert_config(hf):
    """A :class:`BertConfig` from an ALBERT ``config.json`` dict: factorized embedding, one shared block."""
    act = _check_activation(hf, "hidden_act", tuple(_ALBERT_ACTIVATIONS))
    for key in ("num_hidden_groups", "inner_group_num"):
        if hf.get(key, 1) != 1:
            raise ValueError(f"{key}={hf[key]} is not supported (one shared layer group of one layer, as every "
                             "released ALBERT)")
    config = config_from_hf({**hf, "hidden_act": "gelu"})
    size = hf.get("embedding_size", 128)
    return dataclasses.replace(config, embedding_size=None if size == config.hidden_size else size,
                               share_layers=True, activation=_ALBERT_ACTIVATIONS[act]).validate()


def albert_plan(backbone):
    emb = backbone.embeddings
    plan = [("embeddings.word_embeddings.weight", emb.embedding.embeddings, False),
            ("embeddings.position_embeddings.weight", emb.position_embedding.embeddings, False),
            ("embeddings.token_type_embeddings.weight", emb.segment_embedding.embeddings, False)]
    plan += _norm("embeddings.LayerNorm", emb.embedding_layernorm)
    if hasattr(emb, "embedding_projection"):
        plan += _dense("encoder.embedding_hidden_mapping_in", emb.embedding_projection)
    block, layer = backbone.blocks[0], "encoder.albert_layer_groups.0.albert_layers.0"
    for hf, ours in (("query", block.mha.wq), ("key", block.mha.wk), ("value", block.mha.wv),
                     ("dense", block.mha.dense)):
        plan += _dense(f"{layer}.attention.{hf}", ours)
    plan += _norm(f"{layer}.attention.LayerNorm", block.layernorm1)
    plan += _dense(f"{layer}.ffn", block.ffn.layers[0]) + _dense(f"{layer}.ffn_output", block.ffn.layers[1])
    plan += _norm(f"{layer}.full_layer_layer_norm", block.layernorm2)
    return plan + _dense("pooler", backbone.pooler)


def load_hf_albert(directory, allow_pickle=False, **config_overrides):
    """``(model, task, options)`` of a HuggingFace ALBERT directory: ``AlbertForPreTraining`` (MLM + SOP) or
    ``AlbertForMaskedLM`` (MLM) as a :class:`BertPretrainer` (the decoder tied to the word embeddings), a bare
    ``AlbertModel`` as the :class:`BertBackbone`."""
    config = dataclasses.replace(albert_config(_read_json(os.path.join(directory, "config.json"))),
                                 **config_overrides).validate()
    backbone = _fresh_backbone(config)
    tensors, heads = _split_prefix(read_hf_tensors(directory, allow_pickle, keep_heads=True), "albert.")
    absent = assign_plan(albert_plan(backbone), tensors, directory, optional=["pooler.weight", "pooler.bias"])
    options = {"fresh_pooler": bool(absent)}
    if not heads:
        return backbone, "backbone", options
    sentence_task = "sop" if any(k.startswith("sop_classifier.") for k in heads) else "none"
    model = BertPretrainer(backbone, sentence_task=sentence_task)
    _tied_decoder(heads, "predictions.decoder.weight", tensors, directory)
    heads.pop("predictions.decoder.bias", None)   # the same tensor as predictions.bias
    plan = _mlm_head_plan(model.mlm_head, "predictions.", ("dense", "LayerNorm", "bias"))
    if sentence_task == "sop":
        plan += _dense("sop_classifier.classifier", model.sentence_head)
    assign_plan(plan, heads, directory)
    return model, PRETRAINING_TASK, {**options, "sentence_task": sentence_task}


def _spm_preprocessor(source, run, config):
    """``spiece.model`` copied into the run; ``[CLS] A [SEP] B [SEP]`` over ALBERT's SentencePiece tokenizer of the
    copy (lower case and accents as ``tokenizer_config.json`` says, default: lower-cased, accents removed)."""
    from kerasplm.text.bert_tokenizer import BertPreprocessor  # noqa: PLC0415
    from kerasplm.text.sentencepiece import AlbertSentencePieceTokenizer  # noqa: PLC0415

    path = os.path.join(source, "spiece.model")
    if not os.path.exists(path):
        raise ValueError(f"{path}: not found (the run needs the model's SentencePiece vocabulary)")
    settings = {}
    tokenizer_config = os.path.join(source, "tokenizer_config.json")
    if os.path.exists(tokenizer_config):
        settings = _read_json(tokenizer_config)
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


# RoBERTa's special tokens (HuggingFace's RobertaTokenizer defaults), recognised when written in the text.
ROBERTA_SPECIAL_TOKENS = {"start": "<s>", "end": "</s>", "pad": "<pad>", "unk": "<unk>", "mask": "<mask>"}


def _bpe_preprocessor(source, run, config):
    """``vocab.json`` + ``merges.txt`` copied into the run; RoBERTa's packing ``<s> A </s></s> B </s>`` over a
    :class:`BytePairTokenizer` of the copies (GPT-2's byte-level BPE)."""
    from kerasplm.models.gpt.convert import BPE_ASSETS, _tokenizer_files  # noqa: PLC0415
    from kerasplm.text.bert_tokenizer import BertPreprocessor  # noqa: PLC0415
    from kerasplm.text.bpe import BytePairTokenizer  # noqa: PLC0415

    files = _tokenizer_files(source, config.vocab_size)
    if not files:
        raise ValueError(f"{os.path.join(source, 'vocab.json')}: not found (the run needs the model's byte-level "
                         "BPE: vocab.json and merges.txt)")

    def make():
        tokenizer = BytePairTokenizer(run.file("vocab.json"), run.file("merges.txt"),
                                      special_tokens=ROBERTA_SPECIAL_TOKENS)
        return BertPreprocessor(tokenizer, config.max_positions - config.position_offset, pad_to_length=False,
                                start_token="<s>", end_token="</s>", pad_token="<pad>", pair_separators=2)
    return files, BPE_ASSETS, {}, make


# ------------------------------------------------------------------------------------------------ run directories
def _wordpiece_preprocessor(source, run, config):
    """The source's ``vocab.txt`` copied into the run and a BERT preprocessor over it (casing from
    ``tokenizer_config.json``, default uncased)."""
    vocab_path = os.path.join(source, "vocab.txt")
    if not os.path.exists(vocab_path):
        raise ValueError(f"{vocab_path}: not found (the run needs the model's WordPiece vocabulary)")
    lower_case = True
    tokenizer_config = os.path.join(source, "tokenizer_config.json")
    if os.path.exists(tokenizer_config):
        lower_case = bool(_read_json(tokenizer_config).get("do_lower_case", True))
    with open(vocab_path, encoding="utf-8") as f:
        text = f.read()
    return {"vocab.txt": text}, {"vocab": "vocab.txt"}, {"lower_case": lower_case}, (
        lambda: bert_run_preprocessor(BertTokenizer(run.file("vocab.txt"), lower_case=lower_case), config))


def write_converted_run(source, out, load, kind, tokenizer_files):
    """Writes the run: ``load()`` -> ``(model, task, options)``; ``tokenizer_files(source, run, config)`` ->
    ``(files, assets, options, make_preprocessor)``. Nothing is written unless both succeed."""
    run = RunDir(out)
    if run.exists():
        raise FileExistsError(f"{run.config_path} exists: {out} already holds a run (choose another --out)")
    model, task, options = load()
    backbone = getattr(model, "backbone", model)
    files, assets, tokenizer_options, make_preprocessor = tokenizer_files(source, run, backbone.config)
    created = not os.path.exists(run.path)
    try:
        for name, content in files.items():
            if isinstance(content, bytes):
                os.makedirs(run.path, exist_ok=True)
                with open(run.file(name), "wb") as f:
                    f.write(content)
            else:
                run.write_text(name, content)
        preprocessor = make_preprocessor()
        backbone.check_preprocessor(preprocessor)
    except BaseException:
        if created:   # a failed conversion leaves no directory behind
            shutil.rmtree(run.path, ignore_errors=True)
        raise
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), run.checkpoint_dir, max_to_keep=1).save()
    options = {"source": os.path.abspath(source), "format": "huggingface", "model": kind, **options,
               **tokenizer_options}
    run.write_config(RUN_FAMILY, task, "custom", model, options, assets=assets, preprocessor=preprocessor)
    return run


def convert_distilbert_to_run(source, out, allow_pickle=False):
    """A ``bert`` run (task ``backbone``) from a HuggingFace DistilBERT directory and its ``vocab.txt``."""
    def load():
        backbone, options = load_hf_distilbert(source, allow_pickle)
        return backbone, "backbone", options
    return write_converted_run(source, out, load, "distilbert", _wordpiece_preprocessor)


def convert_electra_to_run(source, out, allow_pickle=False):
    """A ``bert`` run from a HuggingFace ELECTRA directory (discriminator: task ``electra_discriminator``;
    generator: task ``pretraining``, MLM only; bare model: ``backbone``) and its ``vocab.txt``."""
    return write_converted_run(source, out, lambda: load_hf_electra(source, allow_pickle), "electra",
                               _wordpiece_preprocessor)


def convert_roberta_to_run(source, out, allow_pickle=False):
    """A ``bert`` run from a HuggingFace RoBERTa directory (``RobertaForMaskedLM``: task ``pretraining``, MLM
    only; bare model: ``backbone``) and its ``vocab.json`` + ``merges.txt``."""
    return write_converted_run(source, out, lambda: load_hf_roberta(source, allow_pickle), "roberta",
                               _bpe_preprocessor)


def convert_albert_to_run(source, out, allow_pickle=False):
    """A ``bert`` run from a HuggingFace ALBERT directory (``AlbertForPreTraining`` / ``AlbertForMaskedLM``: task
    ``pretraining``; bare model: ``backbone``) and its ``spiece.model``."""
    return write_converted_run(source, out, lambda: load_hf_albert(source, allow_pickle), "albert", _spm_preprocessor)


def _command(convert):
    def command(source, out, allow_pickle=False):
        run = convert(source, out, allow_pickle=allow_pickle)
        print(run.path)
    command.__doc__ = f"``kerasplm convert``: {convert.__doc__.splitlines()[0]} Prints the run directory."
    return command


convert_distilbert_command = _command(convert_distilbert_to_run)
convert_electra_command = _command(convert_electra_to_run)
convert_roberta_command = _command(convert_roberta_to_run)
convert_albert_command = _command(convert_albert_to_run)
