"""A corpus with Ding's dictionary entries added as short training pairs (the lexicon experiment).

python scripts/ding_lexicon.py --corpus cache/corpus --dict DING_FILE --out cache/corpus-lex

DING_FILE is `usr/share/trans/de-en` of the extracted `trans-de-en` package (`simulmt data build`
leaves it under `cache/raw/extracted/`). The output folder is the corpus with every word or phrase
entry appended to its training split as source `dinglex` (first alternative of each sub-entry,
tags removed, at most 6 German / 8 English words, no placeholders such as `etw`/`sb`, no
sentences). Dictionary lines whose example sentences are in the corpus's dev or test split are
skipped, so no held-out pair's words come back through the lexicon. Tried in issue 15
(notes/model-notes.md, "A dictionary as training data"); not part of the default corpus.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from simulmt.data.clean import Pair
from simulmt.data.extend import extend_corpus
from simulmt.data.src_ding import REJECT, first_alternative, line_pairs, sub_entries

_SENTENCE_END = re.compile(r"[.!?]$")


def heldout_sentences(corpus: Path) -> set[str]:
    """German sides of the corpus's held-out Ding pairs."""
    held: set[str] = set()
    for split in ("dev", "test"):
        with (corpus / f"{split}.de").open(encoding="utf-8") as de, \
                (corpus / f"{split}.source").open(encoding="utf-8") as src:
            held.update(d.strip() for d, s in zip(de, src, strict=True) if s.strip() == "ding")
    return held


def _entry(raw: str, max_words: int) -> str | None:
    text = first_alternative(raw)
    if not text or REJECT.search(text) or _SENTENCE_END.search(text):
        return None
    return text if len(text.split()) <= max_words else None


def lexicon_pairs(lines: list[str], held: set[str]) -> tuple[list[Pair], int]:
    """(unique entry pairs, dictionary lines skipped because they hold a held-out sentence)."""
    pairs: list[Pair] = []
    seen: set[Pair] = set()
    skipped = 0
    for line in lines:
        if any(de in held for de, _ in line_pairs(line)):
            skipped += 1
            continue
        for de_raw, en_raw in sub_entries(line):
            de, en = _entry(de_raw, 6), _entry(en_raw, 8)
            if de and en and (de, en) not in seen:
                seen.add((de, en))
                pairs.append((de, en))
    return pairs, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--dict", type=Path, required=True, help="Ding's usr/share/trans/de-en")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    lines = args.dict.read_text(encoding="utf-8").splitlines()
    pairs, skipped = lexicon_pairs(lines, heldout_sentences(args.corpus))
    manifest = json.loads((args.corpus / "manifest.json").read_text(encoding="utf-8"))
    ding = manifest["sources"]["ding"]
    extend_corpus(args.corpus, args.out, pairs, source="dinglex",
                  package=ding.get("package", ""), licence=ding.get("licence", "?"),
                  note="word and phrase entries of the Ding dictionary (scripts/ding_lexicon.py)")
    print(f"{len(pairs)} lexicon pairs added to {args.out}/train.*; "
          f"{skipped} dictionary lines skipped (their sentences are held out)")


if __name__ == "__main__":
    main()
