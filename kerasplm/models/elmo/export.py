"""ELMo as a TF Serving SavedModel: sentences in, contextual vectors out.

``serving_default(sentences: string [batch])`` splits each sentence on whitespace (in graph), encodes the
tokens as bilm-tf character ids (:mod:`kerasplm.text.characters`; tokens longer than 48 bytes are cut for the
CNN, invalid UTF-8 is taken byte by byte), runs the biLM on ``<S> tokens </S>`` and returns, with
n = the batch's longest sentence in tokens::

    tokens   string  [batch, n]           the whitespace tokens ("" past a sentence's end)
    mask     bool    [batch, n]           True at real tokens
    layer_j  float32 [batch, n, 2P]       j = 0 .. L: [x; x], then [→h_j; ←h_j] (0 past the end)
    elmo     float32 [batch, n, 2P]       γ Σ_j s_j h_j (the exported ScalarMix)

The call's work is capped before the biLM runs (an INVALID_ARGUMENT naming the cap, HTTP 400 under TF
Serving and ``kerasplm serve``): at most ``max_tokens`` tokens per sentence and at most ``max_batch_tokens``
for the batch, counted as rows x the longest sentence, the size every output is padded to.

Each row is independent of its batch-mates (the mix's optional layer norm, which pools over the batch, is
refused at export). The mix is an :class:`kerasplm.models.elmo.model.ElmoEmbedder`'s first one if given (e.g. one
trained in a downstream model), else the plain average of the L+1 layers (s_j = 1/(L+1), γ = 1).
"""
import tensorflow as tf

from kerasplm.export.base import ExportModule, save_version
from kerasplm.models.elmo.manifest import DEFAULT_EXPORT_MAX_BATCH_TOKENS, DEFAULT_EXPORT_MAX_TOKENS
from kerasplm.models.elmo.model import ElmoEmbedder
from kerasplm.models.elmo.runs import Elmo
from kerasplm.runs import load_run
from kerasplm.text.characters import sentence_char_ids

FAMILY = "elmo"

__all__ = ["ElmoModule", "export_elmo"]


class ElmoModule(ExportModule):
    """The exported ELMo: an :class:`ElmoEmbedder` (frozen biLM + mix) behind a strings-in signature."""

    family = FAMILY

    def __init__(self, embedder, max_tokens=DEFAULT_EXPORT_MAX_TOKENS, max_batch_tokens=DEFAULT_EXPORT_MAX_BATCH_TOKENS):
        if not 1 <= max_tokens <= max_batch_tokens:
            raise ValueError(f"need 1 <= max_tokens <= max_batch_tokens, got {max_tokens} and {max_batch_tokens}")
        if embedder.layer_norm:
            raise ValueError("a ScalarMix with layer_norm pools over the batch, so exported rows would depend "
                             "on their batch-mates; export a mix without layer norm")
        super().__init__(embedder, name="elmo")
        self.num_layers = embedder.bilm.config.n_layers + 1
        self.max_characters = embedder.bilm.config.max_characters_per_token
        self.max_tokens, self.max_batch_tokens = int(max_tokens), int(max_batch_tokens)

    def _check_work(self, tokens):
        """Asserts that fail the call, with one line naming the cap, when a sentence or the padded batch is too
        long; the biLM runs after them (control dependencies)."""
        lengths = tokens.row_lengths()
        longest = tf.reduce_max(tf.concat([lengths, [0]], 0))
        rows = tf.shape(lengths, out_type=tf.int64)[0]
        row = tf.argmax(tf.concat([lengths, [0]], 0))
        return [
            tf.debugging.Assert(longest <= self.max_tokens, [tf.strings.format(
                "sentence {} has {} tokens; this export accepts at most {} per sentence "
                "(kerasplm export elmo --max-tokens)", (row, longest, self.max_tokens))]),
            tf.debugging.Assert(rows * longest <= self.max_batch_tokens, [tf.strings.format(
                "{} sentences padded to the longest ({} tokens) make {} tokens; this export accepts at most {} "
                "per call (kerasplm export elmo --max-batch-tokens): send fewer or shorter sentences",
                (rows, longest, rows * longest, self.max_batch_tokens))]),
        ]

    def signatures(self):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
        def serving_default(sentences):
            tokens = tf.strings.split(sentences)
            with tf.control_dependencies(self._check_work(tokens)):
                char_ids = sentence_char_ids(tokens, self.max_characters, add_boundaries=False)
            out = self.model(char_ids)
            outputs = {"tokens": tokens.to_tensor(default_value=""),          # as wide as char_ids
                       "mask": out["mask"], "elmo": tf.cast(out["elmo"], tf.float32)}
            for j in range(self.num_layers):
                outputs[f"layer_{j}"] = tf.cast(out["layers"][:, j], tf.float32)
            return outputs

        return {"serving_default": serving_default}


def export_elmo(elmo, model_base_path, version=None, overwrite=False, embedder=None,
                max_tokens=DEFAULT_EXPORT_MAX_TOKENS, max_batch_tokens=DEFAULT_EXPORT_MAX_BATCH_TOKENS):
    """Writes ``model_base_path/<version>/`` for ``elmo`` (a :class:`kerasplm.models.elmo.runs.Elmo`, or the model
    :func:`kerasplm.runs.load_run` returns for an ``elmo`` run); returns its path.

    ``embedder``: an :class:`ElmoEmbedder` over ``elmo.bilm`` whose first mix is exported (default: equal weights).
    ``max_tokens`` / ``max_batch_tokens``: the export's caps on a call's work (see the module docstring).
    """
    if not isinstance(elmo, Elmo):
        elmo = Elmo(elmo)
    if embedder is None:
        embedder = ElmoEmbedder(elmo.bilm)
        embedder.build()
    elif embedder.bilm is not elmo.bilm:
        raise ValueError("the embedder runs another biLM than the one being exported")
    module = ElmoModule(embedder, max_tokens, max_batch_tokens)
    mix = embedder.mixes[0]
    metadata = {"preset": elmo.config.get("preset", elmo.bilm.name), "step": elmo.step, "num_layers": module.num_layers,
                "dim": 2 * embedder.bilm.config.output_dim,
                "mix_weights": [float(s) for s in mix.layer_weights.numpy()],
                "mix_gamma": float(mix.gamma.numpy()), "vocab_size": len(elmo.vocab),
                "max_tokens": module.max_tokens, "max_batch_tokens": module.max_batch_tokens}
    return save_version(module, model_base_path, version=version, overwrite=overwrite, metadata=metadata)


def export_elmo_run(run, to, version=None, overwrite=False, max_tokens=DEFAULT_EXPORT_MAX_TOKENS,
                    max_batch_tokens=DEFAULT_EXPORT_MAX_BATCH_TOKENS):
    """``kerasplm export elmo``: export an ELMo run (trained or converted); prints and returns the version
    directory."""
    if max_tokens > max_batch_tokens:
        raise ValueError(f"--max-tokens ({max_tokens}) is more than --max-batch-tokens ({max_batch_tokens}): "
                         "a single sentence at the cap would be refused")
    path = export_elmo(load_run(run, family=FAMILY, what="an ELMo run (kerasplm train elmo / convert elmo)"), to,
                       version=version, overwrite=overwrite, max_tokens=max_tokens, max_batch_tokens=max_batch_tokens)
    print(path)
    return path
