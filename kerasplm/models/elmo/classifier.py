"""A small BiLSTM sentence classifier with optional ELMo features (Peters et al. 2018, §3.3 "Using biLMs for
supervised NLP tasks").

The paper's recipe: freeze the biLM, and concatenate ELMo_k (a task-specific :class:`ScalarMix` of its L+1
layers) with the task model's context-independent token vector x_k, feeding ``[x_k; ELMo_k]`` into the task
RNN; optionally also ``[h_k; ELMo'_k]`` at the RNN's output, with a second mix. Here the task model is::

    x_k   = word embedding of token k (static, learned from the task's data)       (batch, n, E)
    r_k   = [x_k; ELMo_k]  (or x_k alone without a biLM)                            (batch, n, E [+ 2P])
    h_k   = BiLSTM(dropout(r))_k                                                   (batch, n, 2H)
    h_k   = [h_k; ELMo'_k] if the embedder has a second mix                        (batch, n, 2H [+ 2P])
    z     = max over real tokens k of h_k  (padding excluded)                      (batch, 2H [+ 2P])
    logits = W dropout(z) + b                                                      (batch, num_labels)

Inputs (:class:`ClassifierPreprocessor` makes them from strings): ``{"word_ids": (batch, n) int (0 = padding,
1 = unknown word), "char_ids": (batch, n, C) int}`` (bilm-tf character ids of the same tokens, 0 rows past each
sentence's end; only read when there is a biLM).

Both are run objects (:mod:`kerasplm.runs.serialization`): the classifier's Keras config holds its sizes, its
class names (``labels``) and its embedder (the biLM's config, the mixes); the preprocessor's holds the name of its
word vocabulary file (a run's ``words.txt``: tens of thousands of words, kept out of ``config.json``) and its lengths.
"""
import os

import keras
import numpy as np
import tensorflow as tf

from kerasplm.layers.dropout import Dropout
from kerasplm.models.base import Task
from kerasplm.models.elmo.model import ElmoEmbedder
from kerasplm.runs.serialization import asset_name, asset_path, serializable
from kerasplm.text.characters import MAX_CHARACTERS, sentence_char_ids
# A word vocabulary file's lines (the shared reader; importable from here as before).
from kerasplm.text.word_vocab import read_word_list
from kerasplm.training.losses import classification_loss_sums

PAD, UNK = "<PAD>", "<UNK>"

__all__ = ["ElmoClassifier", "ClassifierPreprocessor", "PAD", "UNK", "read_word_list"]


