"""Format-2 runs of the GPT family: ``gpt`` (a ``GPTConfig`` as ``model``; the tokenizer named by the assets
``spm_model`` or ``bpe_vocab`` + ``bpe_merges``, or none) and ``gpt_classifier`` (the grown backbone's
``GPTConfig``, labels, head and special ids as ``model``; ``max_length`` among the options)."""
import os

from kerasplm.models.gpt.model import GPT, GPTBackbone, GPTConfig
from kerasplm.models.gpt.classifier import GPTClassifier
from kerasplm.runs import RunDirError
from kerasplm.text.bpe import BytePairTokenizer
from kerasplm.models.gpt.preprocessor import GPTClassifierPreprocessor
from kerasplm.text.sentencepiece import SentencePieceTokenizer

CLASSIFIER_KEYS = ("backbone", "labels", "num_labels", "dropout", "task_type", "lm_weight", "special_ids")


def _tokenizer(run, config):
    """The tokenizer a format-2 GPT run's assets name (None when they name none); RunDirError naming the file."""
    assets = config.get("assets") or {}
    if "spm_model" in assets:
        path = run.asset(config, "spm_model")
        try:
            return SentencePieceTokenizer(path)
        except ValueError:
            raise run.error(os.path.relpath(path, run.path), "not a SentencePiece model; the file is damaged or "
                                                             "from another tool") from None
    if "bpe_vocab" in assets or "bpe_merges" in assets:
        vocab, merges = run.asset(config, "bpe_vocab"), run.asset(config, "bpe_merges")
        try:
            return BytePairTokenizer(vocab, merges)
        except (OSError, ValueError) as e:
            raise RunDirError(str(e)) from None
    return None


def build_gpt(run, config):
    try:
        model_config = GPTConfig(**config["model"]).validate()
    except (TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"bad GPT model config ({e})") from None
    model = GPT(backbone=GPTBackbone.from_config_object(model_config, name=config["preset"]))
    return model, _tokenizer(run, config)


def build_gpt_classifier(run, config):
    model = config["model"]
    missing = [key for key in CLASSIFIER_KEYS if key not in model]
    try:
        if missing:
            raise KeyError(", ".join(missing))
        backbone_config = GPTConfig(**model["backbone"]).validate()
    except (KeyError, TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"'model' is not a GPT classifier config ({e})") from None
    tokenizer = _tokenizer(run, config)
    if tokenizer is None:
        raise run.error(run.CONFIG, "'assets' names no tokenizer ('spm_model' or 'bpe_vocab'/'bpe_merges')")
    try:
        preprocessor = GPTClassifierPreprocessor(tokenizer, model["special_ids"],
                                                 int(config["options"].get("max_length") or 128), model["task_type"])
        classifier = GPTClassifier(GPTBackbone.from_config_object(backbone_config), int(model["num_labels"]),
                                   task_type=model["task_type"], dropout=float(model["dropout"]),
                                   lm_weight=float(model["lm_weight"]), labels=list(model["labels"]),
                                   pair_input=preprocessor.pair_input, preprocessor=preprocessor)
    except (TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"'model' is not a GPT classifier config ({e})") from None
    return classifier, preprocessor


BUILDERS = {"gpt": build_gpt, "gpt_classifier": build_gpt_classifier}
