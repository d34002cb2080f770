"""Pretrained BERT weights into :class:`kerasplm.models.bert.backbone.BertBackbone`.

Two layouts are read:

* a HuggingFace directory: ``config.json`` + ``model.safetensors`` (read with the ``safetensors``
  package's numpy API), or ``pytorch_model.bin`` only with ``allow_pickle=True`` (unpickling runs
  arbitrary code from the file, so it is never done silently);
* Google's original TensorFlow checkpoint: ``bert_config.json`` + ``bert_model.ckpt.*``.

Every weight goes through one explicit name map (:func:`weight_map`): each backbone variable with its
name in both layouts. Unknown, missing and mis-shaped tensors are collected and reported in one
``ValueError``; nothing is assigned unless every tensor fits.

The variants' converters (``kerasplm convert distilbert|electra|roberta|albert``, each in its family's folder)
write ``bert`` runs with the public helpers of the last section: a weight plan ``[(HuggingFace name, variable,
transposed)]`` (:func:`dense_plan`, :func:`norm_plan`, :func:`bert_plan`, :func:`pooler_plan`,
:func:`mlm_head_plan`) assigned by :func:`assign_plan` (unknown, missing and mis-shaped tensors reported together
in one ``ValueError``, nothing assigned unless all fit), and :func:`write_converted_run`, which copies the
tokenizer files (:func:`wordpiece_preprocessor`, or the family's own) and writes nothing unless model and
tokenizer both load. A pooler the source lacks is drawn fresh from the seed 0 (:func:`fresh_backbone`) and
recorded in the run's options (``fresh_pooler``): fine-tuning trains it like the task's head.
"""
import dataclasses
import json
import os
import shutil

import keras
import numpy as np
import tensorflow as tf

from kerasplm.models.bert.backbone import RUN_FAMILY, BertBackbone, BertConfig, bert_run_preprocessor
from kerasplm.models.bert.pretrainer import BertPretrainer
from kerasplm.runs import RunDir
from kerasplm.text.bert_tokenizer import BertTokenizer

# Buffers some checkpoints carry that are not weights (HuggingFace's position ids, Google's
# optimizer state and step counter).
_IGNORED_SUFFIXES = ("position_ids", "/adam_m", "/adam_v", "global_step")

# How each kind of Keras variable is spelled: (HuggingFace suffix, TF suffix, transpose for HF).
_KINDS = {"kernel": ("weight", "kernel", True), "bias": ("bias", "bias", False),
          "embedding": ("weight", None, False), "gamma": ("weight", "gamma", False),
          "beta": ("bias", "beta", False)}


def _dense(path, layer):
    return [(path, "kernel", layer.kernel), (path, "bias", layer.bias)]


def _norm(path, layer):
    return [(path, "gamma", layer.gamma), (path, "beta", layer.beta)]


def weight_map(backbone):
    """``[(path, kind, variable)]`` for every weight of ``backbone``: ``path`` is a tuple of name parts
    (``("encoder", ("layer", 0), "attention", "self", "query")``), ``kind`` one of ``_KINDS``."""
    emb = backbone.embeddings
    entries = [(("embeddings", "word_embeddings"), "embedding", emb.embedding.embeddings),
               (("embeddings", "position_embeddings"), "embedding", emb.position_embedding.embeddings)]
    if hasattr(emb, "segment_embedding"):   # not with num_segments=0 (DistilBERT)
        entries.append((("embeddings", "token_type_embeddings"), "embedding", emb.segment_embedding.embeddings))
    entries += _norm(("embeddings", "LayerNorm"), emb.embedding_layernorm)
    if hasattr(emb, "embedding_projection"):  # ALBERT's factorized embedding (own HF names not mapped)
        entries += _dense(("encoder", "embedding_hidden_mapping_in"), emb.embedding_projection)
    for i, block in enumerate(backbone.blocks):
        layer = ("encoder", ("layer", i))
        entries += _dense(layer + ("attention", "self", "query"), block.mha.wq)
        entries += _dense(layer + ("attention", "self", "key"), block.mha.wk)
        entries += _dense(layer + ("attention", "self", "value"), block.mha.wv)
        entries += _dense(layer + ("attention", "output", "dense"), block.mha.dense)
        entries += _norm(layer + ("attention", "output", "LayerNorm"), block.layernorm1)
        entries += _dense(layer + ("intermediate", "dense"), block.ffn.layers[0])
        entries += _dense(layer + ("output", "dense"), block.ffn.layers[1])
        entries += _norm(layer + ("output", "LayerNorm"), block.layernorm2)
    entries += _dense(("pooler", "dense"), backbone.pooler)
    return entries


