"""BERT pretraining data: documents -> sentence-pair instances -> masked batches (a ``tf.data`` pipeline).

The recipe is google-research/bert's ``create_pretraining_data.py`` (Devlin et al. 2019, section 3.1 and
appendix A.1), with the masking moved into the ``tf.data`` graph (tensorflow-text's
``RandomItemSelector``, ``MaskValuesChooser`` and ``mask_language_model``) so it can be re-drawn every epoch:

1. :func:`read_documents`: a plain-text corpus, one sentence per line and a blank line between documents
   (BERT's format), or WikiText (``= Title =`` lines start articles; each paragraph line is split into
   sentences after `` . `` / `` ? `` / `` ! ``; ``= = Section = =`` headings are dropped).
2. :func:`create_instances` (Python, seeded ``numpy`` generator, done once): each document's sentences are
   gathered into chunks of ``max_seq_length - 3`` word pieces (10% of them shorter, ``short_seq_prob``);
   a chunk splits at a random sentence boundary into A and B. ``sentence_task``:

   * ``"nsp"`` (BERT): B is A's actual continuation (label 0) or, half of the time, a random stretch of
     another document (label 1, ``is_random_next``; the unused sentences of the chunk are put back);
   * ``"sop"`` (ALBERT, Lan et al. 2019 section 4.2): A and B are always consecutive; half of the time they
     are swapped (label 1);
   * ``"none"`` (RoBERTa, Liu et al. 2019, "DOC-SENTENCES"): one segment of consecutive sentences filling
     ``max_seq_length - 2``; label 0.

3. :func:`make_pretraining_dataset` (graph): ``[CLS] A [SEP] B [SEP]`` packed and trimmed by
   :func:`kerasplm.text.pack_segments` (BERT's ``_truncate_seq_pair`` lengths), then masking: a fraction
   ``mask_rate`` (15%) of the masking *units* (never [CLS], [SEP], [PAD]), rounded up, at most
   ``max_predictions_per_seq`` word pieces; each chosen piece becomes [MASK] 80%, a random id 10%, itself
   10%. Units (``masking``):

   * ``"token"``: every word piece (BERT);
   * ``"whole_word"``: a word and its ``##`` continuation pieces (BERT's whole-word masking);
   * ``"ngram"``: runs of 1..``max_ngram`` whole words, lengths drawn with p(n) ∝ 1/n (ALBERT's n-gram
     masking; ERNIE's phrase-level masking without an external chunker);
   * ``"span"``: spans given in the corpus (ERNIE's phrase/entity masking): with ``span_separator="|"`` the
     line ``the | New York Times | reported it`` has the units ``the``, ``New York Times``, ``reported it``.

   With ``"whole_word"`` / ``"ngram"`` / ``"span"`` the rate counts units (15% of the words), and a unit that
   would take the number of masked pieces over ``max_predictions_per_seq`` is dropped whole, so a unit is
   never split. The 80/10/10 choice is made per piece (as in BERT's code).

Determinism: everything is drawn from ``seed`` with stateless ops, per instance: the masks of instance
``i`` depend only on ``(seed, i)`` (``dynamic_masking=False``: static, drawn once as BERT's files are) or on
``(seed, i, epoch)`` (``dynamic_masking=True``: re-drawn every epoch, RoBERTa); the epoch's order is a
stateless permutation of ``(seed, epoch)``. The same seed gives the same batches in every run, so a resumed
run that skips the consumed batches sees exactly what an uninterrupted one would.

Features of a batch (``B`` = batch size, ``L`` = ``max_seq_length``, ``P`` = ``max_predictions_per_seq``):
``token_ids`` int32 [B, L] (masked input), ``segment_ids`` int32 [B, L], ``padding_mask`` int32 [B, L]
(1 = real token), ``masked_positions`` int32 [B, P], ``masked_ids`` int32 [B, P] (the original ids: the MLM
labels), ``masked_weights`` float32 [B, P] (1 = a real prediction, 0 = padding), ``next_sentence_label``
int32 [B] (0 = B follows A / in order, 1 = random B / swapped; HuggingFace's convention).
"""
import dataclasses
import os
import re

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from kerasplm.text.preprocessing import pack_segments

SENTENCE_TASKS = ("nsp", "sop", "none")
MASKING = ("token", "whole_word", "ngram", "span")
FEATURES = ("token_ids", "segment_ids", "padding_mask", "masked_positions", "masked_ids", "masked_weights",
            "next_sentence_label")
BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

_WIKITEXT_TITLE = re.compile(r"^ ?= [^=].* = ?$")
_WIKITEXT_HEADING = re.compile(r"^ ?(= )+.*( =)+ ?$")
_SENTENCE_END = re.compile(r"(?<= [.?!]) ")


# --------------------------------------------------------------------------------------------- corpus
def _split_wikitext(lines):
    """WikiText lines -> documents (articles) of sentences."""
    documents, current = [], []
    for line in lines:
        if _WIKITEXT_TITLE.match(line):
            if current:
                documents.append(current)
            current = []
        elif line.strip() and not _WIKITEXT_HEADING.match(line):
            current += [s.strip() for s in _SENTENCE_END.split(line.strip()) if s.strip()]
    if current:
        documents.append(current)
    return documents


def _split_blank_lines(lines):
    documents, current = [], []
    for line in lines:
        if line.strip():
            current.append(line.strip())
        elif current:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    return documents


def read_documents(path, corpus_format="auto"):
    """Reads a corpus into documents: a list of documents, each a list of sentence strings.

    ``corpus_format``: ``"lines"`` (one sentence per line, a blank line between documents), ``"wikitext"``
    (see the module docstring) or ``"auto"`` (``wikitext`` for ``*.tokens`` files, else ``lines``).
    Raises FileNotFoundError / ValueError naming the file (missing, not UTF-8 with the line, no text).
    """
    path = os.fspath(path)
    if corpus_format not in ("auto", "lines", "wikitext"):
        raise ValueError(f"corpus_format must be 'auto', 'lines' or 'wikitext', got {corpus_format!r}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"corpus not found: {path}")
    with open(path, "rb") as f:
        raw = f.read().split(b"\n")
    lines = []
    for lineno, line in enumerate(raw, start=1):
        try:
            lines.append(line.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: line {lineno} is not valid UTF-8 (byte {e.start})") from None
    if corpus_format == "auto":
        corpus_format = "wikitext" if path.endswith(".tokens") else "lines"
    documents = (_split_wikitext if corpus_format == "wikitext" else _split_blank_lines)(lines)
    if not documents:
        raise ValueError(f"corpus {path} holds no text")
    return documents


def tokenize_documents(documents, tokenizer, span_separator=None, batch_size=4096):
    """Word-piece ids of every sentence: a list (documents) of lists of ``(ids, unit_starts)`` numpy pairs.

    ``unit_starts`` (bool, one per piece) marks where a masking unit may start: at every piece that is not a
    ``##`` continuation, or, with ``span_separator``, only at the start of each separated span. Sentences
    without any piece are dropped, then documents without sentences.
    """
    vocab = tokenizer.vocab
    continuation = np.array([t.startswith("##") for t in vocab], dtype=bool)
    texts, owners = [], []
    for d, document in enumerate(documents):
        for s, sentence in enumerate(document):
            spans = sentence.split(span_separator) if span_separator else [sentence]
            for span in spans:
                texts.append(span)
                owners.append((d, s))
    pieces = []
    for start in range(0, len(texts), batch_size):
        ragged = tokenizer.tokenize(tf.constant(texts[start:start + batch_size], tf.string))
        values, lengths = ragged.flat_values.numpy(), ragged.row_lengths().numpy()
        pieces += np.split(values.astype(np.int32), np.cumsum(lengths)[:-1])
    out, index = [[] for _ in documents], {}
    for (d, s), ids in zip(owners, pieces):
        if not len(ids):
            continue
        starts = ~continuation[ids] if not span_separator else np.eye(1, len(ids), dtype=bool)[0]
        key = (d, s)
        if key in index:  # another span of the same sentence
            prev_ids, prev_starts = out[d][index[key]]
            out[d][index[key]] = (np.concatenate([prev_ids, ids]), np.concatenate([prev_starts, starts]))
        else:
            index[key] = len(out[d])
            out[d].append((ids, starts))
    return [doc for doc in out if doc]


# ------------------------------------------------------------------------------------------ instances
@dataclasses.dataclass
class Instances:
    """Segment pairs before packing and masking: ``a_ids``/``b_ids``/``a_starts``/``b_starts`` are lists of
    numpy arrays (``b_*`` empty when ``sentence_task="none"``), ``labels`` int32 [N] (``is_random_next`` for
    NSP, swapped for SOP, 0 otherwise)."""
    a_ids: list
    a_starts: list
    b_ids: list
    b_starts: list
    labels: np.ndarray

    def __len__(self):
        return len(self.labels)


def _concat(sentences):
    if not sentences:
        return np.zeros([0], np.int32), np.zeros([0], bool)
    return (np.concatenate([ids for ids, _ in sentences]), np.concatenate([st for _, st in sentences]))


def _random_segment(documents, exclude, target_length, rng):
    """Sentences from a random point of a random document other than ``exclude``, about ``target_length``
    pieces (BERT's random next segment)."""
    other = exclude
    while other == exclude:
        other = int(rng.integers(len(documents)))
    document = documents[other]
    start = int(rng.integers(len(document)))
    chosen, length = [], 0
    for sentence in document[start:]:
        chosen.append(sentence)
        length += len(sentence[0])
        if length >= target_length:
            break
    return chosen


def create_instances(documents, max_seq_length, sentence_task="nsp", short_seq_prob=0.1, seed=0):
    """Segment pairs from tokenized documents (:func:`tokenize_documents`), following
    ``create_instances_from_document`` of google-research/bert (see the module docstring).

    Returns :class:`Instances`. Raises ValueError for an unknown ``sentence_task``, a ``max_seq_length`` that
    cannot hold the special tokens and a piece of each segment, or NSP over fewer than 2 documents.
    """
    if sentence_task not in SENTENCE_TASKS:
        raise ValueError(f"sentence_task must be one of {SENTENCE_TASKS}, got {sentence_task!r}")
    pair = sentence_task != "none"
    max_tokens = max_seq_length - (3 if pair else 2)
    if max_tokens < (2 if pair else 1):
        raise ValueError(f"max_seq_length={max_seq_length} is too short for {sentence_task!r} instances")
    if sentence_task == "nsp" and len(documents) < 2:
        raise ValueError(f"next-sentence prediction needs at least 2 documents (random next segments come "
                         f"from another document), got {len(documents)}")
    rng = np.random.default_rng(seed)
    a_ids, a_starts, b_ids, b_starts, labels = [], [], [], [], []

    def target_length():  # BERT: short_seq_prob of the chunks are shorter, to match fine-tuning inputs
        if rng.random() < short_seq_prob and max_tokens > 2:
            return int(rng.integers(2, max_tokens + 1))
        return max_tokens

    for d, document in enumerate(documents):
        chunk, length, i, target = [], 0, 0, target_length()
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i][0])
            if i == len(document) - 1 or length >= target:
                label, a, b = 0, chunk, []
                if pair:
                    a_end = 1 if len(chunk) < 2 else int(rng.integers(1, len(chunk)))
                    a, b = chunk[:a_end], chunk[a_end:]
                    if sentence_task == "nsp" and (len(chunk) == 1 or rng.random() < 0.5):
                        label = 1
                        a_length = sum(len(s[0]) for s in a)
                        b = _random_segment(documents, d, max(1, target - a_length), rng)
                        i -= len(chunk) - a_end   # the unused sentences start the next chunk
                    elif sentence_task == "sop" and b and rng.random() < 0.5:
                        label, a, b = 1, b, a
                if a and (b or not pair):
                    (ids_a, starts_a), (ids_b, starts_b) = _concat(a), _concat(b)
                    a_ids.append(ids_a)
                    a_starts.append(starts_a)
                    b_ids.append(ids_b)
                    b_starts.append(starts_b)
                    labels.append(label)
                chunk, length, target = [], 0, target_length()
            i += 1
    if not labels:
        raise ValueError("the corpus gave no pretraining instance (too little text)")
    return Instances(a_ids, a_starts, b_ids, b_starts, np.asarray(labels, np.int32))


