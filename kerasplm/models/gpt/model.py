"""The GPT family: GPT-1 (Radford et al., 2018), GPT-2 (Radford et al., 2019) and GPT-3 sizes (Brown et
al., 2020) on the decoder-only base of :mod:`kerasplm.models.gpt.causal_lm`.

    h_0 = W_e[x] + W_p[pos]                        (token + learned position embeddings)
    h_l = Block_l(h_{l-1})                         (causal self-attention + GELU FFN, no cross-attention)
    logits = LN_f(h_L) W_eᵀ                        (output layer tied to the token embedding)

Two layouts, one switch (``normalize_first``):

* GPT-2 (``True``): pre-LN blocks ``x + F(LN(x))``, a final LayerNorm, tanh-approximate GELU
  (``gelu_tanh``), epsilon 1e-5, and the residual output projections (attention output, second FFN
  layer) initialised with std 0.02/√(2·n_layer) ("we scale the weights of residual layers at
  initialization by a factor of 1/√N", GPT-2 §2.3).
* GPT-1 (``False``): post-LN blocks ``LN(x + F(x))``, no final LayerNorm, GELU, epsilon 1e-5.

The GPT-3 presets (paper table 2.1, context 2048) are configurations for parameter counting: GPT-3's
alternating locally banded sparse attention does not change the weight count. The table gives
d_model = 5140 for 13B, which 40 heads of 128 do not divide; we use 40 · 128 = 5120.
"""
import dataclasses
import math

import keras

from kerasplm.models.gpt.causal_lm import CausalLM, CausalLMConfig, DecoderOnlyBackbone
from kerasplm.models.gpt.causal_lm import num_parameters as causal_lm_num_parameters
from kerasplm.models.presets import register_presets


@dataclasses.dataclass(frozen=True)
class GPTConfig(CausalLMConfig):
    """:class:`CausalLMConfig` plus ``scale_residual_init`` (GPT-2's 1/√(2·n_layer) residual init)."""

    scale_residual_init: bool = True


def _gpt2(num_layers, d_model, num_heads, max_positions=1024, vocab_size=50257):
    return GPTConfig(vocab_size=vocab_size, num_layers=num_layers, d_model=d_model, num_heads=num_heads,
                     dff=4 * d_model, max_positions=max_positions)


GPT1 = GPTConfig(vocab_size=40478, num_layers=12, d_model=768, num_heads=12, dff=3072, max_positions=512,
                 normalize_first=False, activation="gelu", scale_residual_init=False)

PRESETS = {
    "gpt_tiny": _gpt2(2, 32, 4, max_positions=64, vocab_size=64),
    "gpt1": GPT1,
    "gpt2": _gpt2(12, 768, 12),
    "gpt2_medium": _gpt2(24, 1024, 16),
    "gpt2_large": _gpt2(36, 1280, 20),
    "gpt2_xl": _gpt2(48, 1600, 25),
    # GPT-3 paper, table 2.1 (n_params, n_layers, d_model, n_heads); n_ctx = 2048 for all.
    "gpt3_small": _gpt2(12, 768, 12, max_positions=2048),
    "gpt3_medium": _gpt2(24, 1024, 16, max_positions=2048),
    "gpt3_large": _gpt2(24, 1536, 16, max_positions=2048),
    "gpt3_xl": _gpt2(24, 2048, 24, max_positions=2048),
    "gpt3_2_7b": _gpt2(32, 2560, 32, max_positions=2048),
    "gpt3_6_7b": _gpt2(32, 4096, 32, max_positions=2048),
    "gpt3_13b": _gpt2(40, 5120, 40, max_positions=2048),
    "gpt3_175b": _gpt2(96, 12288, 96, max_positions=2048),
}


def num_parameters(config):
    """Exact weight count (tied output layer): the decoder-only formula (the init does not change it)."""
    return causal_lm_num_parameters(config)


def residual_projections(block):
    """The Dense layers whose outputs are added to the residual stream: attention output, FFN layer 2."""
    return [block.mha1.dense, block.ffn.layers[-1]]


@keras.saving.register_keras_serializable(package="kerasplm")
class GPTBackbone(DecoderOnlyBackbone):
    """GPT-1/GPT-2 backbone: :class:`DecoderOnlyBackbone` with GPT's residual initialisation.

    Args: the fields of :class:`GPTConfig` (by keyword, or by position in its field order), plus Keras'
    ``name`` etc.
    Call: ``token_ids (batch, seq_len)`` right-padded -> ``{"sequence_output": (batch, seq_len, d_model)}``.
    """

    config_class = GPTConfig
    preset_family = "gpt"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)   # ConfigMixin: self.config, a GPTConfig
        if self.config.scale_residual_init:
            # Re-draw the residual projections with std initializer_range / √(2·n_layer) (GPT-2 §2.3;
            # 2 residual additions per block). Biases stay zero.
            std = self.config.initializer_range / math.sqrt(2 * self.config.num_layers)
            for block in self.blocks:
                for layer in residual_projections(block):
                    init = keras.initializers.TruncatedNormal(stddev=std)
                    layer.kernel.assign(init(layer.kernel.shape, layer.kernel.dtype))

    @staticmethod
    def num_parameters(config):
        return num_parameters(config)


@keras.saving.register_keras_serializable(package="kerasplm")
class GPT(CausalLM):
    """GPT language model: tied LM head over a :class:`GPTBackbone` (loss and ``generate`` as
    :class:`CausalLM`). Call: ``token_ids (batch, seq_len)`` -> float32 logits ``(batch, seq_len, vocab)``."""

    backbone_class = GPTBackbone


register_presets("gpt", GPTBackbone, PRESETS, num_parameters=num_parameters,
                 description="GPT-1 / GPT-2 / GPT-3 decoder-only language models")