def hf_name(path, kind):
    """HuggingFace's name, e.g. ``encoder.layer.0.attention.self.query.weight``."""
    parts = [f"{p[0]}.{p[1]}" if isinstance(p, tuple) else p for p in path]
    return ".".join(parts + [_KINDS[kind][0]])


def tf_name(path, kind):
    """Google's checkpoint name, e.g. ``bert/encoder/layer_0/attention/self/query/kernel``."""
    parts = ["bert"] + [f"{p[0]}_{p[1]}" if isinstance(p, tuple) else p for p in path]
    suffix = _KINDS[kind][1]
    return "/".join(parts + ([suffix] if suffix else []))


# BertConfig field <- HuggingFace / Google config key (the first five are required).
_CONFIG_KEYS = (("vocab_size", "vocab_size"), ("num_layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
                ("num_heads", "num_attention_heads"), ("intermediate_size", "intermediate_size"),
                ("max_positions", "max_position_embeddings"), ("num_segments", "type_vocab_size"),
                ("dropout", "hidden_dropout_prob"), ("attention_dropout", "attention_probs_dropout_prob"),
                ("layer_norm_epsilon", "layer_norm_eps"), ("initializer_range", "initializer_range"))


def config_from_hf(hf):
    """A :class:`BertConfig` from a HuggingFace ``config.json`` / Google ``bert_config.json`` dict."""
    act = hf.get("hidden_act", "gelu")
    if act != "gelu":
        raise ValueError(f"hidden_act={act!r} is not supported (BertBackbone uses exact-erf 'gelu')")
    position = hf.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise ValueError(f"position_embedding_type={position!r} is not supported (only 'absolute')")
    missing = [key for _, key in _CONFIG_KEYS[:5] if key not in hf]
    if missing:
        raise ValueError(f"BERT config lacks {missing}")
    return BertConfig(**{field: hf[key] for field, key in _CONFIG_KEYS if key in hf}).validate()


def config_to_hf(config):
    """The inverse of :func:`config_from_hf` (``hidden_act`` "gelu")."""
    return {**{key: getattr(config, field) for field, key in _CONFIG_KEYS}, "hidden_act": "gelu"}


def assign_weights(backbone, tensors, name_fn, transpose_kernels, source):
    """Assigns ``tensors`` (name -> array) through :func:`weight_map` after checking all of them.

    Raises one ``ValueError`` naming every missing, unknown and mis-shaped tensor of ``source``.
    """
    tensors = {k: v for k, v in tensors.items() if not k.endswith(_IGNORED_SUFFIXES)}
    problems, plan = [], []
    expected = set()
    for path, kind, variable in weight_map(backbone):
        name = name_fn(path, kind)
        expected.add(name)
        if name not in tensors:
            problems.append(f"missing {name} {tuple(variable.shape)}")
            continue
        value = np.asarray(tensors[name])
        transposed = kind == "kernel" and transpose_kernels   # PyTorch stores Linear weights (out, in)
        if transposed:
            value = value.T
        if value.shape != tuple(variable.shape):
            how = "transposed" if transposed else "as stored"
            problems.append(f"shape of {name}: {value.shape} ({how}), expected {tuple(variable.shape)}")
            continue
        plan.append((variable, value))
    problems += [f"unknown {name} {np.shape(tensors[name])}" for name in sorted(set(tensors) - expected)]
    if problems:
        raise ValueError(f"{source}: {len(problems)} weight problem(s):\n  " + "\n  ".join(problems))
    for variable, value in plan:
        variable.assign(value.astype(variable.dtype))
    return backbone


def read_json(path):
    """The JSON object in ``path``; a missing or damaged file is a one-line ``ValueError`` naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{path}: not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None


def _strip_prefix(tensors):
    """Accepts ``BertForPreTraining``-style names (``bert.embeddings...``); drops the heads' tensors
    (``cls.*``) only when the prefix is present (they belong to a task, not the backbone)."""
    if not any(k.startswith("bert.") for k in tensors):
        return tensors
    return {k[len("bert."):]: v for k, v in tensors.items() if k.startswith("bert.")}


def read_hf_tensors(directory, allow_pickle=False, keep_heads=False):
    """``{name: np.ndarray}`` from ``model.safetensors`` (or ``pytorch_model.bin`` with ``allow_pickle``).
    ``keep_heads``: return every tensor under its stored name (``bert.*`` and the heads' ``cls.*``)."""
    safetensors_path = os.path.join(directory, "model.safetensors")
    bin_path = os.path.join(directory, "pytorch_model.bin")
    if os.path.exists(safetensors_path):
        from safetensors.numpy import load_file  # noqa: PLC0415 (only conversion needs it)

        try:
            tensors = load_file(safetensors_path)
        except Exception as e:  # safetensors raises its own error types for damaged files
            raise ValueError(f"{safetensors_path}: cannot be read ({e})") from None
    elif os.path.exists(bin_path):
        if not allow_pickle:
            raise ValueError(f"{bin_path}: only a pickle checkpoint is present; loading it runs code stored in "
                             "the file. Convert it to model.safetensors, or pass allow_pickle=True if you trust it")
        import torch  # noqa: PLC0415

        state = torch.load(bin_path, map_location="cpu", weights_only=False)
        tensors = {k: v.float().numpy() for k, v in state.items()}
    else:
        raise ValueError(f"{directory}: neither model.safetensors nor pytorch_model.bin found")
    tensors = tensors if keep_heads else _strip_prefix(tensors)
    # Old checkpoints spell LayerNorm's weights gamma/beta.
    return {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
            for k, v in tensors.items()}


def load_hf_bert(directory, allow_pickle=False, **config_overrides):
    """A :class:`BertBackbone` with the weights of a HuggingFace BERT directory.

    ``config_overrides``: BertConfig fields to change (e.g. ``dropout=0.0``).
    """
    config = config_from_hf(read_json(os.path.join(directory, "config.json")))
    config = dataclasses.replace(config, **config_overrides).validate()
    backbone = BertBackbone.from_config_object(config)
    return assign_weights(backbone, read_hf_tensors(directory, allow_pickle), hf_name, True, directory)


def load_hf_bert_pretrainer(directory, allow_pickle=False, **config_overrides):
    """A :class:`kerasplm.models.bert.pretrainer.BertPretrainer` (NSP) with the weights of a HuggingFace
    ``BertForPreTraining`` directory: the backbone as :func:`load_hf_bert`, the heads from ``cls.predictions``
    (transform dense + LayerNorm, output bias; the decoder is tied to the word embeddings) and
    ``cls.seq_relationship``. One ValueError lists every missing or mis-shaped head tensor."""
    pretrainer = BertPretrainer(load_hf_bert(directory, allow_pickle, **config_overrides), sentence_task="nsp")
    tensors = read_hf_tensors(directory, allow_pickle, keep_heads=True)
    head, sentence = pretrainer.mlm_head, pretrainer.sentence_head
    plan = [("cls.predictions.transform.dense.weight", head.dense.kernel, True),
            ("cls.predictions.transform.dense.bias", head.dense.bias, False),
            ("cls.predictions.transform.LayerNorm.weight", head.layer_norm.gamma, False),
            ("cls.predictions.transform.LayerNorm.bias", head.layer_norm.beta, False),
            ("cls.predictions.bias", head.bias, False),
            ("cls.seq_relationship.weight", sentence.kernel, True),
            ("cls.seq_relationship.bias", sentence.bias, False)]
    tensors = {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
               for k, v in tensors.items()}
    problems = []
    for name, variable, transpose in plan:
        value = tensors.get(name)
        value = None if value is None else (np.asarray(value).T if transpose else np.asarray(value))
        if value is None or value.shape != tuple(variable.shape):
            problems.append(f"{'missing' if value is None else 'shape of'} {name} "
                            f"{'' if value is None else value.shape} expected {tuple(variable.shape)}")
    if problems:
        raise ValueError(f"{directory}: {len(problems)} pretraining-head problem(s):\n  " + "\n  ".join(problems))
    for name, variable, transpose in plan:
        value = np.asarray(tensors[name])
        variable.assign((value.T if transpose else value).astype(variable.dtype))
    return pretrainer


def load_tf_bert(directory, checkpoint_prefix="bert_model.ckpt", **config_overrides):
    """A :class:`BertBackbone` from Google's TF layout (``bert_config.json``, ``bert_model.ckpt.*``)."""
    config = config_from_hf(read_json(os.path.join(directory, "bert_config.json")))
    config = dataclasses.replace(config, **config_overrides).validate()
    prefix = os.path.join(directory, checkpoint_prefix)
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        raise ValueError(f"{prefix}: cannot read the checkpoint ({str(e).splitlines()[0]})") from None
    tensors = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
               if name.startswith("bert/")}
    backbone = BertBackbone.from_config_object(config)
    return assign_weights(backbone, tensors, tf_name, False, prefix)


def save_tf_bert(backbone, directory, checkpoint_prefix="bert_model.ckpt"):
    """Writes ``backbone`` in Google's layout (``bert_config.json`` + checkpoint): the inverse of
    :func:`load_tf_bert` (used in tests, and to hand weights to tools that read that layout)."""
    c = backbone.config
    if c.embedding_size is not None or c.share_layers:
        raise ValueError("Google's BERT layout has no ALBERT factorization/sharing")
    os.makedirs(directory, exist_ok=True)
    names, values = [], []
    for path, kind, variable in weight_map(backbone):
        names.append(tf_name(path, kind))
        values.append(tf.convert_to_tensor(variable))
    tf.raw_ops.SaveV2(prefix=os.path.join(directory, checkpoint_prefix), tensor_names=names,
                      shape_and_slices=[""] * len(names), tensors=values)
    hf = config_to_hf(c)
    with open(os.path.join(directory, "bert_config.json"), "w", encoding="utf-8") as f:
        json.dump(hf, f, indent=2)


# ---------------------------------------------------------------------------- run directories


def _sentence_embedding_options(directory):
    """sentence-transformers' settings of ``directory`` (pooling, normalize, max_seq_length), or None."""
    modules_path = os.path.join(directory, "modules.json")
    if not os.path.exists(modules_path):
        return None
    modules = read_json(modules_path)
    types = [m.get("type", "") for m in modules] if isinstance(modules, list) else []
    options = {"normalize": any(t.endswith(".Normalize") for t in types)}
    for module in modules if isinstance(modules, list) else []:
        if module.get("type", "").endswith(".Pooling"):
            pooling = read_json(os.path.join(directory, module.get("path", ""), "config.json"))
            options["pooling"] = sorted(k[len("pooling_mode_"):] for k, v in pooling.items()
                                        if k.startswith("pooling_mode_") and v is True)
    sbert_path = os.path.join(directory, "sentence_bert_config.json")
    if os.path.exists(sbert_path):
        options["max_seq_length"] = read_json(sbert_path).get("max_seq_length")
    return options


def convert_bert_to_run(source, out, allow_pickle=False):
    """Writes a kerasplm run directory for the BERT weights in ``source`` (a HuggingFace directory, or
    Google's layout when ``bert_config.json`` is there): config.json (family "bert", task "backbone", preset
    "custom"; ``model`` the :class:`BertBackbone`, ``preprocessor`` a :class:`BertPreprocessor` over the source's
    ``vocab.txt`` with its casing), the vocabulary as an asset, a checkpoint of the backbone. Returns the
    :class:`RunDir`.

    sentence-transformers' pooling / normalize / max_seq_length are recorded in the run's options
    (``sentence_embedding``) when ``modules.json`` is present. An existing run in ``out`` is not replaced.
    """
    run = RunDir(out)
    if run.exists():
        raise FileExistsError(f"{run.config_path} exists: {out} already holds a run (choose another --out)")
    google = os.path.exists(os.path.join(source, "bert_config.json"))
    backbone = load_tf_bert(source) if google else load_hf_bert(source, allow_pickle=allow_pickle)
    vocab_path = os.path.join(source, "vocab.txt")
    if not os.path.exists(vocab_path):
        raise ValueError(f"{vocab_path}: not found (the run needs the model's WordPiece vocabulary)")
    with open(vocab_path, encoding="utf-8") as f:
        run.write_text("vocab.txt", f.read())
    lower_case = True
    tokenizer_config = os.path.join(source, "tokenizer_config.json")
    if os.path.exists(tokenizer_config):
        lower_case = bool(read_json(tokenizer_config).get("do_lower_case", True))
    options = {"source": os.path.abspath(source), "format": "google" if google else "huggingface",
               "lower_case": lower_case}
    sentence = _sentence_embedding_options(source)
    if sentence is not None:
        options["sentence_embedding"] = sentence
    preprocessor = bert_run_preprocessor(BertTokenizer(run.file("vocab.txt"), lower_case=lower_case), backbone.config)
    backbone.check_preprocessor(preprocessor)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=backbone), run.checkpoint_dir, max_to_keep=1).save()
    run.write_config(RUN_FAMILY, "backbone", "custom", backbone, options, assets={"vocab": "vocab.txt"},
                     preprocessor=preprocessor)
    return run


