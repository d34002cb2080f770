"""Entity-level precision / recall / F1 exactly as CoNLL's ``conlleval`` script computes them.

A chunk (entity) is a maximal run of tags found by conlleval's ``startOfChunk`` / ``endOfChunk`` rules,
which read IOB1, IOB2 and IOE tags alike (``B-``, ``I-``, ``E-``, ``O``; conlleval's ``[`` and ``]``
bracket tags too). A predicted chunk is correct when it starts and ends at the same tokens as a gold
chunk of the same type. Sentence boundaries end every chunk (conlleval reads them as ``O``).

    precision = 100 * correct / predicted chunks,  recall = 100 * correct / gold chunks,
    F1 = 2 P R / (P + R)         (0 where a denominator is 0, as conlleval prints)

One difference: conlleval's Perl ``split(/-/)`` keeps only the text between the first and the second
hyphen as the type; here the type is everything after the first hyphen (``B-foo-bar`` has type
``foo-bar``). CoNLL-2003's types have no hyphen, so results there are identical.
"""
import collections
import dataclasses

__all__ = ["ChunkCounts", "conlleval", "entity_spans", "start_of_chunk", "end_of_chunk"]


def _split(tag):
    """``"B-PER" -> ("B", "PER")``, ``"O" -> ("O", "")``."""
    prefix, _, entity_type = tag.partition("-")
    return prefix, entity_type


def end_of_chunk(previous_tag, tag, previous_type, type_):
    """conlleval's ``endOfChunk``: does a chunk end between the previous token and this one?"""
    if (previous_tag, tag) in {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"), ("E", "I"),
                               ("E", "O")}:
        return True
    if previous_tag not in ("O", ".") and previous_type != type_:
        return True
    return previous_tag in ("[", "]")          # bracket chunks have length 1


def start_of_chunk(previous_tag, tag, previous_type, type_):
    """conlleval's ``startOfChunk``: does a chunk start at this token?"""
    if (previous_tag, tag) in {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"), ("E", "I"),
                               ("O", "E")}:
        return True
    if tag not in ("O", ".") and previous_type != type_:
        return True
    return tag in ("[", "]")


def entity_spans(tags):
    """Chunks of one sentence by conlleval's rules: a list of ``(type, start, end)`` (end exclusive)."""
    spans, start, previous = [], None, ("O", "")
    for i, tag in enumerate(list(tags) + ["O"]):          # the trailing O is the sentence boundary
        current = _split(tag)
        if start is not None and end_of_chunk(*_pair(previous, current)):
            spans.append((previous[1], start, i))
            start = None
        if start_of_chunk(*_pair(previous, current)):
            if start is not None:   # conlleval counts every start; with B/I/E/O tags an end always came first
                spans.append((previous[1], start, i))
            start = i
        previous = current
    return spans


def _pair(previous, current):
    return previous[0], current[0], previous[1], current[1]


def _prf(correct, predicted, gold):
    precision = 100.0 * correct / predicted if predicted else 0.0
    recall = 100.0 * correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "predicted": predicted, "gold": gold,
            "correct": correct}


@dataclasses.dataclass
class ChunkCounts:
    """Counts conlleval accumulates; ``update`` per sentence, ``result()`` for the scores."""

    correct: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    predicted: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    gold: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    correct_tags: int = 0
    tokens: int = 0

    def update(self, gold_tags, predicted_tags):
        """Adds one sentence (two tag sequences of the same length)."""
        gold_tags, predicted_tags = list(gold_tags), list(predicted_tags)
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(f"a sentence has {len(gold_tags)} gold tags but {len(predicted_tags)} predicted")
        gold_spans, predicted_spans = entity_spans(gold_tags), entity_spans(predicted_tags)
        self.gold.update(t for t, _, _ in gold_spans)
        self.predicted.update(t for t, _, _ in predicted_spans)
        self.correct.update(t for t, _, _ in set(gold_spans) & set(predicted_spans))
        self.correct_tags += sum(g == p for g, p in zip(gold_tags, predicted_tags))
        self.tokens += len(gold_tags)

    def result(self):
        """``{"precision", "recall", "f1", "accuracy", "predicted", "gold", "correct", "per_type": {type:
        {...}}}``; scores in percent, accuracy = token tags equal (conlleval's "accuracy")."""
        total = _prf(sum(self.correct.values()), sum(self.predicted.values()), sum(self.gold.values()))
        total["accuracy"] = 100.0 * self.correct_tags / self.tokens if self.tokens else 0.0
        types = sorted(set(self.gold) | set(self.predicted))
        total["per_type"] = {t: _prf(self.correct[t], self.predicted[t], self.gold[t]) for t in types}
        return total


def conlleval(gold_sentences, predicted_sentences):
    """Entity-level scores of predicted tag sequences against gold ones (lists of lists of tags), as
    ``conlleval`` prints them (see :meth:`ChunkCounts.result`)."""
    gold_sentences, predicted_sentences = list(gold_sentences), list(predicted_sentences)
    if len(gold_sentences) != len(predicted_sentences):
        raise ValueError(f"{len(gold_sentences)} gold sentences but {len(predicted_sentences)} predicted")
    counts = ChunkCounts()
    for gold, predicted in zip(gold_sentences, predicted_sentences):
        counts.update(gold, predicted)
    return counts.result()
