"""Outputs that loop: the degenerate repetitions small translation models fall into.

An output loops if a word trigram, or a unit of 2–5 characters, occurs three times in a row
("quickly quickly quickly", "Motorniahgdiagdddiagdd" repeats "diag"/"dd"-like units). Real text
rarely does either, so the share of such outputs on a test set measures how often search derails.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

REPEATS = 3  # occurrences in a row that count as a loop
_CHAR_UNIT = re.compile(r"(\S{2,5}?)\1{" + str(REPEATS - 1) + "}")


def word_loop(words: Sequence[str], *, n: int = 3, repeats: int = REPEATS) -> bool:
    """Some word n-gram occurs `repeats` times in a row (n = 1..`n` are all checked, so
    "the the the" counts as well as "a b c a b c a b c")."""
    for size in range(1, n + 1):
        span = size * repeats
        for start in range(len(words) - span + 1):
            unit = words[start:start + size]
            if all(words[start + r * size:start + (r + 1) * size] == unit for r in range(repeats)):
                return True
    return False


def char_loop(text: str) -> bool:
    """A unit of 2–5 non-space characters, with a letter in it, repeated three times in a row
    (numbers such as 1000000 are not loops)."""
    return any(any(c.isalpha() for c in m.group(1)) for m in _CHAR_UNIT.finditer(text))


def loops(text: str) -> bool:
    """The output loops by either test."""
    return word_loop(text.split()) or char_loop(text)


def loop_rate(hypotheses: Sequence[str]) -> float:
    """Share of hypotheses that loop, in percent."""
    if not hypotheses:
        return 0.0
    return 100.0 * sum(loops(h) for h in hypotheses) / len(hypotheses)
