"""A toy SQuAD file and a tiny BERT run for the question answering tests (shared by the job and export tests, and by
the ``qa_run`` fixture of tests/models/bert/fixtures.py)."""
import json

from tests.models.bert.random_run import write_random_bert_run

NAMES, PLACES, VERBS = ["john", "mary", "anna"], ["paris", "london", "rome", "oslo"], ["lives", "works", "sleeps"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", ",", "where", "who", "does", "in", "the", "city",
         "of", "and", *NAMES, *PLACES, *VERBS, "live", "work", "sleep", "##s", "new", "york"]
TINY = dict(vocab_size=len(VOCAB), num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64, max_positions=32)

# (title, context, [(question, answer text)]): answers by character offset, first occurrence.
ARTICLES = [
    ("People", "John lives in Paris. Mary works in London.",
     [("Where does John live?", "Paris"), ("Where does Mary work?", "London")]),
    ("Cities", "Anna sleeps in the city of New York, and John works in Rome.",
     [("Where does Anna sleep?", "New York"), ("Who works in Rome?", "John")]),
    ("More", "Mary lives in Oslo.", [("Where does Mary live?", "Oslo")]),
]

# One question per context: a tiny model learns these three spans in a few steps (the job tests' ``qa_run``).
DISTINCT = [("A", "John lives in Paris.", [("Where does John live?", "Paris")]),
            ("B", "Anna sleeps in the city of New York, and John works in Rome.",
             [("Where does Anna sleep?", "New York")]),
            ("C", "Mary works in London and sleeps in Oslo.", [("Who works in London?", "Mary")])]
SMALL = dict(sequence_length=24, doc_stride=4, max_query_length=8)


def squad_json(articles=ARTICLES):
    """A SQuAD v1.1 dict of ``articles`` (ids ``q0``, ``q1`` ...)."""
    data, n = [], 0
    for title, context, qas in articles:
        questions = []
        for question, answer in qas:
            questions.append({"id": f"q{n}", "question": question,
                              "answers": [{"text": answer, "answer_start": context.index(answer)}]})
            n += 1
        data.append({"title": title, "paragraphs": [{"context": context, "qas": questions}]})
    return {"version": "1.1", "data": data}


def write_squad(path, articles=ARTICLES):
    path.write_text(json.dumps(squad_json(articles)))
    return str(path)


def make_init_run(directory, seed=0):
    """A random tiny BERT run (what `kerasplm convert bert` writes): checkpoint, vocabulary, config."""
    write_random_bert_run(directory, TINY, VOCAB, seed)
    return str(directory)


def qa_run_options(train, init):
    """The options of the ``qa_run`` fixture (20 of a 22-step schedule on DISTINCT), but for ``steps``."""
    return dict(train=train, dev=train, init=init, schedule_steps=22, batch_size=3, learning_rate=5e-3,
                warmup_fraction=0.0, verbose=0, jit_compile=False, **SMALL)