@serializable
class ClassifierPreprocessor(tf.Module):
    """Strings -> the classifier's inputs, in graph: whitespace tokens (the first ``max_length``), their word ids
    in ``vocab`` (a list, or a file of one word per line, whose entries 0 and 1 are ``<PAD>`` and ``<UNK>``) and
    their bilm-tf character ids. Made from a file, its config names the file (relative to the run being written).

    Call: ``text`` string ``(batch,)`` [, ``pair`` ignored: single sentences only] ->
    ``{"word_ids": int32 (batch, n), "char_ids": int32 (batch, n, max_characters)}``: n is the longest sentence
    rounded up to a multiple of ``pad_to_multiple`` (at most ``max_length``), so that a training step is traced
    for a few widths only, not for every batch's own.
    """

    def __init__(self, vocab, max_length=64, max_characters=MAX_CHARACTERS, pad_to_multiple=16, name=None):
        super().__init__(name=name)
        # Not a tracked attribute (a string): the checkpoint's object graph stays what it was.
        self._vocabulary_file = os.fspath(vocab) if isinstance(vocab, (str, os.PathLike)) else None
        if self._vocabulary_file is not None:
            vocab = read_word_list(self._vocabulary_file)
        if list(vocab[:2]) != [PAD, UNK]:
            where = f"{self._vocabulary_file}: " if self._vocabulary_file else ""
            raise ValueError(f"{where}the word vocabulary must start with {PAD}, {UNK}; got {list(vocab[:2])}")
        self.vocab, self.max_length, self.max_characters = list(vocab), int(max_length), int(max_characters)
        self.pad_to_multiple = int(pad_to_multiple)
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(self.vocab[2:], tf.string),
                                                tf.range(2, len(self.vocab), dtype=tf.int32)), default_value=1)

    @property
    def vocabulary_file(self):
        """The file the vocabulary was read from (None when given as a list)."""
        return self._vocabulary_file

    @property
    def vocab_size(self):
        return len(self.vocab)

    def get_config(self):
        vocab = asset_name(self._vocabulary_file) if self._vocabulary_file else list(self.vocab)
        return {"vocab": vocab, "max_length": self.max_length, "max_characters": self.max_characters,
                "pad_to_multiple": self.pad_to_multiple, "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        vocab = config.pop("vocab")
        return cls(asset_path(vocab) if isinstance(vocab, str) else vocab, **config)

    def __call__(self, text, pair=None):
        tokens = tf.strings.split(text)[:, :self.max_length]
        word_ids = tf.ragged.map_flat_values(self.table.lookup, tokens).to_tensor(default_value=0)
        char_ids = sentence_char_ids(tokens, self.max_characters, add_boundaries=False)
        n, m = tf.shape(word_ids)[1], self.pad_to_multiple
        extra = tf.minimum((n + m - 1) // m * m, self.max_length) - n
        return {"word_ids": tf.pad(word_ids, [[0, 0], [0, extra]]), "char_ids": tf.pad(char_ids, [[0, 0], [0, extra], [0, 0]])}


@keras.saving.register_keras_serializable(package="kerasplm")
class ElmoClassifier(Task):
    """BiLSTM classifier over static word embeddings, with ELMo at its input (and output) when given an embedder.

    Args:
      vocab_size: word vocabulary size (ids 0 = padding, 1 = unknown).
      num_labels: classes (>= 2); default ``len(labels)``.
      embedder: an :class:`kerasplm.models.elmo.model.ElmoEmbedder` (frozen biLM, trainable mixes) or None (static
        embeddings alone). With ``num_mixes=2`` its second mix is also concatenated to the BiLSTM's output.
      embedding_dim, lstm_units: E and H above.
      dropout: on the BiLSTM's input and on the pooled vector.
      labels: the class names (strings, ``num_labels`` of them; stored in the config) or None.
    Call: the inputs dict -> float32 logits ``(batch, num_labels)``. Training batches are ``(inputs, labels)``.
    """

    def __init__(self, vocab_size, num_labels=None, embedder=None, embedding_dim=100, lstm_units=64, dropout=0.3,
                 labels=None, preprocessor=None, **kwargs):
        super().__init__(embedder, preprocessor=preprocessor, **kwargs)
        if labels is not None:
            labels = [str(x) for x in labels]
            if num_labels is None:
                num_labels = len(labels)
            elif num_labels != len(labels):
                raise ValueError(f"{len(labels)} labels for num_labels={num_labels}")
        if num_labels is None or num_labels < 2:
            raise ValueError(f"num_labels must be at least 2, got {num_labels}")
        if embedder is not None and not isinstance(embedder, ElmoEmbedder):
            raise TypeError(f"embedder must be an ElmoEmbedder or None, got {type(embedder).__name__}")
        self.vocab_size, self.num_labels = int(vocab_size), int(num_labels)
        self.labels = labels
        self.embedding_dim, self.lstm_units, self.dropout_rate = int(embedding_dim), int(lstm_units), float(dropout)
        self.word_embedding = keras.layers.Embedding(vocab_size, embedding_dim, name="word_embedding")
        self.input_dropout = Dropout(dropout, name="input_dropout")
        self.bilstm = keras.layers.Bidirectional(keras.layers.LSTM(lstm_units, return_sequences=True), name="bilstm")
        self.output_dropout = Dropout(dropout, name="output_dropout")
        self.head = keras.layers.Dense(num_labels, name="classifier")
        self.build()

    @property
    def elmo_dim(self):
        return 0 if self.backbone is None else 2 * self.backbone.bilm.config.output_dim

    @property
    def elmo_at_output(self):
        return self.backbone is not None and self.backbone.num_mixes > 1

    def build(self, input_shape=None):
        self.word_embedding.build((None, None))
        self.bilstm.build((None, None, self.embedding_dim + self.elmo_dim))
        if self.backbone is not None:
            self.backbone.build()
        self.head.build((None, 2 * self.lstm_units + (self.elmo_dim if self.elmo_at_output else 0)))
        self.built = True

    def call(self, inputs, training=None):
        word_ids = tf.cast(inputs["word_ids"], tf.int32)
        mask = word_ids > 0
        x = self.word_embedding(word_ids)                                              # x_k
        elmo = self.backbone(inputs["char_ids"])["elmo_representations"] if self.backbone is not None else None
        if elmo is not None:
            x = tf.concat([x, tf.cast(elmo[0], x.dtype)], axis=-1)                    # [x_k; ELMo_k]
        h = self.bilstm(self.input_dropout(x, training=training), mask=mask, training=training)
        if self.elmo_at_output:
            h = tf.concat([h, tf.cast(elmo[1], h.dtype)], axis=-1)                    # [h_k; ELMo'_k]
        pooled = tf.reduce_max(tf.where(mask[:, :, None], h, tf.cast(-1e9, h.dtype)), axis=1)
        pooled = tf.where(tf.reduce_any(mask, axis=1, keepdims=True), pooled, tf.zeros_like(pooled))  # empty text
        return tf.cast(self.head(self.output_dropout(pooled, training=training)), tf.float32)

    @tf.autograph.experimental.do_not_convert
    def compute_loss_sums(self, batch, training):
        """``batch = (inputs, labels int (batch,))`` -> ``{"loss": Σ cross-entropy, "weight": batch, "accuracy": correct}``."""
        inputs, labels = batch
        return classification_loss_sums(labels, self(inputs, training=training))

    def predict_texts(self, texts, batch_size=64):
        """Class probabilities ``(N, num_labels)`` of a list of strings, through the preprocessor."""
        if self.preprocessor is None:
            raise ValueError("predict_texts needs a preprocessor (ElmoClassifier(..., preprocessor=...))")
        chunks = [self(self.preprocessor(tf.constant(list(texts[i:i + batch_size]), tf.string)), training=False)
                  for i in range(0, len(texts), batch_size)]
        logits = np.concatenate([c.numpy() for c in chunks]) if chunks else np.zeros((0, self.num_labels), np.float32)
        return tf.nn.softmax(logits).numpy()

    def check_preprocessor(self, preprocessor):
        """ValueError naming the word vocabulary file when ``preprocessor`` does not fit this model: another number
        of words than the embedding's rows, or other characters per token than the biLM reads."""
        where = getattr(preprocessor, "vocabulary_file", None) or "the word vocabulary"
        if preprocessor.vocab_size != self.vocab_size:
            raise ValueError(f"{where}: {preprocessor.vocab_size} words, but the model has {self.vocab_size}; the "
                             f"file is damaged or from another run")
        if self.backbone is not None:
            chars = self.backbone.bilm.config.max_characters_per_token
            if preprocessor.max_characters != chars:
                raise ValueError(f"the preprocessor of {where} makes {preprocessor.max_characters} characters per "
                                 f"token, the biLM reads {chars}")

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "num_labels": self.num_labels,
                "embedding_dim": self.embedding_dim, "lstm_units": self.lstm_units, "dropout": self.dropout_rate,
                "labels": None if self.labels is None else list(self.labels)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        backbone = config.pop("backbone", None)
        config["embedder"] = keras.saving.deserialize_keras_object(backbone) if backbone else None
        return cls(**config)