# --------------------------------------------------------------------------------------------- masking
def _seed(base, *data):
    """A stateless seed folded from ``base`` (shape [2]) and the integers ``data``."""
    seed = tf.cast(base, tf.int64)
    for value in data:
        seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(value, tf.int64))
    return seed


def _stateless_shuffle(seed):
    def shuffle(values):
        keys = tf.random.stateless_uniform(tf.shape(values)[:1], seed)
        return tf.gather(values, tf.argsort(keys))
    return shuffle


class CappedItemSelector(tf_text.RandomItemSelector):
    """tensorflow-text's ``RandomItemSelector`` with a stateless shuffle and a cap on word *pieces*.

    The rate picks ``ceil(rate · units)`` units (at most ``max_selections`` of them); over a
    ``[batch, (units), (pieces)]`` input, units are then kept in a random order while the number of their
    pieces stays within ``max_selections``, so no unit is split and the cap holds for pieces. The shuffle's
    seed is fixed per selector: use one selector per example (each row would get the same permutation).
    """

    def __init__(self, max_selections, selection_rate, unselectable_ids, seed):
        shuffle_seed, self._cap_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        super().__init__(max_selections, selection_rate, unselectable_ids, shuffle_fn=_stateless_shuffle(shuffle_seed))

    def get_selection_mask(self, input_ids, axis):
        selected = super().get_selection_mask(input_ids, axis)
        if input_ids.ragged_rank < 2:
            return selected
        pieces = input_ids.row_lengths(axis=2)
        dense_selected = selected.to_tensor(False)
        dense_pieces = tf.where(dense_selected, pieces.to_tensor(0), 0)
        keys = tf.random.stateless_uniform(tf.shape(dense_pieces), self._cap_seed)
        order = tf.argsort(tf.where(dense_selected, keys, 2.0), axis=1)
        total = tf.cumsum(tf.gather(dense_pieces, order, batch_dims=1), axis=1)
        kept = tf.gather(total <= self.max_selections_per_batch, tf.argsort(order, axis=1), batch_dims=1)
        return tf.RaggedTensor.from_tensor(kept & dense_selected, lengths=selected.row_lengths())


