"""Format-2 translator runs (family ``transformer_translator``): a ``TransformerConfig`` and two WordPiece files."""
from kerasplm.models.transformer.model import Transformer, TransformerConfig
from kerasplm.text import TranslatorPreprocessor, WordPieceTokenizer


def build_translator(run, config):
    try:
        model_config = TransformerConfig(**config["model"])
    except (TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"'model' is not a valid TransformerConfig ({e})") from None
    preprocessor = TranslatorPreprocessor(WordPieceTokenizer(run.asset(config, "source_vocab")),
                                          WordPieceTokenizer(run.asset(config, "target_vocab")),
                                          max_source_length=model_config.pe_input)
    return Transformer.from_config_object(model_config, name=config["preset"]), preprocessor


BUILDERS = {"transformer_translator": build_translator}
