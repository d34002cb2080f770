"""BERT weight conversion: Google's TF checkpoint layout, HuggingFace directories, error reporting."""
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.models.bert import convert
from kerasplm.models.bert import BertBackbone

TINY = dict(vocab_size=40, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32, max_positions=12)
INPUTS = {"token_ids": tf.constant([[2, 5, 6, 7, 3], [2, 9, 3, 0, 0]]),
          "segment_ids": tf.constant([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]]),
          "padding_mask": tf.constant([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])}


def tiny(seed=0):
    keras.utils.set_random_seed(seed)
    return BertBackbone(**TINY)


def outputs(model):
    return model(INPUTS, training=False)


def write_hf_dir(model, directory, prefix="", drop=(), extra=None):
    """Writes ``model`` as a HuggingFace directory (config.json + model.safetensors)."""
    from safetensors.numpy import save_file
    tensors = {}
    for path, kind, variable in convert.weight_map(model):
        value = variable.numpy()
        tensors[prefix + convert.hf_name(path, kind)] = value.T.copy() if kind == "kernel" else value
    for name in drop:
        del tensors[prefix + name]
    tensors.update(extra or {})
    directory.mkdir(exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(convert.config_to_hf(model.config)))


def test_google_tf_checkpoint_roundtrip(tmp_path):
    model = tiny()
    convert.save_tf_bert(model, str(tmp_path))
    names = dict(tf.train.list_variables(str(tmp_path / "bert_model.ckpt")))
    assert names["bert/embeddings/word_embeddings"] == [40, 16]
    assert names["bert/encoder/layer_1/attention/self/query/kernel"] == [16, 16]
    assert names["bert/encoder/layer_0/intermediate/dense/kernel"] == [16, 32]
    assert names["bert/encoder/layer_0/output/LayerNorm/gamma"] == [16]
    assert names["bert/pooler/dense/kernel"] == [16, 16]
    assert len(names) == len(model.weights)
    loaded = convert.load_tf_bert(str(tmp_path))
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(outputs(loaded)[key], outputs(model)[key], atol=1e-6)


def test_google_checkpoint_written_by_tf_saver_with_optimizer_slots(tmp_path):
    """A checkpoint written the way Google's code does (tf.compat.v1 Saver over named variables, with
    Adam slots and global_step beside the weights) loads; the extra state is ignored."""
    model = tiny()
    weights = [(convert.tf_name(path, kind), variable.numpy()) for path, kind, variable in convert.weight_map(model)]
    graph = tf.Graph()
    with graph.as_default():
        variables = []
        for name, value in weights:
            variables.append(tf.compat.v1.Variable(value, name=name))
            variables.append(tf.compat.v1.Variable(np.zeros_like(value), name=name + "/adam_m"))
        variables.append(tf.compat.v1.Variable(7, dtype=tf.int64, name="global_step"))
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(tmp_path / "bert_model.ckpt"))
    (tmp_path / "bert_config.json").write_text(json.dumps(convert.config_to_hf(model.config)))
    loaded = convert.load_tf_bert(str(tmp_path))
    np.testing.assert_allclose(outputs(loaded)["sequence_output"], outputs(model)["sequence_output"], atol=1e-6)


@pytest.mark.parametrize("prefix", ["", "bert."])
def test_hf_safetensors_roundtrip(tmp_path, prefix):
    pytest.importorskip("safetensors")
    model = tiny()
    extra = {"embeddings.position_ids": np.arange(12)[None]}
    if prefix:  # BertForPreTraining: the heads' tensors sit beside the backbone's
        extra["cls.predictions.bias"] = np.zeros(40, np.float32)
    write_hf_dir(model, tmp_path / "hf", prefix=prefix, extra=extra)
    loaded = convert.load_hf_bert(str(tmp_path / "hf"))
    np.testing.assert_allclose(outputs(loaded)["sequence_output"], outputs(model)["sequence_output"], atol=1e-6)


def test_hf_problems_are_listed_in_one_error(tmp_path):
    pytest.importorskip("safetensors")
    model = tiny()
    write_hf_dir(model, tmp_path / "hf", drop=["encoder.layer.1.output.dense.bias"],
                 extra={"encoder.layer.0.attention.self.key.weight": np.zeros((16, 15), np.float32),
                        "encoder.layer.7.output.dense.bias": np.zeros(16, np.float32)})
    with pytest.raises(ValueError) as error:
        convert.load_hf_bert(str(tmp_path / "hf"))
    message = str(error.value)
    assert "3 weight problem(s)" in message
    assert "missing encoder.layer.1.output.dense.bias (16,)" in message
    assert "shape of encoder.layer.0.attention.self.key.weight: (15, 16)" in message
    assert "unknown encoder.layer.7.output.dense.bias" in message


