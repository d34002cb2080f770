"""Tiny random-weight exports of every family, built without training (a few seconds each), for the tests that
serve them. Each ``export_tiny_*(base)`` writes version 1 under ``base`` through the family's own export
function and returns the version directory; the run-writing helpers are shared with the export tests."""
import os

import keras
import numpy as np
import tensorflow as tf

from kerasplm.data.pretraining import BERT_SPECIAL_TOKENS

# The fill-mask run's vocabulary and model (tests/models/bert/test_fill_mask.py checks ids against them).
FILL_MASK_WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "this", "is", "normal", "sentence", ".", "word",
                   "##s"]
FILL_MASK_TINY = dict(vocab_size=len(BERT_SPECIAL_TOKENS) + len(FILL_MASK_WORDS), num_layers=1, hidden_size=16,
                      num_heads=2, intermediate_size=32, max_positions=24, dropout=0.0, attention_dropout=0.0)


# ---- run directories written directly (no training) -------------------------------------------------------
def write_tiny_gpt_run(path):
    """A GPT run directory at ``path`` (gpt_tiny, random weights, a 300-piece SentencePiece vocabulary, training
    step 7) written without training; returns ``path``."""
    from kerasplm.models.gpt.job import ASSETS
    from kerasplm.models.gpt.model import GPT, GPTBackbone
    from kerasplm.models.presets import get_preset
    from kerasplm.runs import RunDir
    from kerasplm.text import SentencePieceTokenizer, train_sentencepiece

    run = RunDir(str(path))
    words = "the king queen speaks walks to a castle garden and sleeps slowly where".split()
    lines = [" ".join(words[i:] + words[:i]) for i in range(len(words))]
    train_sentencepiece(lines, vocab_size=300, model_prefix=run.file("spm"), seed=0)
    config = get_preset("gpt_tiny", vocab_size=300)
    tf.keras.utils.set_random_seed(1)
    model = GPT(backbone=GPTBackbone.from_config_object(config, name="gpt_tiny"))
    run.write_config("gpt", "causal_lm", "gpt_tiny", model, {}, assets=ASSETS,
                     preprocessor=SentencePieceTokenizer(run.file(ASSETS["spm_model"])))
    step = tf.Variable(7, dtype=tf.int64)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model, step=step), run.checkpoint_dir, 1).save()
    return run.path


def write_tiny_pretraining_run(path):
    """A BERT pretraining run directory at ``path`` (config, vocabulary, checkpoint of a random NSP pretrainer
    over FILL_MASK_TINY) written without training; returns ``(path, pretrainer)``."""
    from kerasplm.models.bert.backbone import BertBackbone, bert_run_preprocessor
    from kerasplm.models.bert.pretrainer import BertPretrainer
    from kerasplm.runs import RunDir
    from kerasplm.text import WordPieceTokenizer

    run = RunDir(str(path))
    keras.utils.set_random_seed(1)
    pretrainer = BertPretrainer(BertBackbone(**FILL_MASK_TINY), sentence_task="nsp", name="tiny")
    run.write_text("vocab.txt", "\n".join([*BERT_SPECIAL_TOKENS, *FILL_MASK_WORDS]) + "\n")
    tf.train.CheckpointManager(tf.train.Checkpoint(model=pretrainer), run.checkpoint_dir, max_to_keep=1).save()
    preprocessor = bert_run_preprocessor(WordPieceTokenizer(run.file("vocab.txt")), pretrainer.backbone.config)
    run.write_config("bert", "pretraining", "custom", pretrainer, {"sentence_task": "nsp"},
                     assets={"vocab": "vocab.txt"}, preprocessor=preprocessor)
    return run.path, pretrainer


