"""Entity-level scores as conlleval computes them; every expected value derived by hand below."""
import pytest

from kerasplm.models.bert.ner_metrics import ChunkCounts, conlleval, entity_spans


@pytest.mark.parametrize("tags, spans", [
    # IOB1: I- after O (or at the start) starts a chunk; B- after I- of the same type starts a new one.
    (["I-PER", "I-PER", "O", "I-LOC", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 5)]),
    (["O", "I-ORG", "I-ORG"], [("ORG", 1, 3)]),
    # type change inside an I- run: endOfChunk (prevType ne type) and startOfChunk (type differs)
    (["I-PER", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 2)]),
    # B- of a different type ends the I- run; I- of a different type after B- starts its own chunk
    (["B-PER", "I-PER", "B-LOC"], [("PER", 0, 2), ("LOC", 2, 3)]),
    (["B-PER", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 2)]),
    # IOB2 B-B of one type: two chunks
    (["B-PER", "B-PER"], [("PER", 0, 1), ("PER", 1, 2)]),
    # IOE: (E, E) ends one chunk and starts the next; (I, E) continues; (O, I) starts
    (["I-PER", "E-PER", "E-PER", "O"], [("PER", 0, 2), ("PER", 2, 3)]),
    # conlleval's quirk: (E, B) of one type is neither an end nor a start, so E-PER B-PER is ONE chunk
    (["E-PER", "B-PER"], [("PER", 0, 2)]),
    (["O", "O"], []),
    ([], []),
])
def test_entity_spans_follow_conlleval_rules(tags, spans):
    assert entity_spans(tags) == spans


def test_scores_overall_per_type_and_accuracy():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "I-ORG", "O", "B-MISC"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "I-ORG", "O", "O", "I-MISC"]]
    # gold chunks: PER(0,2) LOC(3,4) | ORG(0,3) MISC(4,5)                 -> 4
    # predicted:   PER(0,2) ORG(3,4) | ORG(0,2) MISC(4,5) (I- after O)   -> 4
    # correct:     PER(0,2), MISC(4,5); ORG(0,2) != gold ORG(0,3)         -> 2
    # P = 100*2/4 = 50, R = 100*2/4 = 50, F1 = 50. Tags equal: 3 of 4 + 3 of 5 = 6/9.
    r = conlleval(gold, pred)
    assert (r["precision"], r["recall"], r["f1"]) == (50.0, 50.0, 50.0)
    assert (r["correct"], r["predicted"], r["gold"]) == (2, 4, 4)
    assert r["accuracy"] == pytest.approx(100 * 6 / 9)
    per = r["per_type"]
    assert sorted(per) == ["LOC", "MISC", "ORG", "PER"]
    assert per["PER"]["f1"] == per["MISC"]["f1"] == 100.0
    assert (per["LOC"]["precision"], per["LOC"]["recall"], per["LOC"]["gold"]) == (0.0, 0.0, 1)   # 0 predicted
    assert (per["ORG"]["predicted"], per["ORG"]["gold"], per["ORG"]["f1"]) == (2, 1, 0.0)


def test_unequal_precision_recall():
    # gold: PER(0,1) LOC(2,4) ORG(5,6)                      -> 3
    # pred: PER(0,1) LOC(2,4)                               -> 2, both correct
    # P = 100, R = 200/3 = 66.67, F1 = 2*100*66.67/166.67 = 80
    r = conlleval([["B-PER", "O", "B-LOC", "I-LOC", "O", "B-ORG"]], [["B-PER", "O", "B-LOC", "I-LOC", "O", "O"]])
    assert r["precision"] == 100.0 and r["recall"] == pytest.approx(200 / 3) and r["f1"] == pytest.approx(80.0)


def test_boundaries_length_and_type_matter():
    # A sentence boundary ends a chunk: I-PER | I-PER are two chunks, one sentence I-PER I-PER is one.
    assert conlleval([["I-PER"], ["I-PER"]], [["I-PER"], ["I-PER"]])["gold"] == 2
    assert conlleval([["I-PER", "I-PER"]], [["I-PER", "I-PER"]])["gold"] == 1
    # a longer span, or the right span with the wrong type, is wrong: P = R = F1 = 0
    assert conlleval([["B-PER", "O"]], [["B-PER", "I-PER"]])["f1"] == 0.0
    assert conlleval([["B-PER", "O"]], [["B-LOC", "O"]])["correct"] == 0
    # IOB1 and IOB2 spellings of the same entities score 100
    assert conlleval([["I-PER", "I-PER", "B-PER"]], [["B-PER", "I-PER", "B-PER"]])["f1"] == 100.0
    # nothing predicted, nothing gold: 0 everywhere (conlleval prints 0.00), no division error
    assert conlleval([["O"]], [["O"]])["f1"] == 0.0


def test_counts_accumulate_and_errors():
    counts = ChunkCounts()
    counts.update(["B-PER"], ["B-PER"])
    counts.update(["B-LOC"], ["O"])
    assert (counts.result()["precision"], counts.result()["recall"]) == (100.0, 50.0)
    with pytest.raises(ValueError, match="2 gold tags but 1 predicted"):
        counts.update(["O", "O"], ["O"])
    with pytest.raises(ValueError, match="1 gold sentences but 0 predicted"):
        conlleval([["O"]], [])