def convert_bert_command(source, out, allow_pickle=False):
    """``kerasplm convert bert``: prints the new run directory."""
    print(convert_bert_to_run(source, out, allow_pickle=allow_pickle).path)


# ---------------------------------------------------------------------------- shared with the variants' converters
_PLAN_BUFFERS = ("position_ids", "token_type_ids")   # registered buffers some checkpoints save, not weights


def dense_plan(name, layer):
    """The plan entries of a ``Dense`` layer stored as PyTorch's ``Linear`` ``name`` (weight transposed)."""
    return [(f"{name}.weight", layer.kernel, True), (f"{name}.bias", layer.bias, False)]


def norm_plan(name, layer):
    """The plan entries of a ``LayerNormalization`` stored as PyTorch's ``LayerNorm`` ``name``."""
    return [(f"{name}.weight", layer.gamma, False), (f"{name}.bias", layer.beta, False)]


def assign_plan(plan, tensors, source, optional=()):
    """Assigns ``tensors`` (name -> array) through ``plan`` (``[(name, variable, transposed)]``: PyTorch's
    ``Linear`` stores (out, in), a Keras kernel (in, out)). Names in ``optional`` may be absent (their variables
    keep their values). Returns the absent optional names; one ValueError names every problem."""
    tensors = {k: v for k, v in tensors.items() if not k.endswith(_PLAN_BUFFERS)}
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


