"""What every tokenizer shares (WordPiece, GPT-2's BPE, SentencePiece, characters): the Python-side vocabulary
lookups, and the tracing of its id-taking graph functions when a SavedModel is written."""

import tensorflow as tf

__all__ = ["VocabularyLookup"]

# The id inputs a tokenizer's id-taking graph functions accept: dense [batch, len] or ragged [batch, (len)].
ID_SPECS = (tf.TensorSpec([None, None], tf.int64), tf.RaggedTensorSpec([None, None], tf.int64))


class VocabularyLookup:
    """Mixin: a token's id is its position in the vocabulary list given to :meth:`_set_vocabulary`.

    These are conveniences for Python code (building preprocessors, printing); the graph functions of
    each tokenizer keep their own tables, so exported SavedModels never call them.
    """

    vocabulary_kind = "vocabulary"  # how errors name it ("SentencePiece vocabulary", ...)
    # Graph functions without an input signature that take ids, dense or ragged (ID_SPECS). A SavedModel keeps
    # only the traces such a function has, so both are traced when one is written (_trackable_children), not when
    # the tokenizer is made: loading a run, fine-tuning and serving from Python never need them, and four traces
    # per tokenizer were a measurable part of every load_run.
    id_functions = ()

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # tf.saved_model.save walks the object graph through this hook (save_type "savedmodel") before it
        # serializes any function, so traces added here are saved with the rest.
        if save_type == "savedmodel":
            for name in self.id_functions:
                for spec in ID_SPECS:
                    getattr(self, name).get_concrete_function(spec)
        return super()._trackable_children(save_type, **kwargs)

    def _set_vocabulary(self, tokens):
        self._vocab_list = list(tokens)
        self._ids = {token: i for i, token in enumerate(self._vocab_list)}

    @property
    def vocab_size(self):
        return len(self._vocab_list)

    @property
    def vocab(self):
        """The tokens in id order (a copy)."""
        return list(self._vocab_list)

    def token_to_id(self, token):
        """The id of ``token``; a KeyError naming it (and the special tokens) if the vocabulary lacks it."""
        try:
            return self._ids[token]
        except KeyError:
            specials = ", ".join(self._special_token_strings()) or "none"
            raise KeyError(f"token {token!r} is not in the {self.vocabulary_kind} ({self.vocab_size} tokens; "
                           f"special tokens: {specials})") from None

    def id_to_token(self, token_id):
        """The token of ``token_id``; an IndexError outside ``[0, vocab_size)``."""
        if not 0 <= int(token_id) < self.vocab_size:
            raise IndexError(f"token id {token_id} is outside the vocabulary [0, {self.vocab_size})")
        return self._vocab_list[int(token_id)]

    def _special_token_strings(self):
        """The special tokens as strings, for error messages (subclasses say where they keep them)."""
        return []
