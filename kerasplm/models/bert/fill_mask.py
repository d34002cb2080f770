"""Export BERT runs as TF Serving SavedModels (strings in).

Fill-mask (a pretraining run: ``kerasplm train bert``): :class:`FillMaskModule`, saved by :func:`export_fill_mask`.

``serving_default``  ``text`` tf.string [B] -> ``token`` tf.string [B, M, K], ``score`` float32 [B, M, K],
                     ``mask_count`` int32 [B]
``metadata``         (added by :func:`kerasplm.export.base.save_version`)

Each ``[MASK]`` in a text (the exact, upper-case string; it may touch other characters: ``"a [MASK]."``) is one
prediction: row ``m < mask_count[b]`` of ``token[b]`` / ``score[b]`` holds the ``K`` most likely tokens for the
``m``-th ``[MASK]`` of text ``b`` (left to right) and their softmax probabilities, best first. ``M`` is the
largest ``mask_count`` of the batch; the rows past a text's own count are padding (``""`` and 0.0). The text
around the masks is tokenized as in training (the run's WordPiece vocabulary) and packed ``[CLS] ... [SEP]``,
cut to ``max_seq_length`` tokens: a ``[MASK]`` cut away is not counted. A text without ``[MASK]`` (empty,
whitespace, or plain text) gives ``mask_count`` 0 and only padding: it is not an error.
"""
import tensorflow as tf

from kerasplm.export.base import ExportModule, save_version
from kerasplm.models.bert.backbone import RUN_FAMILY
from kerasplm.models.bert.pretrainer import BertPretrainer
from kerasplm.runs import RunDirError, load_run
from kerasplm.text.preprocessing import pack_segments

FAMILY = RUN_FAMILY
MASK = "[MASK]"


class FillMaskModule(ExportModule):
    """The fill-mask model: tokenizer + :class:`kerasplm.models.bert.pretrainer.BertPretrainer`, graph only.

    Args: ``pretrainer``, ``tokenizer`` (the run's :class:`kerasplm.text.WordPieceTokenizer`), ``top_k`` (K),
    ``max_seq_length`` (default: the model's positions).
    """

    family = FAMILY

    def __init__(self, pretrainer, tokenizer, top_k=5, max_seq_length=None):
        super().__init__(pretrainer, family=FAMILY, name="fill_mask")
        positions = pretrainer.backbone.config.max_positions
        self.max_seq_length = int(max_seq_length or positions)
        if not 3 <= self.max_seq_length <= positions:
            raise ValueError(f"max_seq_length must be in [3, {positions}], got {self.max_seq_length}")
        if not 1 <= top_k <= tokenizer.vocab_size:
            raise ValueError(f"top_k must be in [1, {tokenizer.vocab_size}], got {top_k}")
        self.top_k = int(top_k)
        self.tokenizer = tokenizer
        self.cls_id, self.sep_id, self.mask_id = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", MASK))
        self.pad_id = tokenizer.pad_id

    def encode(self, text):
        """``text [B]`` -> (``token_ids`` [B, W] int32, ``padding_mask`` [B, W] int32): ``[CLS] … [SEP]`` with
        ``[MASK]`` ids where the texts say ``[MASK]``, cut to ``max_seq_length``; W >= 2."""
        parts = tf.strings.split(text, MASK)                                  # [B, (masks + 1)] text between masks
        pieces = self.tokenizer.tokenize(parts.flat_values)                   # [N, (t)]
        index = tf.range(tf.shape(parts.flat_values, out_type=tf.int64)[0])
        last = tf.gather(parts.row_limits(), parts.value_rowids()) - 1       # the last part of each text
        followed = tf.cast(index != last, tf.int64)                           # a [MASK] follows every other part
        masks = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(followed)], tf.constant(self.mask_id, tf.int64)), followed)
        joined = tf.concat([pieces, masks], axis=1)
        ids = tf.RaggedTensor.from_row_lengths(joined, parts.row_lengths()).merge_dims(1, 2)
        ids, _ = pack_segments([ids], self.cls_id, self.sep_id, self.max_seq_length)
        width = tf.maximum(tf.reduce_max(tf.concat([ids.row_lengths(), [2]], 0)), 2)
        token_ids = ids.to_tensor(default_value=self.pad_id, shape=tf.stack([ids.nrows(), width]))
        padding_mask = tf.sequence_mask(ids.row_lengths(), width, dtype=tf.int32)
        return tf.cast(token_ids, tf.int32), padding_mask

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serving_default(self, text):
        """Fill each ``[MASK]``: see the module docstring."""
        token_ids, padding_mask = self.encode(text)
        is_mask = token_ids == self.mask_id
        positions = tf.ragged.boolean_mask(tf.broadcast_to(tf.range(tf.shape(token_ids)[1]), tf.shape(token_ids)),
                                           is_mask)
        count = tf.cast(positions.row_lengths(), tf.int32)
        dense_positions = positions.to_tensor(default_value=0)                   # [B, M]
        model = self.model
        hidden = model.backbone({"token_ids": token_ids, "segment_ids": tf.zeros_like(token_ids),
                                 "padding_mask": padding_mask}, training=False)["sequence_output"]
        logits = model.mlm_head(hidden, dense_positions, model.word_embeddings)  # [B, M, V]
        scores, ids = tf.math.top_k(tf.nn.softmax(logits), k=self.top_k)
        real = tf.sequence_mask(count, tf.shape(dense_positions)[1])[..., tf.newaxis]
        flat = self.tokenizer.lookup(tf.reshape(tf.cast(ids, tf.int64), [-1, self.top_k])).to_tensor("")
        tokens = tf.reshape(flat, tf.shape(ids))
        return {"token": tf.where(real, tokens, ""), "score": tf.where(real, scores, 0.0), "mask_count": count}

    def signatures(self):
        return {"serving_default": self.serving_default}

    def fill(self, texts):
        """Python convenience: per text, per ``[MASK]``, a list of ``(token, score)`` best first."""
        out = self.serving_default(tf.constant(list(texts), tf.string))
        tokens, scores, counts = out["token"].numpy(), out["score"].numpy(), out["mask_count"].numpy()
        return [[[(t.decode("utf-8"), float(s)) for t, s in zip(tokens[b, m], scores[b, m])]
                 for m in range(counts[b])] for b in range(len(counts))]