class StatelessMaskValuesChooser(tf_text.MaskValuesChooser):
    """tensorflow-text's ``MaskValuesChooser`` (80% [MASK] / 10% random id / 10% kept) drawn with stateless
    ops from ``seed``: the same seed gives the same choices."""

    def __init__(self, vocab_size, mask_token, seed, mask_token_rate=0.8, random_token_rate=0.1):
        super().__init__(vocab_size, mask_token, mask_token_rate, random_token_rate)
        self._mask_rate = mask_token_rate
        self._seeds = tf.unstack(tf.random.experimental.stateless_split(seed, 2))

    def get_mask_values(self, masked_lm_ids):
        ids = masked_lm_ids.merge_dims(1, -1) if masked_lm_ids.ragged_rank > 1 else masked_lm_ids
        flat = ids.flat_values
        u = tf.random.stateless_uniform(tf.shape(flat), self._seeds[0])
        random_ids = tf.random.stateless_uniform(tf.shape(flat), self._seeds[1], minval=0,
                                                 maxval=self.vocab_size, dtype=tf.int64)
        values = tf.where(u < self._mask_rate, tf.cast(self.mask_token, flat.dtype),
                          tf.where(u < self._mask_rate + self.random_token_rate, tf.cast(random_ids, flat.dtype),
                                   flat))
        return ids.with_flat_values(values)


def _ngram_starts(word_starts, max_ngram, seed):
    """Piece-level starts of n-grams of whole words, n in 1..max_ngram with p(n) ∝ 1/n."""
    word_index = tf.cumsum(tf.cast(word_starts, tf.int32)) - 1
    num_words = tf.reduce_sum(tf.cast(word_starts, tf.int32))
    logits = tf.math.log(1.0 / tf.range(1, max_ngram + 1, dtype=tf.float32))[tf.newaxis]
    lengths = tf.random.stateless_categorical(logits, num_words, seed, dtype=tf.int32)[0] + 1
    ends = tf.cumsum(lengths)
    gram_starts = tf.concat([[0], ends[:-1]], 0)
    gram_starts = tf.boolean_mask(gram_starts, gram_starts < num_words)
    is_gram_start = tf.scatter_nd(gram_starts[:, tf.newaxis], tf.ones_like(gram_starts, tf.bool), [num_words])
    return word_starts & tf.gather(is_gram_start, tf.maximum(word_index, 0))


