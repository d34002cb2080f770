"""Any BERT run read as its parts: what the fine-tuning jobs, the sentence embedder and its exports start from.

:func:`bert_run_parts` reads a BERT run (converted, pretrained or fine-tuned; a ``bert`` run of ELECTRA's
discriminator too) with :func:`kerasplm.runs.load_run` and returns its backbone, its tokenizer and its options.
"""
from kerasplm.models.bert.backbone import BertBackbone
from kerasplm.runs import RunDirError, load_run
from kerasplm.text.bert_tokenizer import BertTokenizer
from kerasplm.text.wordpiece import WordPieceTokenizer

__all__ = ["bert_run_parts"]


def bert_run_parts(run_dir):
    """``(backbone, tokenizer, options)`` of a BERT run (converted, pretrained or fine-tuned), read with
    :func:`kerasplm.runs.load_run`: the backbone with its checkpoint restored (the run's model, or its
    ``backbone``), a :class:`kerasplm.text.BertTokenizer` over the run's vocabulary with its casing (the one
    its preprocessor holds), and the run's stored options."""
    loaded = load_run(run_dir)
    backbone = getattr(loaded, "backbone", loaded)
    config = loaded.run_info.config
    if not isinstance(backbone, BertBackbone):
        raise RunDirError(f"{loaded.run_info.path}/config.json: a {config['family']} run, not a BERT run")
    tokenizer = getattr(getattr(loaded, "preprocessor", None), "tokenizer", None)
    if tokenizer is None:
        raise RunDirError(f"{loaded.run_info.path}/config.json: the run stores no preprocessor (no tokenizer)")
    if isinstance(tokenizer, WordPieceTokenizer) and not isinstance(tokenizer, BertTokenizer):
        # a tagger's or pretraining run's WordPiece: BERT's own rules (RoBERTa's BPE, ALBERT's SentencePiece: kept)
        tokenizer = BertTokenizer(tokenizer.vocabulary_file or tokenizer.vocab, lower_case=tokenizer.lower_case)
    return backbone, tokenizer, config.get("options", {})