def load_pretrainer(run_dir):
    """The :class:`BertPretrainer` of a pretraining run (:func:`kerasplm.runs.load_run`), its preprocessor (the
    corpus' tokenizer) attached; a one-line error for any other run."""
    model = load_run(run_dir, family=FAMILY, what="a BERT pretraining run (kerasplm train bert)")
    if not isinstance(model, BertPretrainer):
        raise RunDirError(f"{model.run_info.path}/config.json: task {model.run_info.config.get('task')!r} has no "
                          f"pretraining heads (need a run of 'kerasplm train bert')")
    return model


def fill_mask_module(run_dir, top_k=5, max_seq_length=None):
    """The :class:`FillMaskModule` of a pretraining run directory (its ``run_config``: the run's config.json)."""
    pretrainer = load_pretrainer(run_dir)
    module = FillMaskModule(pretrainer, pretrainer.preprocessor.tokenizer, top_k=top_k, max_seq_length=max_seq_length)
    module.run_config = pretrainer.run_info.config
    return module


def export_fill_mask(run_dir, model_base_path, top_k=5, max_seq_length=None, version=None, overwrite=False):
    """Writes the fill-mask SavedModel of a pretraining run as ``model_base_path/<version>/``; returns its path."""
    module = fill_mask_module(run_dir, top_k=top_k, max_seq_length=max_seq_length)
    metadata = {"task": "fill_mask", "top_k": module.top_k, "max_seq_length": module.max_seq_length,
                "mask_token": MASK, "preset": module.run_config.get("preset")}
    return save_version(module, model_base_path, version=version, overwrite=overwrite, metadata=metadata)


def print_fill_mask(texts, run, top_k=5):
    """``kerasplm fill-mask``: print the top-k tokens and probabilities for every [MASK] of each text."""
    module = fill_mask_module(run, top_k=top_k)
    for text, masks in zip(texts, module.fill(texts)):
        print(text)
        if not masks:
            print("  (no [MASK] in this text)")
        for m, candidates in enumerate(masks, start=1):
            print(f"  [MASK] {m}: " + "  ".join(f"{token} {score:.4f}" for token, score in candidates))


def export_fill_mask_run(run, to, top_k=5, version=None, overwrite=False):
    """``kerasplm export fill-mask``: prints and returns the version directory."""
    path = export_fill_mask(run, to, top_k=top_k, version=version, overwrite=overwrite)
    print(path)
    return path
