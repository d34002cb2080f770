"""Hugging Face GPT-2 checkpoints -> :class:`kerasplm.models.gpt.model.GPT`.

Reads a directory written by ``transformers``' ``save_pretrained`` (``config.json`` and
``model.safetensors``; ``pytorch_model.bin`` only with ``allow_pickle=True``, because unpickling a file
can run arbitrary code). Every weight is placed through one explicit name map:

    HF (optional ``transformer.`` prefix)      kerasplm
    wte.weight (V, d)                           backbone.embeddings.embedding
    wpe.weight (P, d)                           backbone.embeddings.position_embedding
    h.{i}.ln_1.{weight,bias}                    block{i+1}.layernorm1 (gamma, beta)
    h.{i}.attn.c_attn.{weight (d, 3d), bias}    block{i+1}.mha1.{wq, wk, wv} (split in three along the output)
    h.{i}.attn.c_proj.{weight (d, d), bias}     block{i+1}.mha1.dense
    h.{i}.ln_2.{weight,bias}                    block{i+1}.layernorm3
    h.{i}.mlp.c_fc.{weight (d, 4d), bias}       block{i+1}.ffn.dense_1
    h.{i}.mlp.c_proj.{weight (4d, d), bias}     block{i+1}.ffn.dense_2
    ln_f.{weight,bias}                          backbone.final_layernorm
    lm_head.weight                              tied to wte (must equal it)

GPT-2's ``Conv1D`` stores its weight as (in, out), which is already a Keras ``Dense`` kernel's layout, so
no tensor is transposed. Unknown, missing or mis-shaped tensors give one ``ValueError`` listing them all.
"""
import json
import os
import re

import numpy as np
import tensorflow as tf

from kerasplm.models.gpt.model import GPT, GPTBackbone, GPTConfig
from kerasplm.runs import RunDir
from kerasplm.runs.serialization import attach_preprocessor
from kerasplm.text.bpe import BPE_ASSETS, BytePairTokenizer, bpe_tokenizer_files

__all__ = ["config_from_hf", "load_gpt2", "load_hf_tensors", "set_gpt2_weights"]

# HF activation_function -> ours.
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
# Buffers (not weights) that older GPT-2 checkpoints carry: the causal mask and its fill value.
_BUFFERS = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)$")
# Options of GPT2Config that change the computation and that this model does not implement.
_UNSUPPORTED = {"scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
                "add_cross_attention": False, "scale_attn_weights": True}


