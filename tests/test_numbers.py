"""Numbers copied in the source's notation are written in the target's (simulmt.output.numbers)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from simulmt.eval import cli as eval_cli

from simulmt.cli import translate
from simulmt.data.tokenizer import Tokenizer
from simulmt.engine import Engine, default_model_dir
from simulmt.input.sentences import Sentence
from simulmt.output.display import Display
from simulmt.output.numbers import NumberNotation
from simulmt.search.state import StreamState
from simulmt.session import Session


def _pair(src: str, tgt: str) -> NumberNotation:
    notation = NumberNotation.for_pair(src, tgt)
    assert notation is not None
    return notation


DE_EN, EN_DE = _pair("de", "en"), _pair("en", "de")


@pytest.mark.parametrize(
    ("german", "english"),
    [
        ("2.100", "2,100"),
        ("250.000", "250,000"),
        ("3.000.000", "3,000,000"),
        ("16,1", "16.1"),
        ("145,50", "145.50"),
        ("1.234,5", "1,234.5"),
        ("0,3", "0.3"),
    ],
)
def test_german_numbers_in_english_notation(german: str, english: str) -> None:
    assert DE_EN.convert(german) == english
    assert EN_DE.convert(english) == german


@pytest.mark.parametrize(
    "number",
    [
        "73,000",  # German decimal or English thousands copied into German text: left alone
        "15.08.2015",  # a date
        "20.15",  # a time ("20.15 Uhr")
        "1.5",  # not a thousands group
        "1,2,3",  # two decimal marks
        "1234.567",  # a first group longer than three digits
    ],
)
def test_ambiguous_or_malformed_numbers_stay(number: str) -> None:
    assert DE_EN.convert(number) is None


def test_only_pairs_that_write_numbers_differently_convert() -> None:
    assert NumberNotation.for_pair("en", "en") is None
    assert NumberNotation.for_pair("de", "nl") is None  # both 1.000,5
    assert NumberNotation.for_pair("de", "xx") is None  # unknown: never guess


@given(st.integers(min_value=1000, max_value=10**12), st.integers(min_value=0, max_value=99))
def test_any_grouped_number_reads_the_same_after_conversion(whole: int, cents: int) -> None:
    """What Python writes in English notation is what a German number becomes."""
    english = f"{whole:,}.{cents:02d}"
    german = english.replace(",", "_").replace(".", ",").replace("_", ".")
    assert DE_EN.localise(german, [f"{german}"]) == english
    assert DE_EN.localise(f"({german}%", [f"{german}"]) == f"({english}%"


def test_a_word_changes_only_for_numbers_the_source_has() -> None:
    source = "Mehr als 2.100 Palästinenser , Anstieg von 16,1 Prozent .".split()
    assert DE_EN.localise("2.100", source) == "2,100"
    assert DE_EN.localise("16,1%,", source) == "16.1%,"
    assert DE_EN.localise("2.100.", source) == "2,100."  # the sentence's full stop stays
    assert DE_EN.localise("3.500", source) == "3.500"  # not copied from the source: unsure
    assert DE_EN.localise("2013", source) == "2013"
    assert DE_EN.localise("people", source) == "people"


def _display_of(text: str, source: str, numbers: NumberNotation | None) -> tuple[str, str]:
    """(committed, tentative) a display shows for `text` committed and `text` as the tail."""
    tok = Tokenizer.load(default_model_dir() / "spm.model")  # digits need the real vocabulary
    st_ = StreamState()
    st_.committed = tok.encode(text)
    starts = [i for i, t in enumerate(st_.committed) if i == 0 or tok.is_word_start(t)]
    st_.complete_tokens, st_.completed_at = len(st_.committed), [1] * len(starts)
    sent = Sentence(0, words=source.split())
    shown = Display(numbers=numbers).update(
        st_, sent, tokenizer=tok, tail=lambda _: [], clock=lambda: 0.0
    )
    tail = Display(numbers=numbers).update(
        StreamState(), sent, tokenizer=tok, tail=lambda _: tok.encode(text), clock=lambda: 0.0
    )
    assert shown is not None and tail is not None
    return shown.committed_delta, tail.tentative


def test_the_display_localises_committed_words_and_the_tentative_tail() -> None:
    source = "Mehr als 2.100 Palästinenser starben ."
    text = "More than 2.100 Palestinians died ."
    assert _display_of(text, source, DE_EN) == ("More than 2,100 Palestinians died .",) * 2
    assert _display_of(text, source, None) == (text, text)


def test_sessions_localise_numbers_by_default_and_keep_them_when_asked() -> None:
    engine = Engine.tiny(0)  # a German -> English model
    on, off = Session(engine), Session(engine, localise_numbers=False)
    for session in (on, off):
        session.push("Ich habe heute ein Buch gelesen .")
    assert on.numbers == DE_EN and off.numbers is None
    assert on.display.numbers == DE_EN and off.display.numbers is None  # each sentence's


def test_eval_and_translate_take_keep_number_format() -> None:
    parser = argparse.ArgumentParser()
    eval_cli.add_arguments(parser)
    base = ["--policy", "full", "--source", "s", "--reference", "r"]
    assert eval_cli.run_config_from_args(parser.parse_args(base)).localise_numbers
    keep = parser.parse_args([*base, "--keep-number-format"])
    assert not eval_cli.run_config_from_args(keep).localise_numbers
    parser = argparse.ArgumentParser()
    translate.add_arguments(parser)
    assert parser.parse_args(["--keep-number-format"]).keep_number_format
    assert not parser.parse_args([]).keep_number_format


def test_number_recall_counts_numbers_in_the_references_notation(tmp_path: Path) -> None:
    """scripts/number_recall.py (README's number figures): a number counts once the hypothesis
    writes it as the reference does; one the reference does not repeat is not counted."""
    (tmp_path / "src").write_text("2.100 Menschen und 16,1 Prozent im Jahr 2015.\nEs regnet.\n",
                                  encoding="utf-8")
    (tmp_path / "ref").write_text("2,100 people and 16.1 percent in 2015.\nIt rains.\n",
                                  encoding="utf-8")
    (tmp_path / "hyp").write_text("2.100 people and 16.1 per cent in 2015.\nRain.\n",
                                  encoding="utf-8")
    script = Path(__file__).resolve().parents[1] / "scripts" / "number_recall.py"
    done = subprocess.run(
        [sys.executable, str(script), "--source", str(tmp_path / "src"), "--reference",
         str(tmp_path / "ref"), str(tmp_path / "hyp")], capture_output=True, text=True, check=True)
    assert done.stdout.split("\t")[1:] == ["2/3", "66.7%\n"]
