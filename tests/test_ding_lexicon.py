"""scripts/ding_lexicon.py: Ding's word and phrase entries appended to a corpus's training split,
none from a dictionary line whose example sentence is held out, and recorded in the manifest."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DICT = """# Version :: 1.9
Haus {n}; Gebäude {n} | das Haus ist alt. :: house; building | the house is old.
Baum {m} | Bäume {pl} :: tree | trees
etw. tun :: to do sth.
Brücke {f} | Die Brücke ist sehr alt. :: bridge | The bridge is very old indeed.
schnell [ugs.] :: quick
"""


def test_entries_are_added_and_recorded_and_held_out_lines_skipped(
    tmp_path: Path, write_split: Callable[[Path, str, list[tuple[str, str, str]]], None]
) -> None:
    corpus, out = tmp_path / "corpus", tmp_path / "lex"
    corpus.mkdir()
    write_split(corpus, "train", [("Hallo.", "Hello.", "tatoeba")])
    bridge = ("Die Brücke ist sehr alt.", "The bridge is very old indeed.", "ding")
    write_split(corpus, "dev", [bridge])
    write_split(corpus, "test", [("Ja.", "Yes.", "tatoeba")])
    manifest = {"splits": {"train": 1, "dev": 1, "test": 1}, "sha256": {},
                "sources": {"ding": {"train": 0, "dev": 1, "test": 0,
                                     "package": "trans-de-en=1.9-6", "licence": "GPL-2+"}}}
    (corpus / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (tmp_path / "de-en").write_text(DICT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ding_lexicon.py"), "--corpus", str(corpus),
         "--dict", str(tmp_path / "de-en"), "--out", str(out)],
        capture_output=True, text=True, check=True,
    )
    assert "1 dictionary lines skipped" in done.stdout
    de = (out / "train.de").read_text(encoding="utf-8").splitlines()
    en = (out / "train.en").read_text(encoding="utf-8").splitlines()
    source = (out / "train.source").read_text(encoding="utf-8").splitlines()
    # first alternatives, tags gone; no sentences, no placeholders; the Brücke line held out
    assert list(zip(de, en, source, strict=True)) == [
        ("Hallo.", "Hello.", "tatoeba"), ("Haus", "house", "dinglex"),
        ("Baum", "tree", "dinglex"), ("Bäume", "trees", "dinglex"),
        ("schnell", "quick", "dinglex"),
    ]
    assert (out / "dev.de").read_text(encoding="utf-8") == (corpus / "dev.de").read_text(
        encoding="utf-8")
    recorded = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert recorded["splits"]["train"] == 5
    assert recorded["sources"]["dinglex"] | {"note": ""} == {
        "train": 4, "dev": 0, "test": 0, "package": "trans-de-en=1.9-6", "licence": "GPL-2+",
        "note": ""}
    assert recorded["sha256"]["train.de"] == hashlib.sha256(
        (out / "train.de").read_bytes()).hexdigest()