def test_pickle_checkpoint_needs_opt_in(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 40, "num_hidden_layers": 2, "hidden_size": 16,
                                                      "num_attention_heads": 2, "intermediate_size": 32}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(ValueError, match="allow_pickle=True"):
        convert.load_hf_bert(str(tmp_path))


def test_pytorch_bin_loads_with_allow_pickle(tmp_path):
    torch = pytest.importorskip("torch")
    model = tiny(seed=1)
    state = {convert.hf_name(path, kind): torch.tensor(v.numpy().T.copy() if kind == "kernel" else v.numpy())
             for path, kind, v in convert.weight_map(model)}
    state["embeddings.LayerNorm.gamma"] = state.pop("embeddings.LayerNorm.weight")  # the old spelling
    torch.save(state, str(tmp_path / "pytorch_model.bin"))
    (tmp_path / "config.json").write_text(json.dumps(convert.config_to_hf(model.config)))
    loaded = convert.load_hf_bert(str(tmp_path), allow_pickle=True)
    np.testing.assert_allclose(outputs(loaded)["sequence_output"], outputs(model)["sequence_output"], atol=1e-6)


def test_config_errors(tmp_path):
    with pytest.raises(ValueError, match="config.json: not found"):
        convert.load_hf_bert(str(tmp_path))
    with pytest.raises(ValueError, match="hidden_act='relu'"):
        convert.config_from_hf({"hidden_act": "relu"})
    with pytest.raises(ValueError, match="lacks"):
        convert.config_from_hf({"vocab_size": 3})
    config = tiny().config
    assert convert.config_from_hf(convert.config_to_hf(config)) == config


def test_matches_transformers_bert_model(tmp_path):
    """A randomly initialised ``transformers.BertModel`` saved with ``save_pretrained`` gives the same
    hidden states, attentions and pooled output here (torch on CPU)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                        intermediate_size=32, max_position_embeddings=12)
    reference = transformers.BertModel(hf_config).eval()
    reference.save_pretrained(str(tmp_path), safe_serialization=True)
    model = convert.load_hf_bert(str(tmp_path))
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor(INPUTS["token_ids"].numpy()),
                             token_type_ids=torch.tensor(INPUTS["segment_ids"].numpy()),
                             attention_mask=torch.tensor(INPUTS["padding_mask"].numpy()),
                             output_hidden_states=True, output_attentions=True)
    ours = model(INPUTS, training=False, output_hidden_states=True, output_attentions=True)
    real = INPUTS["padding_mask"].numpy().astype(bool)
    for mine, theirs in zip(ours["hidden_states"], expected.hidden_states):
        np.testing.assert_allclose(mine.numpy()[real], theirs.numpy()[real], atol=1e-5)
    for mine, theirs in zip(ours["attentions"], expected.attentions):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), atol=1e-5)
    np.testing.assert_allclose(ours["pooled_output"], expected.pooler_output.numpy(), atol=1e-5)


def test_cli_convert_writes_a_run_that_load_run_restores(tmp_path, capsys):
    pytest.importorskip("safetensors")
    from kerasplm import cli
    from kerasplm.runs import load_run

    model = tiny(seed=3)
    source = tmp_path / "hf"
    write_hf_dir(model, source)
    (source / "vocab.txt").write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
                                      + "".join(f"tok{i}\n" for i in range(5, 40)))
    (source / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (source / "1_Pooling").mkdir()
    (source / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True,
                                                                   "pooling_mode_cls_token": False}))
    (source / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 10}))
    out = tmp_path / "run"
    assert cli.main(["convert", "bert", "--from", str(source), "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["family"], config["preset"], config["assets"]) == ("bert", "custom", {"vocab": "vocab.txt"})
    assert config["model"]["class_name"] == "BertBackbone" and config["model"]["config"]["hidden_size"] == 16
    assert config["preprocessor"]["config"]["tokenizer"]["config"]["vocabulary"] == "vocab.txt"
    assert config["options"]["sentence_embedding"] == {"normalize": True, "pooling": ["mean_tokens"],
                                                        "max_seq_length": 10}
    assert (out / "vocab.txt").read_text() == (source / "vocab.txt").read_text()
    loaded = load_run(str(out))
    np.testing.assert_allclose(outputs(loaded)["sequence_output"], outputs(model)["sequence_output"], atol=1e-6)
    # A second conversion into the same run directory is refused with a one-line error (exit 2).
    capsys.readouterr()
    assert cli.main(["convert", "bert", "--from", str(source), "--out", str(out)]) == 2
    assert "already holds a run" in capsys.readouterr().err
