"""CoNLL-2003 reader (hand-made files; the shared files when present)."""
import os

import pytest

from kerasplm.data.conll import iob1_to_iob2, label_vocabulary, read_conll

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "conll2003")

# Laid out like the shared files: sentences first, the first -DOCSTART- at the very END (no newline),
# another -DOCSTART- in the middle (between documents) without blank lines around it.
QUIRKY = """EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER
Mary NNP I-NP B-PER
-DOCSTART- -X- O O
LONDON NNP I-NP I-LOC
1996-08-30 CD I-NP O


-DOCSTART- -X- O O"""


def test_reader_sentences_docstart_anywhere(tmp_path):
    path = tmp_path / "eng.quirky"
    path.write_text(QUIRKY)
    sentences = read_conll(path)
    assert [s.tokens for s in sentences] == [("EU", "rejects", "German", "call"),
                                            ("Peter", "Blackburn", "Mary"), ("LONDON", "1996-08-30")]
    assert sentences[0].tags == ("I-ORG", "O", "I-MISC", "O")       # IOB1 as shipped
    assert sentences[0].pos == ("NNP", "VBZ", "JJ", "NN") and sentences[0].chunk[1] == "I-VP"
    assert [s.line for s in sentences] == [1, 6, 10]
    iob2 = read_conll(path, tag_scheme="iob2")
    assert iob2[0].tags == ("B-ORG", "O", "B-MISC", "O")
    assert iob2[1].tags == ("B-PER", "I-PER", "B-PER")
    assert label_vocabulary(iob2) == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]
    assert label_vocabulary(sentences) == ["O", "I-LOC", "I-MISC", "I-ORG", "B-PER", "I-PER"]


def test_reader_docstart_only_and_empty_files(tmp_path):
    (tmp_path / "a").write_text("-DOCSTART- -X- O O\n\n")
    (tmp_path / "b").write_text("")
    assert read_conll(tmp_path / "a") == [] and read_conll(tmp_path / "b") == []


def test_iob1_to_iob2():
    assert iob1_to_iob2(["I-PER", "I-PER", "O", "I-LOC"]) == ["B-PER", "I-PER", "O", "B-LOC"]
    # type change inside an I- run starts an entity; B- kept; I- after B- of the same type continues it
    assert iob1_to_iob2(["I-PER", "I-LOC", "B-LOC", "I-LOC"]) == ["B-PER", "B-LOC", "B-LOC", "I-LOC"]
    iob2 = ["B-PER", "I-PER", "B-PER", "O", "B-LOC"]
    assert iob1_to_iob2(iob2) == iob2                                # idempotent on IOB2


@pytest.mark.parametrize("text, message", [
    ("EU NNP I-NP I-ORG\nrejects VBZ I-VP\n", r"f:2: expected 4 .*got 3"),
    ("EU NNP I-NP I-ORG\n\nx NN I-NP ORG\n", r"f:3: NER tag 'ORG' is not O"),
    ("EU NNP I-NP E-ORG\n", r"f:1: NER tag 'E-ORG'"),
])
def test_reader_errors_name_file_and_line(tmp_path, text, message):
    (tmp_path / "f").write_text(text)
    with pytest.raises(ValueError, match=message):
        read_conll(tmp_path / "f")
    with pytest.raises(ValueError, match="tag_scheme"):
        read_conll(tmp_path / "f", tag_scheme="bio")


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="shared CoNLL-2003 data (research-only) not present")
def test_shared_testa():
    sentences = read_conll(os.path.join(SHARED, "eng.testa"), tag_scheme="iob2")
    # 3,250 sentences in eng.testa (the CoNLL-2003 paper's table 1: 3,250 sentences, 51,362 tokens).
    assert len(sentences) == 3250 and sum(len(s.tokens) for s in sentences) == 51362
    assert sentences[0].tokens[:3] == ("CRICKET", "-", "LEICESTERSHIRE")
    assert not any("-DOCSTART-" in s.tokens for s in sentences)
    assert set(label_vocabulary(sentences)) == {"O"} | {f"{p}-{t}" for p in "BI" for t in ("LOC", "MISC", "ORG", "PER")}
