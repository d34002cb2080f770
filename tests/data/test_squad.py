"""The SQuAD v1.1 reader (hand-made file, errors, the shared dev set) and the split by article."""
import json
import os

import pytest

from kerasplm.data.squad import Answer, read_squad, split_by_article
from tests.models.bert.qa_toy import squad_json, write_squad

SHARED_DEV = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "squad_v1.1",
                          "dev-v1.1.json")


def test_reads_questions_with_character_offsets(tmp_path):
    examples = read_squad(write_squad(tmp_path / "toy.json"))
    assert [e.id for e in examples] == ["q0", "q1", "q2", "q3", "q4"]
    first = examples[2]
    assert (first.title, first.question, first.answers) == ("Cities", "Where does Anna sleep?",
                                                            (Answer("New York", 27),))
    assert first.context[first.answers[0].start:first.answers[0].end] == "New York"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][1]["answers"][0].update(answer_start=3),
     r"article 1 \(People\), paragraph 1, question 2: answer 'London' is not at answer_start 3"),
    (lambda d: d["data"][1]["paragraphs"][0]["qas"][0].pop("question"), "article 2 .*question 1: missing 'question'"),
    (lambda d: d["data"][2]["paragraphs"][0]["qas"][0].update(id="q0"), "id 'q0' repeats"),
    (lambda d: d["data"][2]["paragraphs"][0]["qas"][0].update(answers=[]), "question 1: no answers"),
    (lambda d: d.pop("data"), "missing 'data'"),
])
def test_errors_name_the_place(tmp_path, edit, message):
    data = squad_json()
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        read_squad(str(path))


def test_split_by_article_is_seeded_and_disjoint(tmp_path):
    examples = read_squad(write_squad(tmp_path / "toy.json"))
    kept, held = split_by_article(examples, 0.2, seed=0)
    assert len({e.title for e in held}) == 1 and not {e.title for e in kept} & {e.title for e in held}
    assert sorted(e.id for e in kept + held) == [e.id for e in examples]
    assert split_by_article(examples, 0.2, seed=0) == (kept, held)
    held_titles = {split_by_article(examples, 0.4, seed=s)[1][0].title for s in range(10)}
    assert len(held_titles) > 1                                   # the seed decides
    with pytest.raises(ValueError, match=r"holdout_fraction must be in \(0, 1\)"):
        split_by_article(examples, 1.0)


@pytest.mark.skipif(not os.path.exists(SHARED_DEV), reason="../shared/data/squad_v1.1 is absent")
def test_shared_dev_set():
    examples = read_squad(SHARED_DEV)
    assert len(examples) == 10570 and len({e.title for e in examples}) == 48
    assert sum(len(e.answers) for e in examples) == 34726
    kept, held = split_by_article(examples, 0.2, seed=0)
    assert len({e.title for e in held}) == 10 and len(kept) + len(held) == 10570
