"""Format-2 runs of the ELMo family: families ``elmo`` (trained or converted biLMs) and ``elmo_classifier``.

Their ``model`` sections were::

    elmo             {"bilm": ElmoConfig fields, "vocab_size": V or None (a converted biLM: no softmax),
                      "num_sampled": n}; asset "vocab" (bilm-tf's vocabulary file)
    elmo_classifier  {"vocab_size", "embedding_dim", "lstm_units", "dropout", "labels": [...],
                      "elmo": {"bilm": ElmoConfig fields, "num_mixes", "layer_norm"} or null};
                     asset "vocab" (words.txt); the preprocessor's length was options["max_length"]

The checkpoints are unchanged: an ``elmo`` run's ``model`` is the :class:`ElmoLanguageModel` (``backbone`` alone
when there is no softmax), an ``elmo_classifier`` run's the whole :class:`ElmoClassifier`.
"""
from kerasplm.models.elmo.model import ElmoBiLM, ElmoConfig, ElmoEmbedder, ElmoLanguageModel
from kerasplm.models.elmo.classifier import ClassifierPreprocessor, ElmoClassifier
from kerasplm.text.characters import ElmoPreprocessor


def _bilm_config(fields):
    if not isinstance(fields, dict):
        raise TypeError(f"'bilm' must be an object, got {type(fields).__name__}")
    return ElmoConfig(**fields).validate()


def _preprocessor(run, build):
    try:
        return build()
    except ValueError as e:   # a damaged vocabulary file: the message names it
        raise run.error(run.CONFIG, f"the vocabulary cannot be read ({e})") from None


def build_elmo(run, config):
    model = config["model"]
    try:
        bilm_config = _bilm_config(model["bilm"])
        vocab_size = model.get("vocab_size")
        if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int)
                                       or vocab_size <= 0):
            raise ValueError(f"vocab_size {vocab_size!r}")
        num_sampled = int(model.get("num_sampled", 0))
    except (KeyError, TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"bad ELMo model config ({e})") from None
    path = run.asset(config, "vocab")
    preprocessor = _preprocessor(run, lambda: ElmoPreprocessor(path, bilm_config.max_characters_per_token))
    bilm = ElmoBiLM.from_config_object(bilm_config, name=config["preset"])
    return ElmoLanguageModel(bilm, vocab_size, num_sampled), preprocessor


def build_elmo_classifier(run, config):
    model = config["model"]
    try:
        labels = [str(x) for x in model["labels"]]
        sizes = {k: model[k] for k in ("vocab_size", "embedding_dim", "lstm_units", "dropout")}
        elmo = model["elmo"]
        bilm_config = _bilm_config(elmo["bilm"]) if elmo else None
        max_length = int(config["options"]["max_length"])
    except (KeyError, TypeError, ValueError) as e:
        raise run.error(run.CONFIG, f"'model' is not an ELMo classifier config ({e})") from None
    max_chars = (bilm_config or ElmoConfig()).max_characters_per_token
    path = run.asset(config, "vocab")
    preprocessor = _preprocessor(run, lambda: ClassifierPreprocessor(path, max_length, max_chars))
    embedder = None
    if elmo:
        embedder = ElmoEmbedder(ElmoBiLM.from_config_object(bilm_config), num_mixes=elmo["num_mixes"],
                                layer_norm=elmo["layer_norm"])
    return ElmoClassifier(num_labels=len(labels), embedder=embedder, labels=labels, **sizes), preprocessor


BUILDERS = {"elmo": build_elmo, "elmo_classifier": build_elmo_classifier}