def write_tiny_classifier_run(path, labels=("negative", "positive"), sequence_length=16):
    """A ``bert_classifier`` run directory at ``path`` (what `kerasplm finetune bert-classifier` writes: the QA
    toy's tiny BERT with a random head, its vocabulary, ``labels`` as class names) written without training;
    returns ``path``."""
    from kerasplm.models.bert.finetuning import BERT_ASSETS
    from kerasplm.models.bert.backbone import BertBackbone
    from kerasplm.models.bert.classifier import BertClassifier
    from kerasplm.runs import RunDir
    from kerasplm.text import BertPreprocessor, BertTokenizer
    from tests.models.bert.qa_toy import TINY, VOCAB

    run = RunDir(str(path))
    run.write_text(BERT_ASSETS["vocab"], "\n".join(VOCAB) + "\n")
    preprocessor = BertPreprocessor(BertTokenizer(run.file(BERT_ASSETS["vocab"])), sequence_length)
    keras.utils.set_random_seed(2)
    model = BertClassifier(BertBackbone(**TINY), len(labels), preprocessor=preprocessor, dropout=0.0,
                           labels=list(labels))
    model(preprocessor(tf.constant(["where does john live ?"])))   # builds the head: its weights are saved too
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), run.checkpoint_dir, max_to_keep=1).save()
    run.write_config("bert_classifier", "sequence_classification", "custom", model, {}, assets=BERT_ASSETS,
                     preprocessor=preprocessor)
    return run.path


# ---- exports ----------------------------------------------------------------------------------------------
def export_tiny_translator(base, sentences=()):
    """A random-weight transformer_tiny translator (16 positions, beam sizes up to 2) exported to ``base``; its
    source vocabulary also covers ``sentences``."""
    from kerasplm.data import read_parallel_tsv, sample_path
    from kerasplm.models.translator import export_translator
    from kerasplm.models.translator.job import Translator
    from kerasplm.models.transformer.model import Transformer
    from kerasplm.runs import attach_run_info
    from kerasplm.text import TranslatorPreprocessor, WordPieceTokenizer, build_wordpiece_vocab, write_vocab

    root = os.path.dirname(base)
    src, tgt = read_parallel_tsv(sample_path("spa-eng-train.tsv"), src_col=1, tgt_col=0, max_pairs=60)
    paths = {}
    for name, texts in (("src", src + list(sentences)), ("tgt", tgt)):
        paths[name] = os.path.join(root, f"{name}_vocab.txt")
        write_vocab(build_wordpiece_vocab(texts, vocab_size=200, learn_params=dict(lower_thresh=1)), paths[name])
    src_tok, tgt_tok = WordPieceTokenizer(paths["src"]), WordPieceTokenizer(paths["tgt"])
    tf.keras.utils.set_random_seed(3)
    model = Transformer.from_preset("transformer_tiny", src_tok.vocab_size, tgt_tok.vocab_size, pe_input=16,
                                    pe_target=16)
    attach_run_info(model, root, {"family": "transformer_translator", "preset": "transformer_tiny"}, 1)
    translator = Translator(model, TranslatorPreprocessor(src_tok, tgt_tok, max_source_length=model.max_source_length))
    translator.vocab_paths = paths
    return export_translator(translator, base, max_beam_size=2)


def write_tiny_rnn_translator_run(path, preset="gru_bahdanau_tiny", sentences=(), max_length=16):
    """A translator run directory at ``path`` with a random-weight RNN encoder-decoder of ``preset`` (sources cut
    and outputs capped at ``max_length`` tokens), WordPiece vocabularies of 60 bundled pairs (plus ``sentences``
    on the source side), training step 7, written without training; returns ``path``."""
    from kerasplm.data import read_parallel_tsv, sample_path
    from kerasplm.models.translator.job import ASSETS, FAMILY
    from kerasplm.models.rnn_seq2seq.model import RNNSeq2Seq
    from kerasplm.runs import RunDir
    from kerasplm.text import TranslatorPreprocessor, WordPieceTokenizer, build_wordpiece_vocab, write_vocab

    run = RunDir(str(path))
    os.makedirs(run.path, exist_ok=True)
    src, tgt = read_parallel_tsv(sample_path("spa-eng-train.tsv"), src_col=1, tgt_col=0, max_pairs=60)
    for asset, texts in (("source_vocab", src + list(sentences)), ("target_vocab", tgt)):
        write_vocab(build_wordpiece_vocab(texts, vocab_size=200, learn_params=dict(lower_thresh=1)),
                    run.file(ASSETS[asset]))
    src_tok, tgt_tok = (WordPieceTokenizer(run.file(ASSETS[a])) for a in ("source_vocab", "target_vocab"))
    tf.keras.utils.set_random_seed(3)
    model = RNNSeq2Seq.from_preset(preset, src_tok.vocab_size, tgt_tok.vocab_size, max_source_length=max_length,
                                   max_target_length=max_length)
    preprocessor = TranslatorPreprocessor(src_tok, tgt_tok, max_source_length=max_length)
    run.write_config(FAMILY, "translation", preset, model, {}, assets=ASSETS, preprocessor=preprocessor)
    step = tf.Variable(7, dtype=tf.int64)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model, step=step), run.checkpoint_dir, 1).save()
    return run.path


