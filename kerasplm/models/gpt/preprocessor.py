"""GPT-1's input transformations for fine-tuning (Radford et al. 2018, section 3.3, figure 1), in graph.

GPT-1 fine-tunes one causal Transformer on every task by turning each structured input into token
sequences ("traversal-style" inputs) framed by three special tokens: a randomly initialised ``start``, a
``delim`` between the parts, and an ``extract`` token last, whose final hidden state feeds the linear head:

    classification   start text extract                                     -> 1 sequence
    entailment       start premise delim hypothesis extract                 -> 1 sequence
    similarity       start A delim B extract  and  start B delim A extract  -> 2 sequences (representations added)
    multiple choice  start context delim answer_k extract, k = 1..N        -> N sequences (softmax over the N)

**The special tokens are new rows of the token embedding**, not pieces of the tokenizer: the tokenizer of the
pretrained run (SentencePiece or GPT-2's BPE, :mod:`kerasplm.text`) is kept as it is, and for a pretrained
model with ``V`` embedding rows the preprocessor uses ids ``V, V + 1, V + 2`` (:func:`special_token_ids`);
:func:`kerasplm.models.gpt.classifier.grow_token_embedding` adds the three rows to the model (initialised like the
others). So text can never produce them: the literal string "<|endoftext|>" or "extract" is ordinary text.

Truncation keeps the special tokens and trims the text pieces round robin (the longer part loses a piece first:
:func:`kerasplm.text.preprocessing.pack_segments`). Outputs are right-padded (the causal mask makes padding
after ``extract`` invisible to every real position, so no attention mask is needed; ``padding_mask`` tells the
model where ``extract`` is and which tokens the auxiliary LM loss covers).
"""
import keras
import tensorflow as tf

from kerasplm.runs.serialization import serializable
from kerasplm.text.preprocessing import Preprocessor, pack_segments

TASK_TYPES = ("classification", "entailment", "similarity", "multiple_choice")
SPECIAL_TOKENS = ("start", "delim", "extract")


def special_token_ids(pretrained_vocab_size):
    """``{"start": V, "delim": V + 1, "extract": V + 2}``: the rows appended to a ``V``-row token embedding."""
    return {name: pretrained_vocab_size + i for i, name in enumerate(SPECIAL_TOKENS)}


