"""Where a text ends a sentence and goes on: the detector shared by the engine rule
(`simulmt.search.stops`) and the evaluator's split measure (`simulmt.eval.splits`).

A sentence end is a run of stops (. ! ?), perhaps followed by closing quotes or brackets, at
the end of a whitespace word that more words follow. A period is not a sentence end after an
abbreviation ("Mr.", "Dr."), an initial ("J."), a letter-dot word ("U.S.", "a.m.", "z.B."),
or before a word that opens in lower case or with a digit ("approx. five", "No. 5"). A stop
inside a word ("3.5", "U.S") is no sentence end: no whitespace follows it. Numbers before a
period count ("in 2015. The"): English news ends sentences on years.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

STOPS = ".!?"
QUOTES = "\"'“”‘’„«»‹›"  # open or close, by language: German „…“ and »…«, English “…”
CLOSERS = QUOTES + ")]}"  # may follow the stop of a sentence end: `yes."`, `(so.)`
OPENERS = QUOTES + "([{"  # may open the next sentence: `. "Yes`

# English and German abbreviations that take a period and are mostly followed by a capital
# (titles, company forms, months): the capital after them does not open a sentence.
ABBREVIATIONS = frozenset(
    """Mr Mrs Ms Dr Prof St Jr Sr Gen Gov Sen Rep Lt Col Capt Sgt Rev Mt Ft Inc Ltd Corp Co
    Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec vs approx ca No Nr Hr Fr Frau Herr""".split()
)
_LETTER_DOTS = re.compile(r"^(?:[^\W\d_]\.)+[^\W\d_]\.?$")  # U.S / a.m / z.B (final dot stripped)


def stop_tail(word: str) -> tuple[str, str]:
    """(body, stops): the word without its closers and trailing stops, and those stops
    ("" if the word does not end in a stop)."""
    core = word.rstrip(CLOSERS)
    body = core.rstrip(STOPS)
    return body, core[len(body) :]


def abbreviation_like(body: str) -> bool:
    """A period after `body` shortens a word rather than ending a sentence."""
    if len(body) == 1 and body.isalpha():  # an initial
        return True
    return body in ABBREVIATIONS or bool(_LETTER_DOTS.match(body))


def may_end_sentence(word: str) -> bool:
    """`word` ends in a stop that would end the sentence if a capitalised word followed it
    (what the engine rule must not commit while the source sentence goes on)."""
    body, stops = stop_tail(word)
    if not stops:
        return False
    return stops != "." or not abbreviation_like(body)


def ends_sentence(word: str, next_word: str) -> bool:
    """`word` ends a sentence that `next_word` follows. `next_word` may be only the start of
    the next word (its first subword): what decides is its first character after openers; if
    that is not known yet (only openers so far), it counts as a sentence end."""
    if not may_end_sentence(word):
        return False
    _, stops = stop_tail(word)
    if "!" in stops or "?" in stops:
        return True
    first = next_word.lstrip(OPENERS)[:1]
    return not (first.islower() or first.isdigit())


def inner_sentence_end(text: str) -> bool:
    """`text` has a sentence end followed by more words (it reads as two or more sentences)."""
    return first_inner_end(text.split()) is not None


def first_inner_end(words: Sequence[str]) -> int | None:
    """The index of the first word of `words` that ends a sentence more words follow."""
    for i in range(len(words) - 1):
        if ends_sentence(words[i], words[i + 1]):
            return i
    return None
