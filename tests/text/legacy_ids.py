"""The translator's token ids as computed before preprocessors existed (a frozen copy of the old behaviour),
so tests can prove existing run directories keep exactly the same ids."""
import tensorflow as tf
import tensorflow_text as tf_text

from kerasplm.text import sanitize_utf8


def old_translator_ids(vocab, texts, max_length=None):
    """The old ``WordPieceTokenizer.tokenize`` wrapped every sentence in [START] ... [END]; a sentence longer
    than ``max_length`` kept its first ``max_length`` tokens with the last one replaced by [END]."""
    bert = tf_text.BertTokenizer(tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(vocab, tf.range(len(vocab), dtype=tf.int64)), 1),
        lower_case=True, token_out_type=tf.int64, unknown_token="[UNK]")
    rows = bert.tokenize(sanitize_utf8(tf.constant(texts))).merge_dims(-2, -1).to_list()
    start, end = vocab.index("[START]"), vocab.index("[END]")
    out = []
    for row in rows:
        row = [start] + row + [end]
        if max_length is not None and len(row) > max_length:
            row = row[:max_length - 1] + [end]
        out.append(row)
    return out
