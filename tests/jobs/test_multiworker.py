"""``kerasplm train`` / ``finetune`` as two MultiWorkerMirroredStrategy workers on 127.0.0.1 against one process, for
the jobs whose distributed path has something of its own: the translator (the main job), BERT pretraining (its
sharded batches), ELMo (the sampled softmax's negatives) and the BERT classifier (the tokenizer loaded outside the
strategy's scope, pretrained weights copied in under it). GPT's job reaches the strategy through the same Job base
and Trainer dataset path as the translator's; benchmarks/bench_scaling.py runs it as two workers.

One fixture per family runs the real CLI three times at once (tests/jobs/multiworker.py): ``--distribute default``,
and ``--distribute multi-worker`` as worker 0 (the chief) and worker 1 of a two-worker ``TF_CONFIG``, each in its
own directory with the same ``--out``. Two tests read it: the chief's run equals the single process's (config,
assets, files; history losses within the tolerance below) and the non-chief wrote no run file. Tiny presets, a few
steps, dropout off, a held-out evaluation after every step (``--eval-every 1``: the history then holds the
held-out loss after each update, and the training loss of the whole window).

Tolerance. The workers sum each global batch's losses and gradients in another order than one process does
(their halves, then the all-reduce): float32 rounding, nothing else. The batches are the same (the Trainer gives
its datasets tf.data's DATA auto-sharding: each worker makes the single run's global batches and keeps its half of
each; checked batch by batch on the BERT job), and the optimizer gets the same summed gradient (the Trainer hands it
dense gradients; before, Keras' Adam squared each replica's slice of BERT's position embeddings apart and the
chief's held-out loss was 3e-4 off after 3 steps). Measured after 3 steps: at most 2e-7 relative (translator, BERT,
ELMo). RTOL leaves a factor 50 for other machines; a worker fed other data than its half of the global batch moves
the losses by percents.
"""
import pytest

from tests.harness import write_word_corpus
from tests.jobs.multiworker import check_matches_single, check_non_chief_wrote_nothing, train_single_and_two_workers
from tests.models.bert.pretraining_toy import write_pretraining_corpus

RTOL = 1e-5
QUICK = ["--steps", "3", "--eval-every", "1", "--quiet"]


# ------------------------------------------------------------------------------------------------ translator
PAIRS = [("I am happy.", "Estoy feliz."), ("You are happy.", "Estás feliz."), ("He is happy.", "Él está feliz."),
         ("I am hungry.", "Tengo hambre."), ("Be brief.", "Sé breve."), ("Go away.", "Vete."),
         ("I see.", "Ya veo."), ("Come in.", "Pasa."), ("Thanks.", "Gracias."), ("Hello!", "¡Hola!")]


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    root = tmp_path_factory.mktemp("multiworker_translator")
    data = root / "pairs.tsv"
    data.write_text("".join(f"{en}\t{es}\n" for en, es in PAIRS * 3), encoding="utf-8")
    return train_single_and_two_workers(root, "translator", [
        "--data", str(data), "--preset", "transformer_tiny", "--dropout", "0", "--batch-size", "8",
        "--vocab-size", "200", "--dev-size", "2", "--schedule", "budget", "--peak-learning-rate", "1e-3",
        "--bleu-max-sentences", "0", "--export-to", "none", *QUICK])


def test_translator_two_workers_match_one_process(translator):
    check_matches_single(translator, rtol=RTOL)


def test_translator_non_chief_writes_no_run_file(translator):
    check_non_chief_wrote_nothing(translator)


# ------------------------------------------------------------------------------------------------ BERT
@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    import numpy as np

    root = tmp_path_factory.mktemp("multiworker_bert")
    corpus, vocab = write_pretraining_corpus(root, np.random.default_rng(0))
    return train_single_and_two_workers(root, "bert", [
        "--corpus", corpus, "--vocab", vocab, "--preset", "bert_tiny",
        "--dropout", "0", "--max-seq-length", "24", "--max-predictions-per-seq", "4", "--batch-size", "4",
        "--dev-documents", "2", "--learning-rate", "1e-3", "--warmup-steps", "1", *QUICK])


def test_bert_two_workers_match_one_process(bert):
    history, _ = check_matches_single(bert, rtol=RTOL)
    assert bert.chief.json("metrics.json")["step"] == 3
    assert "eval_mlm_accuracy" in history and "eval_nsp_loss" in history


def test_bert_non_chief_writes_no_run_file(bert):
    check_non_chief_wrote_nothing(bert)


# ------------------------------------------------------------------------------------------------ ELMo
ELMO_WORDS = "the a cat dog sat ran on under mat log big small red old".split()


@pytest.fixture(scope="module")
def elmo(tmp_path_factory):
    root = tmp_path_factory.mktemp("multiworker_elmo")
    corpus = write_word_corpus(root, ELMO_WORDS, 60, end=" .")
    # num_sampled < the vocabulary: the sampled softmax trains (its negatives are drawn alike on every replica).
    return train_single_and_two_workers(root, "elmo", [
        "--corpus", corpus, "--preset", "elmo_tiny", "--dropout", "0", "--vocab-size", "12", "--num-sampled", "6",
        "--window", "8", "--batch-size", "4", "--seed", "3", *QUICK])


def test_elmo_two_workers_match_one_process(elmo):
    history, _ = check_matches_single(elmo, keys=("loss", "eval_loss", "eval_forward_loss", "eval_backward_loss"),
                                      rtol=RTOL)
    assert elmo.chief.json("metrics.json")["sampled_softmax"] is True


def test_elmo_non_chief_writes_no_run_file(elmo):
    check_non_chief_wrote_nothing(elmo)


# ------------------------------------------------------------------------------------------------ fine-tuning
@pytest.fixture(scope="module")
def bert_classifier(tmp_path_factory):
    """``kerasplm finetune bert-classifier`` from a tiny converted BERT without dropout: the tokenizer is loaded outside
    MultiWorkerMirroredStrategy's scope, the pretrained weights copied into a backbone built under it."""
    import keras

    from kerasplm.models.bert.convert import convert_bert_to_run, save_tf_bert
    from kerasplm.models.bert.backbone import BertBackbone
    from kerasplm.text import write_vocab
    from tests.models.bert.classifier_toy import NAMES, TINY, VOCAB, toy_examples, write_tsv

    root = tmp_path_factory.mktemp("multiworker_bert_classifier")
    keras.utils.set_random_seed(0)
    save_tf_bert(BertBackbone(**TINY, dropout=0.0, attention_dropout=0.0), str(root / "google"))
    write_vocab(VOCAB, str(root / "google" / "vocab.txt"))
    init = convert_bert_to_run(str(root / "google"), str(root / "init")).path
    train = write_tsv(root / "train.tsv", [(t, NAMES[y]) for t, y in toy_examples(64, 0)], ["sentence", "label"])
    return train_single_and_two_workers(root, "bert-classifier", [
        "--train", train, "--init", init, "--dropout", "0", "--max-length", "16", "--batch-size", "8",
        "--learning-rate", "1e-3", "--steps", "3", "--quiet"], verb="finetune")


def test_bert_classifier_two_workers_match_one_process(bert_classifier):
    history, _ = check_matches_single(bert_classifier, keys=("loss",), rtol=RTOL)
    assert bert_classifier.chief.json("metrics.json")["step"] == 3


def test_bert_classifier_non_chief_writes_no_run_file(bert_classifier):
    check_non_chief_wrote_nothing(bert_classifier)
