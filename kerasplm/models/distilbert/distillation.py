"""Knowledge distillation of a fine-tuned BERT classifier or tagger (the teacher) into a smaller one (the student).

Loss (Hinton et al. 2015; seed 003_*, "模型蒸馏"), per example (classifier) or per real token (tagger)::

    L = α · CE(y, z_s) + (1 − α) · T² · KL(softmax(z_t / T) ‖ softmax(z_s / T))
        [+ Σ_(i↔j) MSE(H_s^i W, H_t^j)]           --hidden-loss     (TinyBERT, Jiao et al. 2020, eq. 7-8)
        [+ Σ_(i↔j) MSE(A_s^i, A_t^j)]             --attention-loss  (TinyBERT eq. 6, on the softmaxed maps)

z_t, z_s: the teacher's and the student's logits; the teacher runs in inference mode (no dropout) and gets no
gradient. The hard term is the task's own loss (the classifier's cross-entropy over examples, the tagger's over
each word's first piece); the soft term is averaged over examples, or for the tagger over the real tokens
(``padding_mask`` 1, [CLS]/[SEP] included); each term is a mean over its own count, as the Trainer forms it.

The intermediate losses pair student block i with teacher block ``j = m(i)`` (0-based) by the layer map; the
default is TinyBERT's uniform map ``m(i) = (i + 1) · L_t / L_s − 1`` (rounded up: ``⌈(i + 1) · L_t / L_s⌉ − 1``),
student block i imitating the last teacher block of its share; the embedding outputs are always paired too
(``hidden_states[0]``). H: ``(B, T, H)`` block outputs over the real tokens; when the widths differ the student's
go through a learned projection W (``H_s → H_t``, no bias; one W_e for the embeddings and one W_h shared by the
blocks, as TinyBERT's). A: ``(B, heads, T, T)`` attention probabilities over real query and key positions (the
head counts must match).

The student either starts from the teacher (:func:`init_from_teacher`: DistilBERT's (Sanh et al. 2019) choice of
one teacher block in every ``L_t / L_s``, ``j = ⌊i · L_t / L_s⌋`` (every other block for half the depth), with the
teacher's embeddings, pooler and task head; the widths must match) or at random.

A classifier's training rows may be augmented (:class:`Augmentation`, :func:`augment_batch`: Tang et al. 2019's
masking and n-gram sampling); an augmented row keeps the soft term and weighs 0 in the hard one.
"""
import dataclasses
import math

import keras
import tensorflow as tf

from kerasplm.models.bert.tagger import BertTokenClassifier
from kerasplm.models.bert.classifier import BertClassifier
from kerasplm.training.losses import classification_loss_sums, masked_mse_sums, soft_target_loss_sums

__all__ = ["DistillationSettings", "DistillationProjections", "uniform_layer_map", "parse_layer_map",
           "teacher_init_layers", "student_config", "init_from_teacher", "distillation_loss_sums",
           "check_same_vocabulary", "Augmentation", "augment_batch"]


def uniform_layer_map(student_layers, teacher_layers):
    """TinyBERT's uniform map: student block ``i`` (0-based) ↔ teacher block ``⌈(i + 1) · L_t / L_s⌉ − 1``
    (the last of its ``L_t / L_s`` share: 4 → 2 gives ``[1, 3]``, 12 → 4 gives ``[2, 5, 8, 11]``)."""
    if not 0 < student_layers <= teacher_layers:
        raise ValueError(f"a student of {student_layers} blocks cannot be mapped onto a teacher of {teacher_layers}")
    return [math.ceil((i + 1) * teacher_layers / student_layers) - 1 for i in range(student_layers)]


def parse_layer_map(text, student_layers, teacher_layers):
    """``"0:1,1:3"`` (student block:teacher block, 0-based) -> ``[(0, 1), (1, 3)]``; None -> the uniform map.
    One-line errors name the bad pair."""
    if text is None:
        return list(enumerate(uniform_layer_map(student_layers, teacher_layers)))
    pairs = []
    for item in str(text).split(","):
        left, sep, right = item.strip().partition(":")
        if not sep or not left.strip().isdigit() or not right.strip().isdigit():
            raise ValueError(f"layer map {text!r}: {item.strip()!r} is not STUDENT:TEACHER (0-based block numbers)")
        i, j = int(left), int(right)
        if i >= student_layers or j >= teacher_layers:
            raise ValueError(f"layer map {text!r}: {i}:{j} is outside the student's {student_layers} or the "
                             f"teacher's {teacher_layers} blocks")
        pairs.append((i, j))
    if len({i for i, _ in pairs}) != len(pairs):
        raise ValueError(f"layer map {text!r}: a student block is mapped twice")
    return pairs


