"""EM/F1 as the official SQuAD v1.1 script computes them, on hand-made cases with hand-computed values."""
import pytest

from kerasplm.models.bert.squad_metrics import exact_match_score, f1_score, normalize_answer, squad_scores


@pytest.mark.parametrize("text, normalized", [
    ("The Denver Broncos!", "denver broncos"),                # lower case, punctuation, article
    ("  a  cat,  an apple\tthe end ", "cat apple end"),       # articles as whole words, whitespace collapsed
    ("theatre another", "theatre another"),                   # not inside words
    ("Beyoncé's \"Halo\"", "beyoncés halo"),                  # ASCII punctuation only: é stays
    ("the-end", "theend"),                                    # punctuation removed before articles
    ("A.B.", "ab"),
    ("", ""),
])
def test_normalize(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_and_f1_by_hand():
    assert exact_match_score("the Broncos.", "Broncos") == 1.0
    assert exact_match_score("Denver Broncos", "Broncos") == 0.0
    # prediction "denver broncos" (2 words) vs gold "broncos": 1 common, P = 1/2, R = 1, F1 = 2/3
    assert f1_score("Denver Broncos", "Broncos") == pytest.approx(2 / 3)
    # "in 1996 and 1996" vs "1996 1997": common = min(2,1) for 1996 = 1; P = 1/4, R = 1/2, F1 = 1/3
    assert f1_score("in 1996 and 1996", "1996 1997") == pytest.approx(1 / 3)
    assert f1_score("the", "a") == 0.0 and f1_score("", "") == 0.0      # nothing left: 0, as the script


def test_totals_take_the_best_gold_answer_and_count_missing_predictions():
    gold = {"q1": ["Denver Broncos", "Broncos"], "q2": ["Santa Clara, California"], "q3": ["Levi's Stadium"]}
    predictions = {"q1": "the Broncos", "q2": "Santa Clara"}
    scores = squad_scores(predictions, gold)
    # q1: EM 1 (second gold), F1 1; q2: EM 0, F1 2·1·(2/3)/(1 + 2/3) = 0.8; q3: missing, 0
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * 1.8 / 3)
    assert (scores["questions"], scores["unanswered"]) == (3, 1)
