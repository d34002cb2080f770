"""AllenNLP bilm-tf ELMo weights (``options.json`` + ``weights.hdf5``) -> :class:`kerasplm.models.elmo.model.ElmoBiLM`.

bilm-tf's ``dump_weights`` writes every biLM variable to HDF5 under its TensorFlow name without the ``lm/``
scope; its own loader (``bilm/model.py``, ``_pretrained_initializer``) reads them back by the names below,
which this module maps one by one (``d`` = direction: 0 forward, 1 backward; ``l`` = layer)::

    HDF5 dataset                                         shape                kerasplm (ElmoBiLM)
    char_embed                                           (n_chars - 1, 16)    char_encoder.char_embed rows 1..
                                                                              (row 0, "no token", stays 0, as
                                                                              bilm-tf's loader prepends it)
    CNN/W_cnn_{i}                                        (1, w, 16, n)        char_encoder.cnn_{i} kernel (w, 16, n)
    CNN/b_cnn_{i}                                        (n,)                 char_encoder.cnn_{i} bias
    CNN_high_{k}/W_carry, b_carry                        (F, F), (F,)         char_encoder.highway_{k}.carry
    CNN_high_{k}/W_transform, b_transform                (F, F), (F,)         char_encoder.highway_{k}.transform
    CNN_proj/W_proj, b_proj                              (F, P), (P,)         char_encoder.projection
    RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/W_0        (P + P, 4U)          {forward,backward}_{l}.cell.kernel
    RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/B          (4U,)                {forward,backward}_{l}.cell.bias
    RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/W_P_0      (U, P)               {forward,backward}_{l}.cell.projection

The options file (bilm-tf's ``options.json``: ``lstm.{dim, projection_dim, n_layers, cell_clip, proj_clip,
use_skip_connections}``, ``char_cnn.{filters, activation, n_highway, embedding.dim, n_characters,
max_characters_per_token}``) gives the :class:`ElmoConfig`. Every missing, unknown or mis-shaped tensor is
reported in one ``ValueError`` naming the file, and nothing is assigned unless all fit. Datasets under
``softmax/`` (not part of the published weight files) are ignored: the converted run has no word softmax.
"""
import json
import os

import numpy as np

from kerasplm.models.elmo.model import ElmoBiLM, ElmoConfig
from kerasplm.models.elmo.runs import read_vocab_file, save_bilm_run
from kerasplm.runs import RunDir

__all__ = ["config_from_options", "load_bilm_tf", "convert_elmo_to_run", "weight_map"]


def _get(options, path, source):
    value = options
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise ValueError(f"{source}: missing option {path}")
        value = value[key]
    return value


def config_from_options(options, source="options.json"):
    """bilm-tf's options (a dict) -> :class:`ElmoConfig` (dropout 0: conversion is for inference)."""
    if options.get("bidirectional") is False:
        raise ValueError(f"{source}: a unidirectional LM (bidirectional: false) is not an ELMo biLM")
    n_characters = _get(options, "char_cnn.n_characters", source)
    if n_characters not in (261, 262):
        raise ValueError(f"{source}: char_cnn.n_characters is {n_characters}; bilm-tf's character ids need 261 "
                         f"(training) or 262 (inference)")
    cnn_activation = _get(options, "char_cnn.activation", source)
    try:
        return ElmoConfig(
            filters=_get(options, "char_cnn.filters", source),
            char_embedding_dim=_get(options, "char_cnn.embedding.dim", source),
            n_characters=262,
            max_characters_per_token=_get(options, "char_cnn.max_characters_per_token", source),
            activation=cnn_activation,
            n_highway=_get(options, "char_cnn.n_highway", source),
            lstm_dim=_get(options, "lstm.dim", source),
            projection_dim=_get(options, "lstm.projection_dim", source),
            n_layers=_get(options, "lstm.n_layers", source),
            cell_clip=options["lstm"].get("cell_clip"),
            proj_clip=options["lstm"].get("proj_clip"),
            use_skip_connections=bool(options["lstm"].get("use_skip_connections", False)),
            dropout=0.0,
        ).validate()
    except (TypeError, ValueError) as e:
        raise ValueError(f"{source}: options do not describe a supported biLM ({e})") from None


