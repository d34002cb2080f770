"""GPT-1 fine-tuning (Radford et al. 2018, section 3.2–3.3): a linear head on the ``extract`` token, plus the
language-modelling loss as an auxiliary objective.

    h_l^m = final hidden state at the extract token of input x^m        (one per sequence of the input)
    P(y | x) = softmax(W_y · Drop(h_l^m))                             (eq. 3; similarity: h of both orders added;
                                                                        multiple choice: one score per answer,
                                                                        softmax over the answers)
    L_3(C) = L_2(C) + λ · L_1(C)                                        (eq. 5; λ = 0.5)

``L_2`` is the task's cross-entropy mean over the examples, ``L_1`` the next-token cross-entropy mean over the
input tokens (every real token after the first, special tokens included, as the paper's code does). They are two
terms of the Trainer's multi-term contract, each with its own denominator:
``{"losses": {"task": (S, n_examples), "lm": (S, n_tokens, λ)}}``.

Inputs are :class:`kerasplm.models.gpt.preprocessor.GPTClassifierPreprocessor`'s: ``token_ids`` and ``padding_mask``
``[B, L]`` (classification, entailment) or ``[B, K, L]`` (K = 2 orders for similarity, K = N answers for multiple
choice). The special tokens are rows ``V, V + 1, V + 2`` of a token embedding grown by
:func:`grow_token_embedding` from a pretrained ``V``-row GPT.
"""
import dataclasses

import keras
import tensorflow as tf

from kerasplm.layers.embedding import table_logits
from kerasplm.models.base import Task
from kerasplm.models.bert.classifier import classifier_head, logits_for_texts
from kerasplm.models.gpt.model import GPTBackbone
from kerasplm.models.gpt.preprocessor import SPECIAL_TOKENS, TASK_TYPES


def grow_token_embedding(backbone, new_rows=len(SPECIAL_TOKENS)):
    """A copy of GPT ``backbone`` whose token embedding has ``new_rows`` more rows (GPT-1's start/delim/extract).

    Every weight is the pretrained one; the new rows are drawn by the backbone's own initializer (truncated
    normal, std ``initializer_range``), like every other row of a fresh model. Seed with
    ``keras.utils.set_random_seed`` for reproducible rows. The tied LM head grows with the table.
    """
    config = dataclasses.replace(backbone.config, vocab_size=backbone.config.vocab_size + new_rows)
    grown = GPTBackbone.from_config_object(config, name=backbone.name)
    old_weights, new_weights = backbone.weights, grown.weights
    table = backbone.embeddings.embedding.embeddings
    for old, new in zip(old_weights, new_weights, strict=True):
        if old is table:
            new.assign(tf.concat([old, new[-new_rows:]], axis=0))
        elif tuple(old.shape) == tuple(new.shape):
            new.assign(old)
        else:
            raise ValueError(f"cannot copy {old.path} {tuple(old.shape)} into {new.path} {tuple(new.shape)}")
    return grown


