"""The fill-mask SavedModel: outputs against the Keras model, the export contract, texts without [MASK], CLI."""
import numpy as np
import pytest
import tensorflow as tf

from kerasplm.data.pretraining import BERT_SPECIAL_TOKENS
from kerasplm.models.bert.fill_mask import FillMaskModule, export_fill_mask
from kerasplm.text import WordPieceTokenizer
from tests.export.contract import check_bad_inputs, check_batch_safe, check_warmup, run_isolated
from tests.export.tiny_exports import FILL_MASK_WORDS, write_tiny_pretraining_run

WORDS = FILL_MASK_WORDS


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A pretraining run directory written directly (config, vocabulary, checkpoint of a random pretrainer)."""
    return write_tiny_pretraining_run(tmp_path_factory.mktemp("fill_mask") / "run")


@pytest.fixture(scope="module")
def exported(run_dir, tmp_path_factory):
    return export_fill_mask(run_dir[0], str(tmp_path_factory.mktemp("fill_mask_export")), top_k=3)


def test_outputs_match_the_model_and_masks_are_counted(run_dir):
    pretrainer = run_dir[1]
    module = FillMaskModule(pretrainer, WordPieceTokenizer([*BERT_SPECIAL_TOKENS, *WORDS]), top_k=3)
    out = module.serving_default(tf.constant(["the [MASK] sat on the [MASK].", "no mask here", ""]))
    assert out["token"].shape == (3, 2, 3) and list(out["mask_count"].numpy()) == [2, 0, 0]
    # [CLS] the [MASK] sat on the [MASK] . [SEP]: masks at positions 2 and 6.
    ids = [2, 5, 4, 7, 8, 5, 4, 16, 3]
    logits = pretrainer({"token_ids": tf.constant([ids]), "segment_ids": tf.zeros([1, 9], tf.int32),
                         "padding_mask": tf.ones([1, 9], tf.int32), "masked_positions": tf.constant([[2, 6]])})
    probs = tf.nn.softmax(logits["mlm_logits"]).numpy()[0]
    vocab = [*BERT_SPECIAL_TOKENS, *WORDS]
    for m in range(2):
        best = np.argsort(-probs[m])[:3]
        assert [t.decode() for t in out["token"][0, m].numpy()] == [vocab[i] for i in best]
        np.testing.assert_allclose(out["score"][0, m].numpy(), probs[m][best], rtol=1e-5)
    # Texts without [MASK]: mask_count 0 and only padding rows.
    assert (out["token"].numpy()[1:] == b"").all() and (out["score"].numpy()[1:] == 0).all()


def test_export_contract(exported):
    masked = "the [MASK] sat on the mat ."
    outputs = run_isolated(exported, [("serving_default", {"text": [masked, "plain text"]})])[0]
    assert outputs["mask_count"] == [1, 0] and len(outputs["token"][0][0]) == 3
    assert outputs["token"][1] == [["", "", ""]]

    def output_check(texts, outputs):
        for text, count in zip(texts, outputs["mask_count"]):
            expected = text.count("[MASK]") if isinstance(text, str) else 0
            assert count <= expected and (count == expected or len(text) > 100)
        assert (outputs["score"] >= 0).all() and (outputs["score"] <= 1).all()

    alone = check_bad_inputs(exported, "serving_default", "text", output_check=output_check, normal=masked,
                             extra_bad={"only_masks": "[MASK] " * 40, "glued": "a[MASK].[MASK]"})
    assert alone["only_masks"]["mask_count"][0] == 22          # cut to 24 tokens: [CLS] + 22 masks + [SEP]
    assert alone["glued"]["mask_count"][0] == 2
    for label in ("empty", "whitespace", "long", "invalid_utf8"):
        assert alone[label]["mask_count"][0] == 0


def test_cli_fill_mask_and_export(run_dir, tmp_path, capsys):
    from kerasplm.cli import main

    assert main(["fill-mask", "--run", run_dir[0], "--top-k", "2", "the [MASK] sat", "no mask"]) == 0
    printed = capsys.readouterr().out
    assert "[MASK] 1:" in printed and "(no [MASK] in this text)" in printed
    assert main(["export", "fill-mask", "--run", run_dir[0], "--to", str(tmp_path / "fm")]) == 0
    assert (tmp_path / "fm" / "1" / "saved_model.pb").exists()
    assert main(["fill-mask", "--run", str(tmp_path / "missing"), "x"]) == 2


def test_batch_safe_with_warmup_records(exported):
    """TF Serving's batching rule holds for every signature, and the warmup records cover and replay on each."""
    check_batch_safe(exported)
    check_warmup(exported)
