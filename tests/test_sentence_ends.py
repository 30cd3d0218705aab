"""The sentence-end detector (simulmt.output.sentence_ends) and the split measure
(eval/splits.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from simulmt.eval.splits import split_rate

from simulmt.output.sentence_ends import ends_sentence, inner_sentence_end, may_end_sentence


@pytest.mark.parametrize(
    ("text", "split"),
    [
        ("I saw a long letter yesterday. I wrote a long letter to my sister.", True),
        ("The story remembers and should we. We do that.", True),
        ("A man is insisting of women's power. A man is in two hotels.", True),
        ('He said "yes." Then he left', True),  # the stop inside the closing quote
        ("It was fine (it was.) Then it rained", True),
        ("Why? No reason", True),
        ("Wow! How retro", True),
        ("It happened in 2015. The year after", True),  # a year ends an English sentence
        ("He waited in Tokyo.. The train", True),  # the model's double stop
        ('Er sagte: „Ja.“ Dann ging er', True),  # German quotes
        ("Mr. Modi is on a trip to Japan.", False),  # an abbreviation, and a final stop
        ("The U.S. economy grew by 3.5 percent in 2015.", False),  # letter dots, a decimal
        ("J. K. Rowling wrote it", False),  # initials
        ("Apple Inc. said no", False),
        ("It weighs approx. five tons", False),  # lower case after the period
        ("Room No. 5 is free", False),
        ("Das ist z.B. ein Haus", False),  # German letter dots
        ("Is it? ", False),  # nothing follows: one sentence
        ("what a day", False),
        ("", False),
    ],
)
def test_inner_sentence_ends(text: str, split: bool) -> None:
    assert inner_sentence_end(text) is split


def test_a_stop_that_may_end_a_sentence() -> None:
    assert may_end_sentence("yesterday.") and may_end_sentence("2015.") and may_end_sentence("so?")
    assert may_end_sentence('yes."') and may_end_sentence("Tokyo..") and may_end_sentence(".")
    assert not may_end_sentence("Mr.") and not may_end_sentence("U.S.")
    assert not may_end_sentence("3.5") and not may_end_sentence("U.S") and not may_end_sentence("")
    # only the first characters of the next word are known while a model writes: openers alone
    # say nothing yet, and count as a sentence end
    assert ends_sentence("day.", '"') and not ends_sentence("day.", '"and')


WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyzäöüABCDEFGHXYZ0123456789,;:-'\"()", min_size=1,
               max_size=8)  # fmt: skip


@given(st.lists(WORD, max_size=12))
def test_text_without_stops_never_splits(words: list[str]) -> None:
    assert not inner_sentence_end(" ".join(words))


@given(st.lists(WORD, min_size=1, max_size=6), st.lists(WORD, min_size=1, max_size=6),
       st.sampled_from(["!", "?", "?!", "!\""]))  # fmt: skip
def test_a_question_or_exclamation_before_more_words_always_splits(
    first: list[str], rest: list[str], stop: str
) -> None:
    assert inner_sentence_end(" ".join(first) + stop + " " + " ".join(rest))


def test_split_rate_counts_only_single_sentence_sources() -> None:
    sources = ["Er kam. Sie ging.", "ich habe einen Brief geschrieben", "Herr Dr. Müller kam",
               "Wo ist er?"]  # fmt: skip
    hyps = ["He came. She went.", "I saw a letter. I wrote it.", "Mr. Dr. Müller came",
            "Where is he?"]  # fmt: skip
    # 1 of the 3 single ones (the engine's punctuation segmentation reads through "Dr.")
    assert split_rate(sources, hyps) == pytest.approx(100 / 3)
    assert split_rate(sources[:1], hyps[:1]) is None  # no single-sentence line
    # where the engine's punctuation segmentation cuts the line ("…"), two sentences are right
    assert split_rate(["Halt… der Lich täuschte"], ["Stop. The lich deceived"]) is None
    with pytest.raises(ValueError, match="2 sources for 1 hypotheses"):
        split_rate(sources[:2], hyps[:1])


def test_the_long_form_report_counts_splits_per_resegmented_sentence() -> None:
    from simulmt.eval.corpus import LatencyConfig, SentenceStats
    from simulmt.eval.documents import Document
    from simulmt.eval.longform import score_documents
    from simulmt.eval.longform_cli import format_long_form

    doc = Document("d", (("ich", "habe", "geschrieben"), ("sie", "wohnt", "dort")),
                   ("I have written", "she lives there"))  # fmt: skip
    hyp = "I saw. I wrote she lives there"
    stats = SentenceStats(0, 6, " ".join(doc.references), hyp, (1, 2, 3, 3, 4, 5, 6),
                          source=" ".join(doc.words))  # fmt: skip
    result, _ = score_documents("p", [doc], [stats], LatencyConfig())
    assert result.splits == pytest.approx(50.0) and result.loops == 0.0
    assert result.as_dict()["splits"] == result.splits
    table = format_long_form([result])
    assert "| splits % |" in table and "| 50.00 |" in table
