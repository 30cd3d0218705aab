"""Numbers the model copied from the source in the source's notation, written in the target's.

German writes 2.100 (two thousand one hundred) and 16,1 (sixteen point one); English writes
2,100 and 16.1. The model copies digit strings token by token and often keeps the source's
separators: on newstest2015 (full sentence, beam 5) 18 numbers came out as "2.100
Palestinians" or "16,1 per cent", which an English reader takes for 2.1 and a typo. The fix
needs no model: a committed target word that contains a number of the source, written exactly
as in the source and unambiguous in the source's notation, gets that number in the target's
notation. It looks at one word and the source read so far, so it adds no latency.

Ambiguous numbers stay as written: one separator followed by exactly three digits when that
separator is the source's decimal mark ("73,000" in a German sentence is usually an English
number copied into it), and numbers without separators (years, counts).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["NOTATION", "NumberNotation"]

# (thousands separator, decimal mark) as each language writes digits in running text. A pair of
# languages whose entries differ gets its numbers converted; a language not listed is left alone.
NOTATION: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("de", "nl", "da", "es", "it", "pt", "id", "tr", "el", "ro", "sl", "hr"),
                    (".", ",")),
    **dict.fromkeys(("en", "zh", "ja", "ko", "he", "th", "ms"), (",", ".")),
}

# a run of digits with '.' or ',' between digit groups, not inside a longer such run
_NUMBER = re.compile(r"(?<![\d.,])\d+(?:[.,]\d+)+(?![\d]|[.,]\d)")


@dataclass(frozen=True)
class NumberNotation:
    """Converts numbers from the source language's notation to the target's."""

    src_thousands: str
    src_decimal: str
    tgt_thousands: str
    tgt_decimal: str

    @classmethod
    def for_pair(cls, src: str, tgt: str) -> NumberNotation | None:
        """The conversion for a language pair (ISO 639-1 codes), or None when the two write
        numbers alike or either is not in `NOTATION`."""
        a, b = NOTATION.get(src), NOTATION.get(tgt)
        if a is None or b is None or a == b:
            return None
        return cls(src_thousands=a[0], src_decimal=a[1], tgt_thousands=b[0], tgt_decimal=b[1])

    def convert(self, number: str) -> str | None:
        """`number` (digits and separators) in the target's notation, or None if it is not a
        well-formed, unambiguous number of the source's notation."""
        integer, dec, fraction = number.partition(self.src_decimal)
        if self.src_decimal in fraction:
            return None  # two decimal marks: a date, a version, a list
        groups = integer.split(self.src_thousands)
        if len(groups) > 1 and (not 1 <= len(groups[0]) <= 3
                                or any(len(g) != 3 for g in groups[1:])):
            return None  # "15.08.2015", "1.5.3": not thousands groups
        if dec and len(groups) == 1 and len(fraction) == 3:
            return None  # "73,000": the source's decimal or the target's thousands? leave it
        out = self.tgt_thousands.join(groups)
        return out + self.tgt_decimal + fraction if dec else out

    def source_numbers(self, source: Sequence[str]) -> dict[str, str]:
        """Every convertible number in the source words: {as the source writes it: as the
        target writes it}."""
        found: dict[str, str] = {}
        for word in source:
            for number in _NUMBER.findall(word):
                converted = self.convert(number)
                if converted is not None and converted != number:
                    found[number] = converted
        return found

    def localise(self, word: str, source: Sequence[str]) -> str:
        """`word` with each number copied verbatim from `source` in the target's notation."""
        return self.localise_words([word], source)[0]

    def localise_words(self, words: list[str], source: Sequence[str]) -> list[str]:
        """`localise` for several words, reading the source's numbers once (and not at all
        when no word has a digit, as almost none do)."""
        if not any(c.isdigit() for word in words for c in word):
            return words
        numbers = self.source_numbers(source)
        if not numbers:
            return words
        return [_NUMBER.sub(lambda m: numbers.get(m.group(), m.group()), w) for w in words]