def split_prefix(tensors, prefix):
    """(backbone tensors without ``prefix``, the other tensors: a task's heads). A bare backbone (no name with
    the prefix) is all backbone."""
    if not any(k.startswith(prefix) for k in tensors):
        return tensors, {}
    return ({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)},
            {k: v for k, v in tensors.items() if not k.startswith(prefix)})


def check_activation(hf, key, allowed):
    """``hf[key]`` (default ``allowed[0]``), refused in one line unless it is one of ``allowed``."""
    act = hf.get(key, allowed[0])
    if act not in allowed:
        raise ValueError(f"{key}={act!r} is not supported (expected one of {list(allowed)})")
    return act


def pooler_plan(backbone):
    """The pooler's plan entries (BERT's ``pooler.dense``)."""
    return dense_plan("pooler.dense", backbone.pooler)


def bert_plan(backbone, projection="embeddings_project"):
    """BERT's HuggingFace names for ``backbone`` (pooler included), the E -> H projection named ``projection``."""
    plan = []
    for path, kind, variable in weight_map(backbone):
        name = hf_name(path, kind)
        if name.startswith("encoder.embedding_hidden_mapping_in."):
            name = name.replace("encoder.embedding_hidden_mapping_in", projection)
        plan.append((name, variable, kind == "kernel"))
    return plan