def export_tiny_generator(base, max_new_tokens=4):
    """The gpt_tiny run of :func:`write_tiny_gpt_run` exported to ``base`` (one prompt width, 16 tokens)."""
    from kerasplm.models.gpt.export import export_generator
    from kerasplm.models.gpt.job import load_text_generator

    run = write_tiny_gpt_run(os.path.join(os.path.dirname(base), "gpt_run"))
    return export_generator(load_text_generator(run), base, max_new_tokens=max_new_tokens, max_prompt_tokens=16)


def export_tiny_embedder(base):
    """The QA toy's random tiny BERT run exported as a mean-pooled, normalized embedder (16 tokens)."""
    from kerasplm.models.sentence_embedding.embedder_export import export_embedder
    from tests.models.bert.qa_toy import make_init_run

    return export_embedder(make_init_run(os.path.join(os.path.dirname(base), "embedder_run")), base,
                           sequence_length=16)


def export_tiny_classifier(base):
    """The run of :func:`write_tiny_classifier_run` exported with :func:`export_classifier`."""
    from kerasplm.export.classifier import export_classifier

    return export_classifier(write_tiny_classifier_run(os.path.join(os.path.dirname(base), "classifier_run")), base)


def export_tiny_tagger(base):
    """The tagger tests' tiny BERT token classifier (TAGS), its head biased so that random weights still find
    entities, exported with 16-token windows."""
    from kerasplm.models.bert.tagger_export import export_tagger
    from kerasplm.models.bert.tagger import BertTaggerPreprocessor
    from kerasplm.text import WordPieceTokenizer
    from tests.models.bert.tagger_toy import TAGS, VOCAB, tiny_tagger

    model = tiny_tagger()
    model.head.bias.assign(np.array([0.0, -5.0, -5.0, 0.2, 0.1], np.float32))   # B-PER, then I-PER
    return export_tagger(model, BertTaggerPreprocessor(WordPieceTokenizer(VOCAB), sequence_length=16), TAGS, base)


def export_tiny_qa(base):
    """A random question answerer over the QA toy's tiny BERT (32-token windows, stride 8)."""
    from kerasplm.models.bert.question_answering_export import export_qa
    from kerasplm.models.bert.question_answering_job import BertQA
    from kerasplm.models.bert.backbone import BertBackbone
    from kerasplm.models.bert.question_answering import BertQuestionAnswerer, QuestionAnswerPreprocessor
    from kerasplm.text import BertTokenizer
    from tests.models.bert.qa_toy import TINY, VOCAB

    keras.utils.set_random_seed(4)
    preprocessor = QuestionAnswerPreprocessor(BertTokenizer(VOCAB), sequence_length=32, doc_stride=8,
                                              max_query_length=8, pad_to_length=False)
    return export_qa(BertQA(BertQuestionAnswerer(BertBackbone(**TINY), preprocessor=preprocessor)), base)


def export_tiny_fill_mask(base, top_k=3):
    """The pretraining run of :func:`write_tiny_pretraining_run` exported as fill-mask."""
    from kerasplm.models.bert.fill_mask import export_fill_mask

    run, _ = write_tiny_pretraining_run(os.path.join(os.path.dirname(base), "pretraining_run"))
    return export_fill_mask(run, base, top_k=top_k)


def export_tiny_elmo(base):
    """A random elmo_tiny biLM (a 3-word vocabulary: characters do the work) exported to ``base``."""
    from kerasplm.models.elmo.export import export_elmo
    from kerasplm.models.elmo.model import ElmoBiLM
    from kerasplm.models.elmo.runs import Elmo

    keras.utils.set_random_seed(5)
    return export_elmo(Elmo(ElmoBiLM.from_preset("elmo_tiny", dropout=0.0), ["<S>", "</S>", "<UNK>"]), base)