def config_from_hf(hf):
    """A :class:`GPTConfig` from a GPT-2 ``config.json`` dict; ValueError naming any unsupported field."""
    problems = [f"{key}={hf[key]!r} (only {value!r} is supported)" for key, value in _UNSUPPORTED.items()
                if key in hf and hf[key] != value]
    activation = hf.get("activation_function", "gelu_new")
    if activation not in _ACTIVATIONS:
        problems.append(f"activation_function={activation!r} (expected one of {sorted(_ACTIVATIONS)})")
    missing = [key for key in ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions") if key not in hf]
    if missing:
        problems.append(f"missing fields {missing}")
    if problems:
        raise ValueError("unsupported GPT-2 config: " + "; ".join(problems))
    d_model = hf["n_embd"]
    return GPTConfig(vocab_size=hf["vocab_size"], num_layers=hf["n_layer"], d_model=d_model,
                     num_heads=hf["n_head"], dff=hf.get("n_inner") or 4 * d_model, max_positions=hf["n_positions"],
                     rate=hf.get("resid_pdrop", 0.1), attention_dropout=hf.get("attn_pdrop", 0.1),
                     normalize_first=True, activation=_ACTIVATIONS[activation],
                     layer_norm_epsilon=hf.get("layer_norm_epsilon", 1e-5),
                     initializer_range=hf.get("initializer_range", 0.02)).validate()


def load_hf_tensors(directory, allow_pickle=False):
    """``{name: numpy array}`` of ``model.safetensors`` (or ``pytorch_model.bin`` with ``allow_pickle``)."""
    safetensors_path = os.path.join(directory, "model.safetensors")
    if os.path.exists(safetensors_path):
        from safetensors.numpy import load_file  # noqa: PLC0415 (optional until a conversion is asked for)

        return load_file(safetensors_path)
    bin_path = os.path.join(directory, "pytorch_model.bin")
    if os.path.exists(bin_path):
        if not allow_pickle:
            raise ValueError(f"{bin_path}: a pickled PyTorch checkpoint can run arbitrary code when loaded; "
                             "convert it to model.safetensors, or pass allow_pickle=True if you trust it")
        import torch  # noqa: PLC0415

        state = torch.load(bin_path, map_location="cpu", weights_only=True)
        return {name: tensor.float().numpy() for name, tensor in state.items()}
    raise ValueError(f"{directory}: no model.safetensors (or pytorch_model.bin) found")


def _weight_map(model):
    """HF name (no prefix) -> (list of Keras variables, how to cut the HF tensor into them)."""
    backbone = model.backbone
    embeddings = backbone.embeddings
    mapping = {"wte.weight": [embeddings.embedding.embeddings],
               "wpe.weight": [embeddings.position_embedding.embeddings],
               "ln_f.weight": [backbone.final_layernorm.gamma], "ln_f.bias": [backbone.final_layernorm.beta]}
    for i, block in enumerate(backbone.blocks):
        attention, (fc, proj) = block.mha1, block.ffn.layers
        dense = {"attn.c_attn": [attention.wq, attention.wk, attention.wv], "attn.c_proj": [attention.dense],
                 "mlp.c_fc": [fc], "mlp.c_proj": [proj]}
        for hf_name, layers in dense.items():
            mapping[f"h.{i}.{hf_name}.weight"] = [layer.kernel for layer in layers]
            mapping[f"h.{i}.{hf_name}.bias"] = [layer.bias for layer in layers]
        for hf_name, norm in (("ln_1", block.layernorm1), ("ln_2", block.layernorm3)):
            mapping[f"h.{i}.{hf_name}.weight"] = [norm.gamma]
            mapping[f"h.{i}.{hf_name}.bias"] = [norm.beta]
    return mapping


def set_gpt2_weights(model, tensors):
    """Copies HF GPT-2 ``tensors`` (name -> array) into ``model`` (a :class:`GPT`); one ValueError lists
    every unknown, missing or mis-shaped tensor, and nothing is assigned then."""
    tensors = {name[len("transformer."):] if name.startswith("transformer.") else name: np.asarray(value)
               for name, value in tensors.items()}
    head = tensors.pop("lm_head.weight", None)
    mapping = _weight_map(model)
    problems, assignments = [], []
    for name in sorted(set(tensors) - set(mapping)):
        if not _BUFFERS.search(name):
            problems.append(f"unknown tensor {name} {tensors[name].shape}")
    for name, variables in mapping.items():
        if name not in tensors:
            problems.append(f"missing tensor {name}")
            continue
        value = tensors[name]
        parts = len(variables)
        expected = tuple(variables[0].shape[:-1]) + (sum(v.shape[-1] for v in variables),)
        if value.shape != expected:
            problems.append(f"tensor {name} has shape {value.shape}, expected {expected}")
            continue
        assignments += zip(variables, np.split(value, parts, axis=-1))
    if head is not None and "wte.weight" in tensors and not problems:
        if head.shape != tensors["wte.weight"].shape or not np.array_equal(head, tensors["wte.weight"]):
            problems.append("lm_head.weight differs from wte.weight (only a tied output layer is supported)")
    if problems:
        raise ValueError(f"cannot load GPT-2 weights ({len(problems)} problems): " + "; ".join(problems))
    for variable, value in assignments:
        variable.assign(value.astype(variable.dtype))
    return model


def load_gpt2(directory, allow_pickle=False):
    """A :class:`GPT` with the weights of the HF GPT-2 checkpoint in ``directory``."""
    config_path = os.path.join(directory, "config.json")
    try:
        with open(config_path, encoding="utf-8") as f:
            hf_config = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{config_path}: cannot read the GPT-2 config ({e})") from None
    tensors = load_hf_tensors(directory, allow_pickle=allow_pickle)
    config = config_from_hf(hf_config)
    model = GPT(backbone=GPTBackbone.from_config_object(config, name="gpt2"))
    return set_gpt2_weights(model, tensors)


def convert_gpt2_to_run(source, out, allow_pickle=False):
    """Writes the HF GPT-2 checkpoint in ``source`` as a kerasplm run directory ``out`` (family "gpt":
    ``config.json`` and ``checkpoints/``; load it with ``kerasplm.runs.load_run``). Returns the
    :class:`GPT` (its tokenizer, if any, as ``preprocessor``). ``out`` must not hold a run already.

    When ``source`` has GPT-2's tokenizer files (``vocab.json`` and ``merges.txt``), they are copied into the run
    (assets ``bpe_vocab`` and ``bpe_merges``) and the run's preprocessor is a
    :class:`kerasplm.text.bpe.BytePairTokenizer` of the copies; without them the run has no tokenizer
    (``config["preprocessor"]`` is null and ``config["assets"]`` empty)."""
    run = RunDir(out)
    if run.exists():
        raise FileExistsError(f"{run.config_path} exists: convert into a new directory")
    model = load_gpt2(source, allow_pickle=allow_pickle)
    tokenizer_files = bpe_tokenizer_files(source, model.backbone.config.vocab_size)
    step = tf.Variable(0, dtype=tf.int64)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model, step=step), run.checkpoint_dir, max_to_keep=1).save()
    for name, text in tokenizer_files.items():
        run.write_text(name, text)
    tokenizer = (BytePairTokenizer(run.file(BPE_ASSETS["bpe_vocab"]), run.file(BPE_ASSETS["bpe_merges"]))
                 if tokenizer_files else None)
    # config.json last: a run directory is valid only once its config exists.
    run.write_config("gpt", "causal_lm", "gpt2", model, {"converted_from": os.path.abspath(source)},
                     assets=BPE_ASSETS if tokenizer_files else None, preprocessor=tokenizer)
    return attach_preprocessor(model, tokenizer)


def convert_gpt2_command(source, out, allow_pickle=False):
    """``kerasplm convert gpt2``: prints what was written."""
    model = convert_gpt2_to_run(source, out, allow_pickle=allow_pickle)
    tokenizer = ("with its BPE tokenizer" if os.path.exists(os.path.join(out, "merges.txt"))
                 else f"without a tokenizer ({source} has no vocab.json and merges.txt)")
    print(f"wrote {out}: GPT-2 with {model.count_params():,} parameters, {tokenizer}")
