"""ELMo as a TF Serving SavedModel: sentences in, contextual vectors out.

``serving_default(sentences: string [batch])`` splits each sentence on whitespace (in graph), encodes the
tokens as bilm-tf character ids (:mod:`kerasplm.text.characters`; tokens longer than 48 bytes are cut for the
CNN, invalid UTF-8 is taken byte by byte), runs the biLM on ``<S> tokens </S>`` and returns, with
n = the batch's longest sentence in tokens::

    tokens   string  [batch, n]           the whitespace tokens ("" past a sentence's end)
    mask     bool    [batch, n]           True at real tokens
    layer_j  float32 [batch, n, 2P]       j = 0 .. L: [x; x], then [→h_j; ←h_j] (0 past the end)
    elmo     float32 [batch, n, 2P]       γ Σ_j s_j h_j (the exported ScalarMix)

Each row is independent of its batch-mates (the mix's optional layer norm, which pools over the batch, is
refused at export). The mix is an :class:`kerasplm.models.elmo.ElmoEmbedder`'s first one if given (e.g. one
trained in a downstream model), else the plain average of the L+1 layers (s_j = 1/(L+1), γ = 1).
"""
import tensorflow as tf

from kerasplm.export.base import ExportModule, save_version
from kerasplm.models.elmo import ElmoEmbedder
from kerasplm.models.elmo_runs import Elmo
from kerasplm.runs import load_run
from kerasplm.text.characters import sentence_char_ids

FAMILY = "elmo"

__all__ = ["ElmoModule", "export_elmo"]


class ElmoModule(ExportModule):
    """The exported ELMo: an :class:`ElmoEmbedder` (frozen biLM + mix) behind a strings-in signature."""

    family = FAMILY

    def __init__(self, embedder):
        if embedder.layer_norm:
            raise ValueError("a ScalarMix with layer_norm pools over the batch, so exported rows would depend "
                             "on their batch-mates; export a mix without layer norm")
        super().__init__(embedder, name="elmo")
        self.num_layers = embedder.bilm.config.n_layers + 1
        self.max_characters = embedder.bilm.config.max_characters_per_token

    def signatures(self):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
        def serving_default(sentences):
            tokens = tf.strings.split(sentences)
            char_ids = sentence_char_ids(tokens, self.max_characters, add_boundaries=False)
            out = self.model(char_ids)
            outputs = {"tokens": tokens.to_tensor(default_value=""),          # as wide as char_ids
                       "mask": out["mask"], "elmo": tf.cast(out["elmo"], tf.float32)}
            for j in range(self.num_layers):
                outputs[f"layer_{j}"] = tf.cast(out["layers"][:, j], tf.float32)
            return outputs

        return {"serving_default": serving_default}


def export_elmo(elmo, model_base_path, version=None, overwrite=False, embedder=None):
    """Writes ``model_base_path/<version>/`` for ``elmo`` (a :class:`kerasplm.models.elmo_runs.Elmo`, or the model
    :func:`kerasplm.runs.load_run` returns for an ``elmo`` run); returns its path.

    ``embedder``: an :class:`ElmoEmbedder` over ``elmo.bilm`` whose first mix is exported (default: equal weights).
    """
    if not isinstance(elmo, Elmo):
        elmo = Elmo(elmo)
    if embedder is None:
        embedder = ElmoEmbedder(elmo.bilm)
        embedder.build()
    elif embedder.bilm is not elmo.bilm:
        raise ValueError("the embedder runs another biLM than the one being exported")
    module = ElmoModule(embedder)
    mix = embedder.mixes[0]
    metadata = {"preset": elmo.config.get("preset", elmo.bilm.name), "step": elmo.step, "num_layers": module.num_layers,
                "dim": 2 * embedder.bilm.config.output_dim,
                "mix_weights": [float(s) for s in mix.layer_weights.numpy()],
                "mix_gamma": float(mix.gamma.numpy()), "vocab_size": len(elmo.vocab)}
    return save_version(module, model_base_path, version=version, overwrite=overwrite, metadata=metadata)


def export_elmo_run(run, to, version=None, overwrite=False):
    """``kerasplm export elmo``: export an ELMo run (trained or converted); prints and returns the version
    directory."""
    path = export_elmo(load_run(run, family=FAMILY, what="an ELMo run (kerasplm train elmo / convert elmo)"), to,
                       version=version, overwrite=overwrite)
    print(path)
    return path
