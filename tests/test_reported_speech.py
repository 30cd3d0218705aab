"""scripts/reported_speech.py: single-sentence pairs wrapped in one reporting frame on both
sides, the quotation intact, only conversational sources, recorded in the manifest, held-out
splits untouched."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.data.asr import recognizer_view

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # the script imports its sibling name_swap
_spec = importlib.util.spec_from_file_location("reported_speech",
                                               ROOT / "scripts" / "reported_speech.py")
assert _spec and _spec.loader
reported = importlib.util.module_from_spec(_spec)
sys.modules["reported_speech"] = reported  # its dataclass looks its module up
_spec.loader.exec_module(reported)

NAMES = ["Lawson", "Biloxi"]
PAIRS = [("Ich komme morgen.", "I'm coming tomorrow."), ("Kommst du mit?", "Are you coming?"),
         ("Hör auf!", "Stop it!")]


def test_only_single_quote_free_sentences_with_matching_marks_are_used() -> None:
    assert reported.usable("Ich komme morgen.", "I'm coming tomorrow.")
    assert not reported.usable("Er sagte „ja“.", 'He said "yes".')  # quotes already
    assert not reported.usable("Ja. Ich komme.", "Yes. I'm coming.")  # two sentences
    assert not reported.usable("Kommst du?", "You're coming.")  # marks differ
    assert not reported.usable("Ja.", "Yes.")  # too short to quote


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), index=st.integers(0, len(PAIRS) - 1))
def test_a_frame_quotes_the_whole_sentence_on_both_sides(seed: int, index: int) -> None:
    de, en = PAIRS[index]
    rng = random.Random(seed)
    who = reported.speaker(rng, NAMES)
    framed_de, framed_en = reported.frame(de, en, who, rng)
    # English: exactly one quotation, holding the translation (a full stop becomes a comma)
    assert framed_en.count('"') == 2
    quoted = framed_en.split('"')[1]
    assert quoted in (en, en[:-1] + ",")
    assert who.en.lower() in framed_en.lower()
    # German: the speaker and every word of the sentence, in order, in the recognizer view
    assert recognizer_view(de) in recognizer_view(framed_de)
    assert recognizer_view(who.de) in recognizer_view(framed_de)
    assert framed_de.count('"') + framed_de.count("„") + framed_de.count("“") == 2
    assert ("?" in framed_de) == ("?" in de) and ("asked" in framed_en) == de.endswith("?")


def test_the_script_appends_frames_of_conversational_pairs_only(
    tmp_path: Path, write_split: Callable[[Path, str, list[tuple[str, str, str]]], None]
) -> None:
    corpus, out = tmp_path / "corpus", tmp_path / "quotes"
    corpus.mkdir()
    write_split(corpus, "train", [("Ich komme morgen.", "I'm coming tomorrow.", "tatoeba"),
                                  ("Öffne das Menü Datei.", "Open the File menu.", "libreoffice"),
                                  ("Hör sofort auf!", "Stop it right now!", "europarl")])
    write_split(corpus, "dev", [("Ich gehe jetzt.", "I'm leaving now.", "tatoeba")])
    write_split(corpus, "test", [("Wir gehen jetzt.", "We're leaving now.", "tatoeba")])
    manifest = {"splits": {"train": 3, "dev": 1, "test": 1}, "sha256": {}, "sources": {}}
    (corpus / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (tmp_path / "words").write_text("\n".join(NAMES) + "\n", encoding="utf-8")
    cmd = [sys.executable, str(ROOT / "scripts" / "reported_speech.py"), "--corpus",
           str(corpus), "--words", str(tmp_path / "words"), "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert done.stdout.startswith("added 2 reported-speech pairs")
    de = (out / "train.de").read_text(encoding="utf-8").splitlines()
    en = (out / "train.en").read_text(encoding="utf-8").splitlines()
    source = (out / "train.source").read_text(encoding="utf-8").splitlines()
    assert source == ["tatoeba", "libreoffice", "europarl", "reported", "reported"]
    assert not any("Menü" in line for line in de[3:])  # software help is not speech
    assert sorted(e.split('"')[1] for e in en[3:]) == ["I'm coming tomorrow,",
                                                       "Stop it right now!"]
    assert (out / "dev.de").read_text(encoding="utf-8") == "Ich gehe jetzt.\n"
    assert (out / "test.en").read_text(encoding="utf-8") == "We're leaving now.\n"
    recorded = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert recorded["splits"]["train"] == 5 and recorded["sources"]["reported"]["train"] == 2
    again = tmp_path / "again"
    subprocess.run(cmd[:-2] + ["--out", str(again)], check=True, capture_output=True)
    assert (again / "train.de").read_text(encoding="utf-8") == "\n".join(de) + "\n"  # seeded