def mlm_head_plan(head, prefix, names):
    """An MLM head's weights under ``prefix`` with ``names`` = (dense, layer norm, bias)."""
    dense, norm, bias = names
    return (dense_plan(f"{prefix}{dense}", head.dense) + norm_plan(f"{prefix}{norm}", head.layer_norm)
            + [(f"{prefix}{bias}", head.bias, False)])


def tied_decoder(heads, name, tensors, directory):
    """Drops the decoder ``name`` from ``heads`` after checking it is the word-embedding table."""
    decoder = heads.pop(name, None)
    if decoder is not None and not np.array_equal(decoder, tensors["embeddings.word_embeddings.weight"]):
        raise ValueError(f"{directory}: {name} differs from the word embeddings (only a tied decoder is supported)")


def fresh_backbone(config):
    """A backbone of ``config`` whose weights the source does not hold (the pooler) are seeded draws."""
    keras.utils.set_random_seed(0)
    return BertBackbone.from_config_object(config)


def wordpiece_preprocessor(source, run, config):
    """The source's ``vocab.txt`` copied into the run and a BERT preprocessor over it (casing from
    ``tokenizer_config.json``, default uncased): a ``tokenizer_files`` of :func:`write_converted_run`."""
    vocab_path = os.path.join(source, "vocab.txt")
    if not os.path.exists(vocab_path):
        raise ValueError(f"{vocab_path}: not found (the run needs the model's WordPiece vocabulary)")
    lower_case = True
    tokenizer_config = os.path.join(source, "tokenizer_config.json")
    if os.path.exists(tokenizer_config):
        lower_case = bool(read_json(tokenizer_config).get("do_lower_case", True))
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


def converter_command(convert):
    """``kerasplm convert NAME``'s function for ``convert(source, out, allow_pickle)``: prints the run directory."""
    def command(source, out, allow_pickle=False):
        run = convert(source, out, allow_pickle=allow_pickle)
        print(run.path)
    command.__doc__ = f"``kerasplm convert``: {convert.__doc__.splitlines()[0]} Prints the run directory."
    return command
