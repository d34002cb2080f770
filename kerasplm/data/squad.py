"""SQuAD v1.1 (Rajpurkar et al. 2016): the JSON reader and a split by article.

The file is ``{"version": "1.1", "data": [article, ...]}``; an article is ``{"title", "paragraphs": [{"context",
"qas": [{"id", "question", "answers": [{"text", "answer_start"}, ...]}]}]}``. ``answer_start`` is a character
offset into ``context`` (Python ``str`` indices, Unicode code points). The training set has one answer per
question, the dev set up to several (its EM/F1 take the best over them).

>>> examples = read_squad("squad_v1.1/dev-v1.1.json")
>>> examples[0].question, examples[0].answers[0]
('Which NFL team represented the AFC at Super Bowl 50?', Answer(text='Denver Broncos', start=177))
>>> train, held_out = split_by_article(examples, holdout_fraction=0.2, seed=0)
"""
import dataclasses
import json
import random

__all__ = ["Answer", "SquadExample", "read_squad", "split_by_article"]


@dataclasses.dataclass(frozen=True)
class Answer:
    """A gold answer: its ``text`` and the character offset ``start`` of that text in the context."""

    text: str
    start: int

    @property
    def end(self):
        """The character offset just past the answer."""
        return self.start + len(self.text)


@dataclasses.dataclass(frozen=True)
class SquadExample:
    """One question: ``id``, the article ``title``, ``question``, ``context`` and its ``answers`` (a tuple)."""

    id: str
    title: str
    question: str
    context: str
    answers: tuple


def _field(value, key, kind, where):
    if not isinstance(value, dict) or key not in value:
        raise ValueError(f"{where}: missing {key!r}")
    if not isinstance(value[key], kind) or isinstance(value[key], bool):
        raise ValueError(f"{where}: {key!r} is not a {kind.__name__ if isinstance(kind, type) else 'value'}")
    return value[key]


def read_squad(path, require_answers=True):
    """The questions of a SQuAD v1.1 JSON file, in file order, as :class:`SquadExample` s.

    Errors name the file and the place (``article 3, paragraph 2, question 5``): a missing or mistyped field,
    an answer whose ``answer_start`` does not point at its text, a question without answers (unless
    ``require_answers=False``: a file to predict on), a repeated id.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    examples, seen = [], set()
    for a, article in enumerate(_field(data, "data", list, path), start=1):
        where = f"{path}: article {a}"
        title = _field(article, "title", str, where)
        for p, paragraph in enumerate(_field(article, "paragraphs", list, where), start=1):
            where = f"{path}: article {a} ({title}), paragraph {p}"
            context = _field(paragraph, "context", str, where)
            for q, qa in enumerate(_field(paragraph, "qas", list, where), start=1):
                here = f"{where}, question {q}"
                id_, question = _field(qa, "id", str, here), _field(qa, "question", str, here)
                if id_ in seen:
                    raise ValueError(f"{here}: id {id_!r} repeats")
                seen.add(id_)
                answers = []
                for answer in qa.get("answers", []):
                    text, start = _field(answer, "text", str, here), _field(answer, "answer_start", int, here)
                    if context[start:start + len(text)] != text or start < 0:
                        raise ValueError(f"{here}: answer {text!r} is not at answer_start {start} of the context")
                    answers.append(Answer(text, start))
                if require_answers and not answers:
                    raise ValueError(f"{here}: no answers")
                examples.append(SquadExample(id_, title, question, context, tuple(answers)))
    if not examples:
        raise ValueError(f"{path}: no questions")
    return examples


def split_by_article(examples, holdout_fraction=0.2, seed=0):
    """``(kept, held_out)``: every question of an article on the same side, so no context is seen in both.

    The distinct titles are shuffled with ``random.Random(seed)`` (deterministic in every process) and the
    first ``round(holdout_fraction · titles)`` (at least 1, at most all but one) are held out; each side
    keeps the file order.
    """
    if not 0.0 < holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must be in (0, 1), got {holdout_fraction!r}")
    titles = sorted({e.title for e in examples})
    if len(titles) < 2:
        raise ValueError(f"a split by article needs at least 2 articles, got {len(titles)}")
    random.Random(seed).shuffle(titles)
    count = min(len(titles) - 1, max(1, round(holdout_fraction * len(titles))))
    held = set(titles[:count])
    return [e for e in examples if e.title not in held], [e for e in examples if e.title in held]