class PretrainingMasker:
    """The in-graph packing and masking of one instance (see the module docstring).

    Args:
      vocab_size, cls_id, sep_id, mask_id, pad_id: the vocabulary's.
      max_seq_length, max_predictions_per_seq, mask_rate: BERT's ``max_seq_length`` (128), ``max_predictions_per_seq``
        (20), ``masked_lm_prob`` (0.15).
      masking: one of ``MASKING``; max_ngram: for ``"ngram"``.
      mask_token_rate, random_token_rate: 0.8 and 0.1.
    """

    def __init__(self, vocab_size, cls_id, sep_id, mask_id, pad_id=0, max_seq_length=128,
                 max_predictions_per_seq=20, mask_rate=0.15, masking="token", max_ngram=3, mask_token_rate=0.8,
                 random_token_rate=0.1):
        if masking not in MASKING:
            raise ValueError(f"masking must be one of {MASKING}, got {masking!r}")
        if not 0.0 < mask_rate <= 1.0:
            raise ValueError(f"mask_rate must be in (0, 1], got {mask_rate}")
        if max_predictions_per_seq < 1 or max_seq_length < 3:
            raise ValueError(f"max_predictions_per_seq must be >= 1 and max_seq_length >= 3, got "
                             f"{max_predictions_per_seq}, {max_seq_length}")
        if max_ngram < 1:
            raise ValueError(f"max_ngram must be >= 1, got {max_ngram}")
        self.vocab_size, self.cls_id, self.sep_id, self.mask_id, self.pad_id = (
            int(vocab_size), int(cls_id), int(sep_id), int(mask_id), int(pad_id))
        self.max_seq_length, self.max_predictions = int(max_seq_length), int(max_predictions_per_seq)
        self.mask_rate, self.masking, self.max_ngram = float(mask_rate), masking, int(max_ngram)
        self.mask_token_rate, self.random_token_rate = float(mask_token_rate), float(random_token_rate)
        # Traced once per masker (and segment count), then reused by every dataset built with it.
        ids, starts = tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.bool)
        seed = tf.TensorSpec([2], tf.int64)
        self.mask_pair = tf.function(self.__call__, input_signature=[ids, starts, ids, starts, seed], autograph=False)
        self.mask_single = tf.function(lambda a_ids, a_starts, seed: self(a_ids, a_starts, None, None, seed),
                                       input_signature=[ids, starts, seed], autograph=False)

    def _unit_starts(self, ids, starts, seed):
        special = (ids == self.cls_id) | (ids == self.sep_id)
        if self.masking == "token":
            return tf.ones_like(starts)
        if self.masking == "ngram":
            starts = _ngram_starts(starts | special, self.max_ngram, seed)
        # A special token is a unit of its own, and the piece after it starts one (segments never merge).
        after_special = tf.concat([[False], special[:-1]], 0)
        return starts | special | after_special

    def __call__(self, a_ids, a_starts, b_ids, b_starts, seed):
        """One instance (1-D int ids, bool starts; ``b_*`` empty for single segments) -> dict of features
        (without the label), fixed shapes."""
        # Ids and unit starts travel together (2 * id + start) through one packing and trimming.
        def joined(ids, starts):
            value = tf.cast(ids, tf.int64) * 2 + tf.cast(starts, tf.int64)
            return tf.RaggedTensor.from_tensor(value[tf.newaxis])

        segments = [joined(a_ids, a_starts)] + ([joined(b_ids, b_starts)] if b_ids is not None else [])
        packed, segment_ids = pack_segments(segments, 2 * self.cls_id + 1, 2 * self.sep_id + 1, self.max_seq_length)
        packed, segment_ids = packed.flat_values, segment_ids.flat_values
        ids, starts = packed // 2, packed % 2 > 0
        unit_seed, select_seed, value_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
        unit_ids = tf.cumsum(tf.cast(self._unit_starts(ids, starts, unit_seed), tf.int64)) - 1
        units = tf.RaggedTensor.from_value_rowids(ids, unit_ids)
        batch = tf.RaggedTensor.from_row_lengths(units, tf.reshape(units.nrows(), [1]))   # [1, (units), (pieces)]
        selector = CappedItemSelector(self.max_predictions, self.mask_rate,
                                      [self.cls_id, self.sep_id, self.pad_id], select_seed)
        chooser = StatelessMaskValuesChooser(self.vocab_size, self.mask_id, value_seed, self.mask_token_rate,
                                             self.random_token_rate)
        masked, positions, labels = tf_text.mask_language_model(batch, selector, chooser, axis=1)
        token_ids, padding_mask = tf_text.pad_model_inputs(masked.merge_dims(1, -1), self.max_seq_length,
                                                           pad_value=self.pad_id)
        segment_ids, _ = tf_text.pad_model_inputs(tf.RaggedTensor.from_tensor(segment_ids[tf.newaxis]),
                                                  self.max_seq_length)
        masked_positions, weights = tf_text.pad_model_inputs(positions, self.max_predictions)
        masked_ids, _ = tf_text.pad_model_inputs(labels, self.max_predictions)
        as_int = lambda t: tf.cast(t[0], tf.int32)  # noqa: E731
        return {"token_ids": as_int(token_ids), "segment_ids": as_int(segment_ids),
                "padding_mask": as_int(padding_mask), "masked_positions": as_int(masked_positions),
                "masked_ids": as_int(masked_ids), "masked_weights": tf.cast(weights[0], tf.float32)}


