"""Numbers the model miscopies reach it as placeholders and come back as the source's numbers;
currency signs it never learnt reach it as words (simulmt.input.placeholders)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from simulmt.data.tokenizer import Tokenizer
from simulmt.engine import Engine, default_model_dir
from simulmt.input.placeholders import PLACEHOLDERS, Placeholders
from simulmt.input.sentences import Sentence
from simulmt.output.display import Display
from simulmt.output.numbers import NumberNotation
from simulmt.search.state import StreamState
from simulmt.session import Session

DE_EN = NumberNotation.for_pair("de", "en")


def _view(text: str) -> tuple[list[str], dict[str, str]]:
    p = Placeholders(notation=DE_EN, src_lang="de")
    return p.model_words(text.split()), p.numbers


def test_numbers_at_risk_become_placeholders_in_the_targets_notation() -> None:
    words, numbers = _view("Rund 700.000 Menschen , (3.000.000 $) und 6,4 Prozent , 430 Euro")
    assert words == "Rund 36 Menschen , (27 Dollar) und 45 Prozent , 28 Euro".split()
    assert numbers == {"36": "700,000", "27": "3,000,000", "45": "6.4", "28": "430"}


def test_years_and_short_numbers_stay_as_written() -> None:
    text = "Am 7. Juni 2013 kamen 12 von 99 Gästen , 1999 waren es 40"
    assert _view(text) == (text.split(), {})


def test_numbers_grouped_by_spaces_keep_their_groups() -> None:
    words, numbers = _view("40 000 Polizisten und 100 000 Gäste , 2015 300 Tage")
    assert words == "40 000 Polizisten und 36 000 Gäste , 2015 27 Tage".split()
    assert numbers == {"36": "100", "27": "300"}  # 2015 300: a year, then its own number
    p = Placeholders(notation=DE_EN, src_lang="de")
    p.model_words("100 000 Gäste".split())
    assert p.restore(["36,000", "36", "000"]) == ["100,000", "100", "000"]


def test_a_placeholder_is_never_a_number_of_the_sentence() -> None:
    # 36 was read before the number at risk, so it is not used; a later 27 equal to a
    # placeholder in use is protected too, so that every placeholder means one number
    words, numbers = _view("36 Tage , 250.000 Menschen , 27 Orte")
    assert words == "36 Tage , 27 Menschen , 45 Orte".split()
    assert numbers == {"27": "250,000", "45": "27"}


def test_more_numbers_than_placeholders_stay_as_written() -> None:
    many = [f"{1000 + i}0" for i in range(len(PLACEHOLDERS) + 2)]
    words, numbers = _view(" ".join(many))
    assert words[: len(PLACEHOLDERS)] == list(PLACEHOLDERS)
    assert words[len(PLACEHOLDERS) :] == many[len(PLACEHOLDERS) :]
    assert len(numbers) == len(PLACEHOLDERS)


def test_currency_signs_the_model_never_learnt_are_read_as_words() -> None:
    words, _ = _view("1 Million £ , (700 €) oder 5 $")
    assert words == "1 Million Pfund , (36 Euro) oder 5 Dollar".split()
    other, _ = Placeholders(notation=None, src_lang="fr").model_words(["£"]), None
    assert other == ["£"]  # only languages with a table


def test_without_a_notation_a_placeholder_comes_back_as_written() -> None:
    p = Placeholders(notation=None, src_lang="de")
    assert p.model_words(["2.100"]) == ["36"]
    assert p.restore(["36,", "$36", "36th", "360", "1.36"]) == [
        "2.100,", "$2.100", "2.100th", "360", "1.36"]


_WORD = st.one_of(
    st.sampled_from(["Haus", "und", ",", ".", "£", "(", "Jahr", *PLACEHOLDERS]),
    st.integers(0, 10**7).map(str),
    st.integers(1, 999).map(lambda n: f"{n}.000"),
    st.tuples(st.integers(0, 99), st.integers(0, 9)).map(lambda t: f"{t[0]},{t[1]}"),
    st.integers(0, 10**6).map(lambda n: f"({n}"),
)
_NUM = re.compile(r"\d+(?:[.,]\d+)*")


@given(st.lists(_WORD, max_size=40), st.integers(0, 40))
def test_views_are_word_by_word_and_every_placeholder_means_one_number(
    words: list[str], cut: int
) -> None:
    p = Placeholders(notation=DE_EN, src_lang="de")
    view = list(p.model_words(words))
    assert len(view) == len(words)
    # streaming: the view of a prefix is the prefix of the view, however the words arrive
    q = Placeholders(notation=DE_EN, src_lang="de")
    q.model_words(words[:cut])
    assert q.model_words(words) == view and q.numbers == p.numbers
    kept = {n for w, v in zip(words, view, strict=True) if w == v for n in _NUM.findall(w)}
    if not set(PLACEHOLDERS) <= set(p.numbers) | kept:  # (with none left, a later one may be one)
        assert not kept & set(p.numbers)  # a placeholder never stands for two numbers
    assert len(set(p.numbers.values())) == len(p.numbers)  # one placeholder for each number
    for w, v in zip(words, view, strict=True):
        if w != v and w.strip("(") not in ("£",):
            number = _NUM.findall(w)[0]
            placeholder = _NUM.findall(v)[0]
            assert p.numbers[placeholder] == (DE_EN.convert(number) if DE_EN else None) or number
            assert p.restore([v]) == [w.replace(number, p.numbers[placeholder])]


def test_the_display_writes_placeholders_as_their_numbers() -> None:
    tok = Tokenizer.load(default_model_dir() / "spm.model")
    p = Placeholders(notation=DE_EN, src_lang="de")
    source = "Rund 700.000 Menschen kamen".split()
    assert p.model_words(source) == "Rund 36 Menschen kamen".split()
    text = "About 36 people came"
    st_ = StreamState()
    st_.committed = tok.encode(text)
    st_.complete_tokens, st_.completed_at = len(st_.committed), [1] * 4
    shown = Display(numbers=DE_EN, placeholders=p).update(
        st_, Sentence(0, words=source), tokenizer=tok, tail=lambda _: [], clock=lambda: 0.0
    )
    tail = Display(numbers=DE_EN, placeholders=p).update(
        StreamState(), Sentence(0, words=source), tokenizer=tok,
        tail=lambda _: tok.encode(text), clock=lambda: 0.0,
    )
    assert shown is not None and shown.committed_delta == "About 700,000 people came"
    assert tail is not None and tail.tentative == "About 700,000 people came"


def test_a_session_shows_the_model_placeholders_and_its_reader_the_source() -> None:
    engine = Engine.tiny(0)
    tok = engine.tokenizer
    on, off = Session(engine), Session(engine, localise_numbers=False)
    for session in (on, off):
        session.feed("Es kostet 700.000 Euro und 36 Cent")
        Session.encode_arrivals(engine, [session])
    assert on.stream is not None and off.stream is not None
    assert on.stream.source.ids == tok.encode("Es kostet 36 Euro und 27 Cent")
    assert off.stream.source.ids == tok.encode("Es kostet 700.000 Euro und 36 Cent")
    assert on.display.placeholders is on.placeholders
    assert on.placeholders is not None and on.placeholders.numbers == {"36": "700,000", "27": "36"}
    final = [u for u in on.push(".") if u.final]
    assert final and final[0].source == "Es kostet 700.000 Euro und 36 Cent ."
    on.feed("Noch 36 Tage")  # each sentence has its own placeholders
    Session.encode_arrivals(engine, [on])
    assert on.stream is not None and on.stream.source.ids == tok.encode("Noch 36 Tage")
