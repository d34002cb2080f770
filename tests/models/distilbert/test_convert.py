"""HF DistilBERT -> a ``bert`` run (``kerasplm convert distilbert``): hidden states against ``transformers`` on a
tiny randomly initialized model saved to a temp dir, the run's in-graph tokenizer against the HF tokenizer of the
same files on hard inputs, and one error naming every weight problem."""
import json
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from kerasplm import cli  # noqa: E402
from kerasplm.runs import load_run  # noqa: E402
from tests.models.bert.hf_variants import (WORDPIECE_VOCAB, assert_hidden_states_match, assert_same_ids,  # noqa: E402
                                           convert, hf_outputs, ours, randomize, save)


@pytest.fixture(scope="module")
def distilbert(tmp_path_factory):
    config = transformers.DistilBertConfig(vocab_size=len(WORDPIECE_VOCAB), dim=16, n_layers=2, n_heads=2,
                                           hidden_dim=32, max_position_embeddings=12)
    model = randomize(transformers.DistilBertForMaskedLM(config))
    source = save(model, tmp_path_factory.mktemp("hf_distilbert"))
    return source, model, convert("distilbert", source, tmp_path_factory.mktemp("runs") / "distilbert")


def test_distilbert_hidden_states_and_token_ids_match_transformers(distilbert):
    source, model, run_dir = distilbert
    loaded = load_run(run_dir)
    config = json.loads(open(os.path.join(run_dir, "config.json")).read())
    assert (config["task"], config["options"]["model"], config["options"]["fresh_pooler"]) == (
        "backbone", "distilbert", True)
    assert loaded.config.num_segments == 0 and not hasattr(loaded.embeddings, "segment_embedding")
    assert_hidden_states_match(ours(loaded)["hidden_states"], hf_outputs(model.distilbert, segments=False).hidden_states)
    assert_same_ids(run_dir, transformers.DistilBertTokenizer(os.path.join(source, "vocab.txt")))


def test_distilbert_errors_name_every_problem(distilbert, tmp_path):
    from safetensors.numpy import load_file, save_file

    source, _, _ = distilbert
    tensors = load_file(os.path.join(source, "model.safetensors"))
    del tensors["distilbert.transformer.layer.1.ffn.lin2.bias"]
    tensors["distilbert.transformer.layer.0.ffn.lin1.weight"] = tensors[
        "distilbert.transformer.layer.0.ffn.lin1.weight"][:5]
    tensors["distilbert.transformer.layer.0.rotary.weight"] = np.zeros(3, np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    for name in ("config.json", "vocab.txt"):
        (tmp_path / name).write_bytes(open(os.path.join(source, name), "rb").read())
    with pytest.raises(ValueError) as error:
        from kerasplm.models.distilbert.convert import load_hf_distilbert
        load_hf_distilbert(str(tmp_path))
    message = str(error.value)
    assert "3 weight problem(s)" in message and "missing transformer.layer.1.ffn.lin2.bias (16,)" in message
    assert "shape of transformer.layer.0.ffn.lin1.weight: (16, 5) (transposed), expected (16, 32)" in message
    assert "unknown transformer.layer.0.rotary.weight (3,)" in message
    assert cli.main(["convert", "distilbert", "--from", str(tmp_path), "--out", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()
