"""scripts/name_swap.py: pairs whose copied names are swapped, on both sides alike, for names
the corpus never had; only named-entity sources; recorded in the manifest; held-out splits
untouched."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.data.names import copied_words

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("name_swap", ROOT / "scripts" / "name_swap.py")
assert _spec and _spec.loader
name_swap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(name_swap)

WORDS = ["Aberdeen", "Zworykin", "Biloxi", "Visa", "visa", "This", "this", "Thracian",
         "Thracians", "O'Hara", "Anniston", "Rostock", "Trapani", "Amarillo", "Valdosta"]


def test_proper_nouns_are_names_only() -> None:
    # "Visa"/"This" are also lowercase words, "Thracians" a plural, "O'Hara" not one word
    assert name_swap.proper_nouns(WORDS) == sorted(
        ["Aberdeen", "Zworykin", "Biloxi", "Thracian", "Anniston", "Rostock", "Trapani",
         "Amarillo", "Valdosta"])


def test_copied_words_skip_the_first_word_and_changed_words() -> None:
    assert copied_words("Tom sah Mary in Boston und München.",
                                  "Tom saw Mary in Boston and Munich.") == ["Boston", "Mary"]


def test_swap_is_consistent_and_keeps_the_german_genitive() -> None:
    de, en = name_swap.swap("Toms Hund mag Tom, nicht Tomas.", "Tom's dog likes Tom, not Tomas.",
                            {"Tom": "Rostock"})
    assert (de, en) == ("Rostocks Hund mag Rostock, nicht Tomas.",
                        "Rostock's dog likes Rostock, not Tomas.")


def test_only_named_sources_with_copied_words_are_augmented() -> None:
    maker = name_swap.NameMaker(name_swap.proper_nouns(WORDS), rng=random.Random(0),
                                avoid={"Tom", "Mary", "Boston"})
    pairs = [("Gestern sah Tom Mary.", "Yesterday Tom saw Mary.", "tatoeba"),
             ("Klicken Sie auf Format.", "Click Format.", "libreoffice"),
             ("Ich sehe dich.", "I see you.", "tatoeba")]
    out = name_swap.augmented(pairs, maker, copies=3)
    assert len(out) == 3
    for de, en in out:
        a, b = de.removesuffix(".").split()[2:]
        assert de == f"Gestern sah {a} {b}." and en == f"Yesterday {a} saw {b}."
        assert a != b and not {a, b} & {"Tom", "Mary", "Boston"}


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_drawn_names_are_capitalised_and_never_avoided(seed: int) -> None:
    maker = name_swap.NameMaker(name_swap.proper_nouns(WORDS), rng=random.Random(seed),
                                avoid={"Rostock", "trapani"})
    for _ in range(20):
        name = maker.draw()
        assert name[0].isupper() and name[1:].islower() and 3 <= len(name) <= 12
        assert name not in {"Rostock", "Trapani"}


def test_the_script_appends_and_records_and_leaves_held_out_splits(
    tmp_path: Path, write_split: Callable[[Path, str, list[tuple[str, str, str]]], None]
) -> None:
    corpus, out = tmp_path / "corpus", tmp_path / "names"
    corpus.mkdir()
    write_split(corpus, "train", [("Dann rief Tom an.", "Then Tom called.", "tatoeba"),
                            ("Hallo.", "Hello.", "tatoeba")])
    write_split(corpus, "dev", [("Dann kam Mary.", "Then Mary came.", "tatoeba")])
    write_split(corpus, "test", [("Ja.", "Yes.", "tatoeba")])
    manifest = {"splits": {"train": 2, "dev": 1, "test": 1}, "sha256": {}, "sources": {}}
    (corpus / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (tmp_path / "words").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
    cmd = [sys.executable, str(ROOT / "scripts" / "name_swap.py"), "--corpus", str(corpus),
           "--words", str(tmp_path / "words"), "--out", str(out), "--copies", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert done.stdout.startswith("2 name-swapped pairs added")
    de = (out / "train.de").read_text(encoding="utf-8").splitlines()
    en = (out / "train.en").read_text(encoding="utf-8").splitlines()
    source = (out / "train.source").read_text(encoding="utf-8").splitlines()
    assert de[:2] == ["Dann rief Tom an.", "Hallo."]
    assert source == ["tatoeba"] * 2 + ["namecopy"] * 2
    for d, e in zip(de[2:], en[2:], strict=True):
        name = d.split()[2]
        assert d == f"Dann rief {name} an." and e == f"Then {name} called." and name != "Tom"
    assert (out / "dev.de").read_text(encoding="utf-8") == "Dann kam Mary.\n"
    recorded = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert recorded["splits"]["train"] == 4 and recorded["sources"]["namecopy"]["train"] == 2
    again = tmp_path / "again"
    subprocess.run(cmd[:-4] + ["--out", str(again), "--copies", "2"], check=True,
                   capture_output=True)
    assert (again / "train.de").read_text(encoding="utf-8") == "\n".join(de) + "\n"  # seeded


def test_name_recall_counts_names_the_hypothesis_writes(tmp_path: Path) -> None:
    (tmp_path / "src").write_text("Gestern sah Tom Mary.\nHeute regnet es.\n", encoding="utf-8")
    (tmp_path / "ref").write_text("Yesterday Tom saw Mary.\nIt rains today.\n", encoding="utf-8")
    (tmp_path / "hyp").write_text("Yesterday Tom saw Marry.\nIt rains.\n", encoding="utf-8")
    log = tmp_path / "instances.log"
    log.write_text("".join(json.dumps({"prediction": p}) + "\n"
                           for p in ("Tom saw Mary yesterday.", "Rain.")), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "name_recall.py"), "--source",
         str(tmp_path / "src"), "--reference", str(tmp_path / "ref"), str(tmp_path / "hyp"),
         str(log)], capture_output=True, text=True, check=True)
    assert [line.split("\t")[1:] for line in done.stdout.splitlines()] == [
        ["1/2", "50.0%"], ["2/2", "100.0%"]]
    (tmp_path / "short").write_text("Tom.\n", encoding="utf-8")
    failed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "name_recall.py"), "--source",
         str(tmp_path / "src"), "--reference", str(tmp_path / "ref"), str(tmp_path / "short")],
        capture_output=True, text=True)
    assert failed.returncode != 0 and "line counts differ" in failed.stderr


def test_a_corpus_is_not_extended_twice_with_one_source(
    tmp_path: Path, write_split: Callable[[Path, str, list[tuple[str, str, str]]], None]
) -> None:
    from simulmt.data.extend import extend_corpus

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_split(corpus, "train", [("Hallo.", "Hello.", "tatoeba")])
    (corpus / "manifest.json").write_text(json.dumps(
        {"splits": {"train": 1}, "sha256": {}, "sources": {}}), encoding="utf-8")
    extend_corpus(corpus, tmp_path / "once", [("Ja.", "Yes.")], source="extra", package="p",
                  licence="l", note="n")
    assert (tmp_path / "once" / "train.source").read_text(encoding="utf-8") == "tatoeba\nextra\n"
    with pytest.raises(ValueError, match="already has a source 'extra'"):
        extend_corpus(tmp_path / "once", tmp_path / "twice", [("Ja.", "Yes.")], source="extra",
                      package="p", licence="l", note="n")
    assert not (tmp_path / "twice").exists()
