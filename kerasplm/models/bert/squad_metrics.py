"""Exact match and F1 as the official SQuAD v1.1 evaluation script (``evaluate-v1.1.py``) computes them.

Both compare *normalized* answers: lower case, ASCII punctuation (``string.punctuation``) removed, the whole
words ``a``, ``an``, ``the`` removed, whitespace runs collapsed to one space and stripped, in that order. EM
is 1 when the normalized strings are equal; F1 is that of the bag of normalized words (the counts of common
words: precision over the prediction's words, recall over the gold ones; 0 when no word is common). Each
question takes the maximum over its gold answers; the totals are means over the questions, in percent, a
question without a prediction counting 0.
"""
import collections
import re
import string

__all__ = ["normalize_answer", "exact_match_score", "f1_score", "squad_scores"]

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text):
    """Lower case, no punctuation, no articles, single spaces (the script's order)."""
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match_score(prediction, gold):
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction, gold):
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions, gold_answers):
    """``predictions``: ``{id: text}``; ``gold_answers``: ``{id: [gold texts]}`` (every question scored).
    Returns ``{"exact_match", "f1"}`` in percent and ``"questions"``, ``"unanswered"`` (ids without prediction)."""
    exact = f1 = 0.0
    missing = 0
    for id_, golds in gold_answers.items():
        if id_ not in predictions:
            missing += 1
            continue
        exact += max(exact_match_score(predictions[id_], g) for g in golds)
        f1 += max(f1_score(predictions[id_], g) for g in golds)
    total = len(gold_answers)
    return {"exact_match": 100.0 * exact / total if total else 0.0, "f1": 100.0 * f1 / total if total else 0.0,
            "questions": total, "unanswered": missing}
