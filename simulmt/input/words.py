"""Word <-> subword bookkeeping shared by training, search and sessions.

A READ consumes one source *word* (all of its subword tokens). `word_ends[w]` is the number of
source tokens once words 0..w have been read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

FULL = 0  # the wait-k value that means "full sentence" in training configs

SENTENCE_END = (".", "!", "?", "…", "。", "！", "？")


def word_ends(ids: Sequence[int], is_word_start: Callable[[int], bool]) -> list[int]:
    """Token counts at the end of each word; a token opens a word if it starts with '▁'."""
    ends: list[int] = []
    for pos, tok in enumerate(ids):
        if pos > 0 and is_word_start(tok):
            ends.append(pos)
    if ids:
        ends.append(len(ids))
    return ends


# A period after these shortens a word and rarely ends a sentence, in German or English source
# text (titles, company forms, units, months): the source sentence goes on. Not "usw."/"etc.",
# which often end one. Streaming input has no next word to look at, so this is a list.
NON_FINAL_ABBREVIATIONS = frozenset(
    """Dr Prof St Nr Hr Fr Frau Herr Mr Mrs Ms Jr Sr Inc Ltd Co Corp Gen Sen Rep
    bzw ca vgl ggf evtl inkl sog geb Mio Mrd Jh Abs Art Anm Tel Str Bd Hrsg Chr
    Jan Feb Apr Jun Jul Aug Sep Sept Okt Oct Nov Dez Dec""".split()
)
_LETTER_DOTS = re.compile(r"^(?:[^\W\d_]\.)+$")  # an initial or "z.B." "d.h." "U.S." "J.R."
_ORDINAL = re.compile(r"^\d{1,2}\.$")  # "am 3. Oktober", "im 20. Jahrhundert"; not "2015."


def ends_sentence(word: str) -> bool:
    """A word that closes a sentence: final punctuation, perhaps followed by quotes/brackets,
    unless the period is an abbreviation's ("Dr.", "z.B."), an initial's ("J.") or a German
    ordinal number's ("3."). newstest2015's source lines cut inside: 95 of 2,169 by final
    punctuation alone, mostly at dates ("am 3. Oktober"); 32 with these exceptions."""
    stripped = word.rstrip("\"'»«”“’)]")
    if not stripped.endswith(SENTENCE_END):
        return False
    if stripped.endswith("..") or not stripped.endswith("."):
        return True
    return not (
        _ORDINAL.match(stripped)
        or _LETTER_DOTS.match(stripped)
        or stripped[:-1].lstrip("(\"'„“»«") in NON_FINAL_ABBREVIATIONS
    )