def weight_map(bilm):
    """``{HDF5 name: (keras variable, transform of the file's array)}`` for every weight of ``bilm``."""
    enc, cfg = bilm.char_encoder, bilm.config

    def char_embed(a):
        return np.concatenate([np.zeros((1, a.shape[1]), a.dtype), a])

    names = {"char_embed": (enc.char_embedding.embeddings, char_embed)}
    for i, conv in enumerate(enc.convolutions):
        names[f"CNN/W_cnn_{i}"] = (conv.kernel, lambda a: a[0])
        names[f"CNN/b_cnn_{i}"] = (conv.bias, None)
    for k, highway in enumerate(enc.highways):
        for part in ("carry", "transform"):
            dense = getattr(highway, part)
            names[f"CNN_high_{k}/W_{part}"] = (dense.kernel, None)
            names[f"CNN_high_{k}/b_{part}"] = (dense.bias, None)
    if enc.projection is not None:
        names["CNN_proj/W_proj"] = (enc.projection.kernel, None)
        names["CNN_proj/b_proj"] = (enc.projection.bias, None)
    for d, layers in enumerate((bilm.forward_layers, bilm.backward_layers)):
        for layer_index, layer in enumerate(layers):
            root = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer_index}/LSTMCell"
            names[f"{root}/W_0"] = (layer.cell.kernel, None)
            names[f"{root}/B"] = (layer.cell.bias, None)
            if cfg.projection_dim:
                names[f"{root}/W_P_0"] = (layer.cell.projection, None)
    return names


def _read_hdf5(path):
    import h5py  # noqa: PLC0415  (only conversion needs it)

    arrays = {}
    try:
        with h5py.File(path, "r") as f:
            def keep(name, obj):
                if isinstance(obj, h5py.Dataset):
                    arrays[name] = obj[...]
            f.visititems(keep)
    except OSError as e:
        raise ValueError(f"{path}: not a readable HDF5 file ({e})") from None
    return arrays


def load_bilm_tf(options_path, weights_path):
    """An :class:`ElmoBiLM` with bilm-tf's weights (``options.json``, ``weights.hdf5``)."""
    try:
        with open(options_path, encoding="utf-8") as f:
            options = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{options_path}: not a JSON options file ({e})") from None
    if not isinstance(options, dict):
        raise ValueError(f"{options_path}: expected a JSON object")
    bilm = ElmoBiLM.from_config_object(config_from_options(options, options_path), name="elmo_bilm_tf")
    if bilm.config.fused:
        raise ValueError(f"{options_path}: bilm-tf LSTMs always have a projection")
    arrays = {k: v for k, v in _read_hdf5(weights_path).items() if not k.startswith("softmax/")}
    mapping = weight_map(bilm)
    problems, values = [], {}
    for name, (variable, transform) in mapping.items():
        if name not in arrays:
            problems.append(f"missing {name}")
            continue
        value = transform(arrays[name]) if transform else arrays[name]
        if tuple(value.shape) != tuple(variable.shape):
            shown = arrays[name].shape
            problems.append(f"{name} has shape {shown}, the options need {tuple(variable.shape)}"
                            + (" (after the transform)" if transform else ""))
            continue
        values[name] = value
    problems += [f"unexpected {name}" for name in sorted(set(arrays) - set(mapping))]
    if problems:
        raise ValueError(f"{weights_path} does not match {options_path}: " + "; ".join(problems))
    for name, (variable, _) in mapping.items():
        variable.assign(values[name].astype(np.float32))
    return bilm


def convert_elmo_to_run(options_path, weights_path, vocab_path, out):
    """Write run directory ``out`` (family ``elmo``, no softmax) holding bilm-tf's biLM and vocabulary;
    ``kerasplm.runs.load_run(out)`` returns its softmax-less :class:`kerasplm.models.elmo.model.ElmoLanguageModel`
    (``load_elmo(out)``: a :class:`kerasplm.models.elmo.runs.Elmo`). Returns the RunDir."""
    if RunDir(out).exists():
        raise FileExistsError(f"{out} already holds a run; convert into a new directory")
    vocab = read_vocab_file(vocab_path)
    bilm = load_bilm_tf(options_path, weights_path)
    sources = {"options": os.path.abspath(options_path), "weights": os.path.abspath(weights_path),
               "vocab": os.path.abspath(vocab_path)}
    return save_bilm_run(bilm, vocab, out, {"converted_from": "bilm-tf", **sources})


def convert_elmo_command(options, weights, vocab, out):
    """``kerasplm convert elmo``: prints the new run directory."""
    print(convert_elmo_to_run(options, weights, vocab, out).path)