def teacher_init_layers(student_layers, teacher_layers):
    """The teacher blocks a student starting from the teacher copies: ``⌊i · L_t / L_s⌋`` (DistilBERT's every
    other block for ``L_s = L_t / 2``: 12 → 6 gives ``[0, 2, 4, 6, 8, 10]``)."""
    if not 0 < student_layers <= teacher_layers:
        raise ValueError(f"a student of {student_layers} blocks cannot start from a teacher of {teacher_layers} "
                         f"(--student-layers at most the teacher's depth)")
    return [i * teacher_layers // student_layers for i in range(student_layers)]


@dataclasses.dataclass(frozen=True)
class DistillationSettings:
    """``temperature`` T, ``alpha`` (the hard labels' weight), the intermediate losses (``hidden``, ``attention``)
    and ``layer_map`` (``[(student block, teacher block)]``)."""

    temperature: float = 2.0
    alpha: float = 0.5
    hidden: bool = False
    attention: bool = False
    layer_map: tuple = ()

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")


def student_config(teacher_config, preset_config=None, num_layers=None, from_teacher=False):
    """The student backbone's :class:`BertConfig`.

    The tokenizer is the teacher's, so what belongs to its inputs comes from the teacher (``vocab_size``,
    ``max_positions``, ``num_segments``, ``position_offset``). ``from_teacher``: the teacher's config with
    ``num_layers`` blocks (default: the preset's depth, else half the teacher's), a preset's width, heads and
    feed-forward size having to equal the teacher's; otherwise ``preset_config`` (required) with ``num_layers``
    if given.
    """
    tokenizer_fields = {name: getattr(teacher_config, name)
                        for name in ("vocab_size", "max_positions", "num_segments", "position_offset")}
    if from_teacher:
        if preset_config is not None:
            for name in ("hidden_size", "num_heads", "intermediate_size", "embedding_size"):
                ours, theirs = getattr(preset_config, name), getattr(teacher_config, name)
                if ours != theirs:
                    raise ValueError(f"--student-init teacher copies the teacher's weights, but the student preset's "
                                     f"{name} is {ours} and the teacher's {theirs}: use --student-init random or "
                                     f"a preset of the teacher's width")
        depth = num_layers or (preset_config.num_layers if preset_config is not None
                               else max(1, teacher_config.num_layers // 2))
        if teacher_config.share_layers:
            raise ValueError("--student-init teacher needs a teacher whose blocks are not shared (ALBERT's are)")
        teacher_init_layers(depth, teacher_config.num_layers)   # the depth check's message
        return dataclasses.replace(teacher_config, num_layers=depth).validate()
    if preset_config is None:
        raise ValueError("--student-init random needs --student-preset (the student's shape)")
    changes = dict(tokenizer_fields)
    if num_layers:
        changes["num_layers"] = num_layers
    return dataclasses.replace(preset_config, **changes).validate()


def init_from_teacher(student, teacher):
    """Copy into ``student`` (a task model whose backbone has ``L_s ≤ L_t`` blocks of the teacher's shape) the
    teacher's embeddings, blocks ``⌊i · L_t / L_s⌋`` (:func:`teacher_init_layers`), pooler and task head.
    Returns the teacher blocks copied."""
    s, t = student.backbone, teacher.backbone
    chosen = teacher_init_layers(s.config.num_layers, t.config.num_layers)
    s.embeddings.set_weights(t.embeddings.get_weights())
    for block, j in zip(s.blocks, chosen):
        block.set_weights(t.blocks[j].get_weights())
    s.pooler.set_weights(t.pooler.get_weights())
    student.head.set_weights(teacher.head.get_weights())
    return chosen


@keras.saving.register_keras_serializable(package="kerasplm")
class DistillationProjections(keras.layers.Layer):
    """TinyBERT's learned projections of the student's hidden states onto the teacher's width: ``embeddings``
    (W_e, ``(H_s, H_t)``) for the embedding output and ``hidden`` (W_h, ``(H_s, H_t)``) shared by the blocks; no
    bias. Trained with the student, no part of its run's model (the Trainer's ``auxiliary``)."""

    def __init__(self, student_width, teacher_width, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.student_width, self.teacher_width = int(student_width), int(teacher_width)
        init = keras.initializers.TruncatedNormal(stddev=initializer_range)
        self.embeddings = keras.layers.Dense(self.teacher_width, use_bias=False, kernel_initializer=init,
                                             name="embeddings")
        self.hidden = keras.layers.Dense(self.teacher_width, use_bias=False, kernel_initializer=init, name="hidden")
        self.embeddings.build((None, None, self.student_width))
        self.hidden.build((None, None, self.student_width))
        self.built = True

    def call(self, states, embeddings=False):
        return (self.embeddings if embeddings else self.hidden)(states)

    def get_config(self):
        return {**super().get_config(), "student_width": self.student_width, "teacher_width": self.teacher_width}


def _task_parts(model, batch):
    """``(inputs, hard-label loss function of the logits, soft-loss mask)`` of a classifier's or tagger's batch."""
    if isinstance(model, BertTokenClassifier):
        inputs, labels, weights = model.split_batch(batch)
        real = tf.cast(inputs.get("padding_mask", tf.ones_like(inputs["token_ids"])), tf.float32)
        return inputs, (lambda logits: model.loss_sums(logits, labels, weights)), real
    if isinstance(model, BertClassifier):
        # (inputs, labels) or, with augmented rows, (inputs, labels, hard-label weights): 0 for a row whose gold
        # label no longer holds (:func:`augment_batch`).
        inputs, labels, *weights = batch
        weights = weights[0] if weights else None
        return inputs, (lambda logits: classification_loss_sums(labels, logits, weights)), None
    raise TypeError(f"distillation takes a BertClassifier or BertTokenClassifier, got {type(model).__name__}")


def distillation_loss_sums(student, teacher, batch, training, settings, projections=None):
    """The Trainer's loss terms (see the module docstring) for one batch of the student's task.

    Returns ``{"losses": {"hard": (S, C, α), "soft": (S, N, 1 − α)[, "hidden": (S, C_h)][, "attention": (S,
    C_a)]}, "accuracy": (correct, C)}``: the hard term's sums are exactly the task's ``compute_loss_sums``.
    ``projections``: a :class:`DistillationProjections` when the hidden widths differ.
    """
    inputs, hard_loss, soft_mask = _task_parts(student, batch)
    want_hidden, want_attention = settings.hidden, settings.attention
    student_logits, student_states = student.forward(inputs, training=training, output_hidden_states=want_hidden,
                                                     output_attentions=want_attention)
    teacher_logits, teacher_states = teacher.forward(inputs, training=False, output_hidden_states=want_hidden,
                                                     output_attentions=want_attention)
    teacher_logits = tf.stop_gradient(teacher_logits)
    hard = hard_loss(student_logits)
    soft_sum, soft_count = soft_target_loss_sums(teacher_logits, student_logits, settings.temperature, soft_mask)
    losses = {"hard": (hard["loss"], hard["weight"], float(settings.alpha)),
              "soft": (soft_sum, soft_count, 1.0 - float(settings.alpha))}
    if want_hidden or want_attention:
        real = tf.cast(inputs.get("padding_mask", tf.ones_like(inputs["token_ids"])), tf.float32)
    if want_hidden:
        s_hidden, t_hidden = student_states["hidden_states"], teacher_states["hidden_states"]
        pairs = [(0, 0, True)] + [(i + 1, j + 1, False) for i, j in settings.layer_map]
        total, count = 0.0, 0.0
        for i, j, is_embedding in pairs:
            states = s_hidden[i]
            if projections is not None:
                states = projections(states, embeddings=is_embedding)
            error, elements = masked_mse_sums(states, tf.stop_gradient(t_hidden[j]), real[:, :, tf.newaxis])
            total, count = total + error, count + elements
        # Each pair covers as many elements: (Σ_pairs S) / C_one_pair = Σ_pairs MSE_pair.
        losses["hidden"] = (total, count / len(pairs), 1.0)
    if want_attention:
        keep = real[:, tf.newaxis, :, tf.newaxis] * real[:, tf.newaxis, tf.newaxis, :]   # real queries × keys
        total, count = 0.0, 0.0
        for i, j in settings.layer_map:
            error, elements = masked_mse_sums(student_states["attentions"][i],
                                              tf.stop_gradient(teacher_states["attentions"][j]), keep)
            total, count = total + error, count + elements
        losses["attention"] = (total, count / len(settings.layer_map), 1.0)
    return {"losses": losses, "accuracy": (hard["accuracy"], hard["weight"])}


def _vocabulary(preprocessor):
    tokenizer = getattr(preprocessor, "tokenizer", None)
    path = getattr(tokenizer, "vocabulary_file", None)
    if path:
        with open(path, encoding="utf-8") as f:
            return path, f.read().split("\n")
    return "the vocabulary", getattr(tokenizer, "vocab_size", None)


def check_same_vocabulary(teacher_preprocessor, student_preprocessor, teacher="the teacher"):
    """ValueError (one line) unless the two preprocessors' tokenizers have the same vocabulary: a student is
    trained on the teacher's token ids."""
    (t_where, t_vocab), (s_where, s_vocab) = _vocabulary(teacher_preprocessor), _vocabulary(student_preprocessor)
    if type(teacher_preprocessor.tokenizer) is not type(student_preprocessor.tokenizer) or t_vocab != s_vocab:
        raise ValueError(f"{teacher} and the student do not share a vocabulary ({t_where} vs {s_where}): distillation "
                         f"needs the teacher's tokenizer")


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """Task data augmentation for distillation, after Tang et al. 2019 (§3.2, "Distilling task-specific knowledge
    from BERT into simple neural networks"): a training row is replaced, with probability ``rate``, by a variant the
    teacher labels (its soft targets; the row's gold label no longer holds, so its hard-label weight is 0):

    * masking: each of the row's text pieces becomes ``[MASK]`` with probability ``mask_probability``;
    * n-gram sampling: with probability ``ngram_probability`` the row keeps only ``n`` consecutive pieces of its text,
      ``n`` uniform in ``1 … max_ngram`` (at most the text's length), the window uniform over the text.

    Their third rule, replacing a word by another of its part of speech, needs a tagger and word vectors; it is left
    out. Pieces, not words, are the unit: the teacher's tokens are what the student reads.
    """

    rate: float
    mask_probability: float = 0.1
    ngram_probability: float = 0.25
    max_ngram: int = 5

    def __post_init__(self):
        for name in ("rate", "mask_probability", "ngram_probability"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"augmentation {name} must be in [0, 1], got {value}")
        if self.max_ngram < 1:
            raise ValueError(f"augmentation max_ngram must be >= 1, got {self.max_ngram}")


def augment_batch(inputs, seed, augmentation, mask_id, pad_id=0):
    """One batch of single-text BERT inputs with some rows augmented (:class:`Augmentation`).

    ``inputs``: ``{"token_ids", "padding_mask"[, "segment_ids"]}``, each ``(B, T)``, rows ``[CLS] text [SEP]`` then
    padding; ``seed``: int ``[2]`` (stateless: the same seed gives the same rows). Returns ``(inputs, augmented)``:
    the rows, the augmented ones masked and/or cut to ``[CLS] n-gram [SEP]`` (padded back to ``T``), and a float
    ``(B,)`` that is 1 for an augmented row.
    """
    a = augmentation
    ids = tf.convert_to_tensor(inputs["token_ids"])
    mask = tf.cast(inputs["padding_mask"], ids.dtype)
    batch, width = tf.shape(ids)[0], tf.shape(ids)[1]
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=5)
    length = tf.reduce_sum(mask, axis=1)                                   # [CLS] + text + [SEP]
    text_length = tf.maximum(length - 2, 0)
    positions = tf.range(width, dtype=ids.dtype)[tf.newaxis, :]
    is_text = (positions >= 1) & (positions < length[:, tf.newaxis] - 1)

    augmented = tf.random.stateless_uniform([batch], seeds[0]) < a.rate
    masked = (tf.random.stateless_uniform([batch, width], seeds[1]) < a.mask_probability) & is_text
    ids = tf.where(masked & augmented[:, tf.newaxis], tf.cast(mask_id, ids.dtype), ids)

    # n-gram sampling: row b keeps text positions start_b … start_b + n_b − 1, framed by its [CLS] and [SEP].
    cut = augmented & (tf.random.stateless_uniform([batch], seeds[2]) < a.ngram_probability) & (text_length > 0)
    draw_n = tf.random.stateless_uniform([batch], seeds[3], minval=1, maxval=a.max_ngram + 1, dtype=tf.int64)
    n = tf.minimum(tf.cast(draw_n, ids.dtype), text_length)
    offset = tf.floor(tf.random.stateless_uniform([batch], seeds[4]) * tf.cast(text_length - n + 1, tf.float32))
    start = 1 + tf.cast(offset, ids.dtype)
    n, start = n[:, tf.newaxis], start[:, tf.newaxis]
    source = tf.where(positions == 0, tf.zeros_like(positions),
                      tf.where(positions <= n, start + positions - 1, length[:, tf.newaxis] - 1))
    keep = positions <= n + 1   # beyond it, source is the [SEP]'s position (in range); the id becomes padding
    cut_rows = {"token_ids": tf.where(keep, tf.gather(ids, source, batch_dims=1), tf.cast(pad_id, ids.dtype)),
                "padding_mask": tf.cast(keep, inputs["padding_mask"].dtype)}
    if "segment_ids" in inputs:
        cut_rows["segment_ids"] = tf.zeros_like(inputs["segment_ids"])
    out = dict(inputs, token_ids=ids)
    for key, value in cut_rows.items():
        out[key] = tf.where(cut[:, tf.newaxis], value, tf.cast(out[key], value.dtype))
    return out, tf.cast(augmented, tf.float32)
