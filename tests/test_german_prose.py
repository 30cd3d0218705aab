"""scripts/german_prose.py: the boundary detector's extra training text (docs/SEGMENTER.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "german_prose.py"

HANDBOOK = """<html><body>
<div class="para">Die Datei listet die Quellen auf. Danach lädt APT die Listen herunter, z. B. von
einem Spiegel, und prüft sie am 3. Tag erneut.</div>
<div class="para">APT is the abbreviation for Advanced Packaging Tool and it is used by you.</div>
<div class="para">Das ist der zweite Teil, der nach dem englischen Absatz kommt.</div>
</body></html>"""
REFERENCE = "<p>Man kann das System mit einem Befehl aktualisieren. Es ist nicht schwer.</p>"
FORTUNES = """Ein Mathematikprofessor trägt sein Fahrrad über den Platz.  Ein Bekannter
fragt ihn, ob es kaputt sei.
        -- Anonym
%
Kurz.
%
Wer nicht wagt, der nicht gewinnt! Das sagt man so.
"""


def _tree(root: Path) -> None:
    book = root / "usr/share/doc/debian-handbook/html/de-DE"
    book.mkdir(parents=True)
    (book / "apt.html").write_text(HANDBOOK, encoding="utf-8")
    ref = root / "usr/share/debian-reference"
    ref.mkdir(parents=True)
    (ref / "ch01.de.html").write_text(REFERENCE, encoding="utf-8")
    fort = root / "usr/share/games/fortunes/de"
    fort.mkdir(parents=True)
    (fort / "anekdoten.u8").write_text(FORTUNES, encoding="utf-8")
    (fort / "quiz.u8").write_text("Was ist das und wer ist er und wie ist sie?\n", encoding="utf-8")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60)


def test_documents_are_german_sentences_in_order(tmp_path: Path) -> None:
    _tree(tmp_path)
    done = _run(str(tmp_path))
    assert done.returncode == 0, done.stderr
    docs = [d.splitlines() for d in done.stdout.strip("\n").split("\n\n")]
    assert docs == [
        # abbreviations and ordinals do not end a sentence; the English paragraph is skipped
        # and ends the document, so the text after it starts a new one
        ["Die Datei listet die Quellen auf.",
         "Danach lädt APT die Listen herunter, z. B. von einem Spiegel, und prüft sie am 3. Tag "
         "erneut."],
        ["Das ist der zweite Teil, der nach dem englischen Absatz kommt."],
        ["Man kann das System mit einem Befehl aktualisieren.", "Es ist nicht schwer."],
        # fortunes: attribution dropped, a too-short one skipped, the quiz file left out,
        # consecutive fortunes of a file joined into one document
        ["Ein Mathematikprofessor trägt sein Fahrrad über den Platz.",
         "Ein Bekannter fragt ihn, ob es kaputt sei.",
         "Wer nicht wagt, der nicht gewinnt!", "Das sagt man so."],
    ]
    assert "handbook" in done.stderr and "fortunes" in done.stderr


def test_a_missing_package_is_named(tmp_path: Path) -> None:
    _tree(tmp_path)
    for html in (tmp_path / "usr/share/debian-reference").iterdir():
        html.unlink()
    done = _run(str(tmp_path))
    assert done.returncode == 2
    assert "no reference text" in done.stderr and "extract the package" in done.stderr