@serializable
class GPTClassifierPreprocessor(Preprocessor):
    """Strings -> GPT-1 fine-tuning inputs ``{"token_ids", "padding_mask"}`` (int64; 1 = real token).

    ``preprocessor(text)`` (classification), ``preprocessor(premise, hypothesis)`` (entailment): ``[B, L]``;
    ``preprocessor(a, b)`` (similarity): ``[B, 2, L]`` (both orders); ``preprocessor(context, choices)``
    (multiple choice; ``choices`` a string tensor ``[B, N]``): ``[B, N, L]``.

    Args:
      tokenizer: the pretrained run's tokenizer (``tokenize(strings) -> ragged int64``).
      special_ids: ``{"start", "delim", "extract"}`` ids (:func:`special_token_ids` of the pretrained model).
      sequence_length: packed length cap, special tokens included (at most the model's positions).
      task_type: one of :data:`TASK_TYPES`.
      pad_to_length: pad to ``sequence_length`` (fixed shapes for training), else to the longest row of the
        batch (serving; at least 2).

    ``get_config`` stores these arguments, the tokenizer as its own Keras config (its files named relative to the
    run being written), so a run's config.json rebuilds it.
    """

    def __init__(self, tokenizer, special_ids, sequence_length=128, task_type="classification", pad_to_length=True,
                 name=None):
        if task_type not in TASK_TYPES:
            raise ValueError(f"task_type must be one of {', '.join(TASK_TYPES)}, got {task_type!r}")
        minimum = 2 if task_type == "classification" else 3
        if isinstance(sequence_length, bool) or not isinstance(sequence_length, int) or sequence_length < minimum:
            raise ValueError(f"sequence_length must be an integer >= {minimum} (the special tokens of {task_type} "
                             f"need room), got {sequence_length!r}")
        missing = [name for name in SPECIAL_TOKENS if name not in special_ids]
        if missing:
            raise ValueError(f"special_ids lacks {', '.join(missing)}")
        super().__init__(sequence_length=sequence_length, pad_id=int(getattr(tokenizer, "pad_id", 0) or 0), name=name)
        self.tokenizer = tokenizer
        self.special_ids = {name: int(special_ids[name]) for name in SPECIAL_TOKENS}
        self.task_type = task_type
        self.pad_to_length = bool(pad_to_length)

    @property
    def special_token_ids(self):
        return {"pad": self.pad_id, **self.special_ids}

    @property
    def pair_input(self):
        """Whether ``__call__`` takes a second text (entailment, similarity) or the choices (multiple choice)."""
        return self.task_type != "classification"

    def get_config(self):
        return {"tokenizer": keras.saving.serialize_keras_object(self.tokenizer), "special_ids": dict(self.special_ids),
                "sequence_length": self.sequence_length, "task_type": self.task_type,
                "pad_to_length": self.pad_to_length, "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "tokenizer": keras.saving.deserialize_keras_object(config["tokenizer"])})

    def with_padding(self, pad_to_length):
        """The same preprocessor padding to ``sequence_length`` or (``False``) to each batch's longest row."""
        return GPTClassifierPreprocessor(self.tokenizer, self.special_ids, self.sequence_length, self.task_type,
                                         pad_to_length=pad_to_length)

    def packed(self, first, second=None):
        """Ragged int64 ``[B, (len)]``: ``start first extract`` or ``start first delim second extract``."""
        segments = [self.tokenizer.tokenize(first)]
        if second is not None:
            segments.append(self.tokenizer.tokenize(second))
        # pack_segments writes `start A delim [B delim]`; the last delim becomes extract.
        ids, _ = pack_segments(segments, self.special_ids["start"], self.special_ids["delim"], self.sequence_length)
        extract = tf.fill(tf.stack([ids.nrows(), 1]), tf.constant(self.special_ids["extract"], tf.int64))
        return tf.concat([ids[:, :-1], tf.RaggedTensor.from_tensor(extract)], axis=1)

    def _dense(self, ids):
        width = self.sequence_length if self.pad_to_length else None
        inputs = {"token_ids": ids.to_tensor(default_value=tf.cast(self.pad_id, tf.int64), shape=[None, width]),
                  "padding_mask": tf.ones_like(ids).to_tensor(default_value=0, shape=[None, width])}
        if not self.pad_to_length:  # an empty batch is [0, 0]: widen it so every shape stays well defined
            inputs = {k: tf.pad(v, [[0, 0], [0, tf.maximum(0, 2 - tf.shape(v)[1])]]) for k, v in inputs.items()}
        return inputs

    @tf.autograph.experimental.do_not_convert
    def __call__(self, text, text_pair=None):
        if (text_pair is None) == self.pair_input:
            raise ValueError(f"task_type {self.task_type!r} takes {'two inputs' if self.pair_input else 'one text'}")
        if self.task_type in ("classification", "entailment"):
            return self._dense(self.packed(text, text_pair))
        if self.task_type == "similarity":   # [B, 2, L]: (a, b) and (b, a)
            both = self._dense(self.packed(tf.concat([text, text_pair], 0), tf.concat([text_pair, text], 0)))
            batch = tf.shape(text)[0]
            return {k: tf.transpose(tf.reshape(v, [2, batch, tf.shape(v)[1]]), [1, 0, 2]) for k, v in both.items()}
        choices = tf.convert_to_tensor(text_pair)     # multiple choice: [B, N]
        shape = tf.shape(choices)
        contexts = tf.repeat(text, shape[1])
        flat = self._dense(self.packed(contexts, tf.reshape(choices, [-1])))
        return {k: tf.reshape(v, tf.concat([shape, tf.shape(v)[1:]], 0)) for k, v in flat.items()}