def _ragged(arrays, dtype):
    lengths = np.array([len(a) for a in arrays], np.int64)
    values = np.concatenate(arrays).astype(dtype) if len(arrays) and lengths.sum() else np.zeros([0], dtype)
    return tf.RaggedTensor.from_row_lengths(values, lengths)


def make_pretraining_dataset(instances, masker, batch_size, seed=0, shuffle=True, repeat=True,
                             dynamic_masking=True, drop_remainder=None, num_parallel_calls=tf.data.AUTOTUNE):
    """Batches of masked instances (the features of the module docstring).

    Args:
      instances: :class:`Instances` (:func:`create_instances`).
      masker: a :class:`PretrainingMasker`.
      batch_size: instances per batch.
      seed: int; orders and masks are stateless functions of it (see the module docstring).
      shuffle: a fresh stateless permutation each epoch (else the instances' order).
      repeat: epochs without end (else one).
      dynamic_masking: masks re-drawn each epoch (RoBERTa) rather than fixed per instance (BERT's static).
      drop_remainder: default ``repeat`` (training batches all full; one trace).
    """
    n = len(instances)
    if n == 0:
        raise ValueError("no pretraining instances")
    pair = any(len(b) for b in instances.b_ids)
    tables = {"a_ids": _ragged(instances.a_ids, np.int32), "a_starts": _ragged(instances.a_starts, bool),
              "b_ids": _ragged(instances.b_ids, np.int32), "b_starts": _ragged(instances.b_starts, bool)}
    labels = tf.constant(instances.labels, tf.int32)
    base = tf.constant([int(seed) & 0x7FFFFFFF, 0x5EED], tf.int64)

    def epoch_order(epoch):
        order = tf.range(n, dtype=tf.int64)
        if shuffle:
            keys = tf.random.stateless_uniform([n], _seed(base, 1, epoch))
            order = tf.cast(tf.argsort(keys), tf.int64)
        return tf.data.Dataset.from_tensor_slices((order, tf.fill([n], tf.cast(epoch, tf.int64))))

    def example(index, epoch):
        seed = _seed(base, 2, index, epoch if dynamic_masking else -1)
        row = {k: v[index] for k, v in tables.items()}
        if pair:
            features = masker.mask_pair(row["a_ids"], row["a_starts"], row["b_ids"], row["b_starts"], seed)
        else:
            features = masker.mask_single(row["a_ids"], row["a_starts"], seed)
        features["next_sentence_label"] = labels[index]
        return features

    epochs = tf.data.Dataset.range(2 ** 62 if repeat else 1)
    ds = epochs.flat_map(epoch_order).map(example, num_parallel_calls=num_parallel_calls, deterministic=True)
    ds = ds.batch(batch_size, drop_remainder=repeat if drop_remainder is None else drop_remainder)
    return ds.prefetch(tf.data.AUTOTUNE)


def masker_for_tokenizer(tokenizer, **kwargs):
    """A :class:`PretrainingMasker` with the special ids of ``tokenizer`` (needs [CLS], [SEP], [MASK], [PAD])."""
    missing = [t for t in ("[CLS]", "[SEP]", "[MASK]", "[PAD]") if t not in tokenizer.special_tokens]
    if missing:
        raise ValueError(f"the vocabulary lacks BERT's special token(s) {', '.join(missing)}")
    return PretrainingMasker(tokenizer.vocab_size, tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]"),
                             tokenizer.token_to_id("[MASK]"), tokenizer.pad_id, **kwargs)