@keras.saving.register_keras_serializable(package="kerasplm")
class GPTClassifier(Task):
    """GPT-1's fine-tuned model: a :class:`GPTBackbone` (token embedding holding the special tokens), dropout and a
    linear layer on the hidden state at the ``extract`` token, and the auxiliary LM loss.

    Args:
      backbone: a :class:`kerasplm.models.gpt.model.GPTBackbone` (grown by :func:`grow_token_embedding`).
      num_labels: classes (multiple choice: 1, a score per answer).
      task_type: ``classification``, ``entailment``, ``similarity`` or ``multiple_choice``.
      dropout: dropout on the extract representation before the linear layer (GPT-1: 0.1).
      lm_weight: λ of the auxiliary language-modelling loss (GPT-1: 0.5; 0 = none).
      labels: the class names, in logit order (a fine-tuned run's training labels; stored in the config).
      pair_input: whether the model reads two texts (default: every task type but ``classification``).
      preprocessor: optional :class:`kerasplm.models.gpt.preprocessor.GPTClassifierPreprocessor` for :meth:`predict_texts`.
    Call: inputs dict -> float32 logits ``(B, num_labels)``; multiple choice ``(B, N)`` over the N answers.
    Training batches are ``(inputs, labels)``, int labels ``(B,)`` (multiple choice: the right answer's index).
    """

    backbone_class = GPTBackbone

    def __init__(self, backbone, num_labels, task_type="classification", dropout=0.1, lm_weight=0.5, labels=None,
                 pair_input=None, preprocessor=None, **kwargs):
        super().__init__(backbone, preprocessor=preprocessor, **kwargs)
        if task_type not in TASK_TYPES:
            raise ValueError(f"task_type must be one of {', '.join(TASK_TYPES)}, got {task_type!r}")
        if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
            raise ValueError(f"num_labels must be a positive integer, got {num_labels!r}")
        if (task_type == "multiple_choice") != (num_labels == 1):
            raise ValueError(f"num_labels must be 1 for multiple_choice (a score per answer) and >= 2 otherwise; "
                             f"got {num_labels} for {task_type}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if not lm_weight >= 0.0:
            raise ValueError(f"lm_weight must be >= 0, got {lm_weight!r}")
        labels = [str(label) for label in (labels or [])]
        if labels and len(labels) != num_labels and task_type != "multiple_choice":
            raise ValueError(f"{len(labels)} labels ({', '.join(labels)}) for num_labels={num_labels}")
        self.num_labels, self.task_type = num_labels, task_type
        # Plain Python values, not checkpoint dependencies (Keras would wrap a list in a tracked one).
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "pair_input", task_type != "classification" if pair_input is None else bool(pair_input))
        self.dropout_rate, self.lm_weight = float(dropout), float(lm_weight)
        self.head_dropout, self.head = classifier_head(num_labels, backbone.config.d_model,
                                                       backbone.config.initializer_range, dropout)
        self.built = True

    def _forward(self, inputs, training):
        """-> (float32 task logits, sequence_output ``(B·K, L, d)``, token ids and mask ``(B·K, L)``)."""
        token_ids, mask = inputs["token_ids"], inputs["padding_mask"]
        length = tf.shape(token_ids)[-1]
        flat_ids, flat_mask = tf.reshape(token_ids, [-1, length]), tf.reshape(mask, [-1, length])
        hidden = self.backbone(flat_ids, training=training)["sequence_output"]
        # extract is each sequence's last real token; a batch of widened empty rows reads position 0.
        extract = tf.maximum(tf.reduce_sum(tf.cast(flat_mask, tf.int32), axis=-1) - 1, 0)
        features = tf.gather(hidden, extract, batch_dims=1)                       # (B·K, d)
        if token_ids.shape.rank == 3:
            features = tf.reshape(features, tf.concat([tf.shape(token_ids)[:2], [-1]], 0))   # (B, K, d)
        if self.task_type == "similarity":
            features = tf.reduce_sum(features, axis=1)                            # h(a, b) + h(b, a)
        logits = tf.cast(self.head(self.head_dropout(features, training=training)), tf.float32)
        if self.task_type == "multiple_choice":
            logits = logits[..., 0]                                               # (B, N): a score per answer
        return logits, hidden, flat_ids, flat_mask

    def call(self, inputs, training=None):
        return self._forward(inputs, training)[0]

    def lm_loss_sums(self, hidden, token_ids, mask):
        """``(Σ -log P(u_t | u_<t), number of predicted tokens)`` over the real tokens after the first; the output
        layer is the (grown) token embedding, tied as in pretraining."""
        table = self.backbone.embeddings.embedding.embeddings
        logits = tf.cast(table_logits(hidden[:, :-1], table), tf.float32)
        labels = tf.cast(token_ids[:, 1:], tf.int32)
        weights = tf.cast(mask[:, 1:], tf.float32)
        nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        return tf.reduce_sum(nll * weights), tf.reduce_sum(weights)

    @tf.autograph.experimental.do_not_convert
    def compute_loss_sums(self, batch, training):
        """``(inputs, labels)`` -> ``{"losses": {"task": (S, B), "lm": (S, tokens, λ)}, "accuracy": (correct, B)}``."""
        inputs, labels = batch
        logits, hidden, token_ids, mask = self._forward(inputs, training)
        labels = tf.cast(labels, tf.int32)
        count = tf.cast(tf.shape(logits)[0], tf.float32)
        task_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
        losses = {"task": (tf.reduce_sum(task_loss), count)}
        if self.lm_weight > 0:
            lm_sum, lm_count = self.lm_loss_sums(hidden, token_ids, mask)
            losses["lm"] = (lm_sum, lm_count, self.lm_weight)
        return {"losses": losses, "accuracy": (tf.reduce_sum(correct), count)}

    def predict_texts(self, texts, pairs=None, batch_size=64):
        """Probabilities ``(N, C)`` (multiple choice: over the answers; ``pairs`` = the answers ``[N][K]``)."""
        return tf.nn.softmax(logits_for_texts(self, texts, pairs, batch_size)).numpy()

    def check_preprocessor(self, preprocessor):
        """ValueError naming the file when ``preprocessor``'s tokenizer or special tokens do not fit the token
        embedding (the pretrained rows, then start/delim/extract)."""
        size = self.backbone.config.vocab_size
        specials = preprocessor.special_ids
        tokenizer = preprocessor.tokenizer
        where = getattr(tokenizer, "vocabulary_file", None) or "the tokenizer"
        if max(specials.values()) >= size:
            raise ValueError(f"special ids {specials} lie outside the model's {size} token embeddings")
        if tokenizer.vocab_size > min(specials.values()):
            raise ValueError(f"{where}: {tokenizer.vocab_size} tokens, but the model's special tokens start at id "
                             f"{min(specials.values())}; the file is damaged or from another run")

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels, "task_type": self.task_type,
                "dropout": self.dropout_rate, "lm_weight": self.lm_weight, "labels": list(self.labels),
                "pair_input": self.pair_input}
