"""Names a translation should copy: capitalised German words that recur unchanged in English.

Used to build name-swapped training pairs (scripts/name_swap.py) and to measure how often a
model writes such names (scripts/name_recall.py); one definition, so the two agree.
"""

from __future__ import annotations

import re

CAPITALISED = re.compile(r"^[A-ZÄÖÜ][a-zäöüß]{2,}$")
WORD = re.compile(r"[A-Za-zÄÖÜäöüß]+")


def copied_words(de: str, en: str) -> list[str]:
    """Capitalised German words after the first (whose capital says nothing) that the English
    side has unchanged, sorted: "Gestern sah Tom Mary" / "Tom saw Mary yesterday" -> Mary, Tom."""
    english = set(WORD.findall(en))
    later = WORD.findall(" ".join(de.split()[1:]))
    return sorted({w for w in later if CAPITALISED.match(w) and w in english})
