"""Numbers and currency signs the model cannot copy, shown to it as ones it can.

The model copies a number piece by piece and often loses a digit group on the way: on
newstest2015 "700.000 Menschen" came out as "70,000 people", "250.000" as "25,000" and
"430 $" as "$30". It copies a short number of one subword piece ("36") reliably, so each
number at risk (three digits or more, or digit groups with separators) is shown to the model
as such a placeholder, and the placeholder it writes is shown to the reader as the number, in
the target's notation. Currency signs that the training corpora hardly contain ("£": four of
282k German lines) came out as invented words ("145,50 £" -> "145.50 https"), and "$" after
its number, as German writes it, often lost the sign or the number ("7,5 Millionen $" -> "7.5
million money"); the model reads them as the word it knows ("Pfund" -> "pounds").

Per sentence, word by word as the words arrive, so it adds no latency: a placeholder is never
a number the sentence has shown so far, and a later number equal to one in use gets its own.
A number grouped by spaces ("40 000", "100 000") keeps its groups after the first word as
written: the model reads "40 000" or "36 000" and writes "40,000" or "36,000", whose first
group is the placeholder.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from simulmt.output.numbers import NumberNotation

__all__ = ["CURRENCY_WORDS", "PLACEHOLDERS", "Placeholders"]

# Two-digit numbers that are one piece of the bundled tokenizer and rarely stand for a
# written-out number in a sentence; tried in this order. More numbers at risk than these in
# one sentence stay as written (and a later two-digit number equal to one in use is then read
# as written too, so the reader sees the earlier number there: never seen in a test set).
PLACEHOLDERS = ("36", "27", "45", "28", "23", "17", "13", "21", "24", "22", "19", "16", "14",
                "18", "11", "15", "25", "12")

# Signs that stand alone as words ("5 Milliarden £", "(700.000 £)"), by source language: the
# word the model reads instead.
CURRENCY_WORDS: dict[str, dict[str, str]] = {
    "de": {"£": "Pfund", "€": "Euro", "¥": "Yen", "$": "Dollar"},
}

# a word that is one number, perhaps in brackets or quotes or followed by punctuation
_NUMBER_WORD = re.compile(r"^([(\[\"'„“»«]*)(\d+(?:[.,]\d+)*)([^\w]*)$")
# a word of three digits after a number of at most three: a thousands group ("40 000")
_GROUP = re.compile(r"^\d{3}(?:[^\w]*)$")
_GROUPED = re.compile(r"^\d{1,3}$")
# the first digit group of a number in a target word, not inside a longer one ("36" of "36,000":
# the model writes "100 000" read as "36 000" as "36,000")
_TARGET_NUMBER = re.compile(r"(?<![\d.,])\d+(?=(?:[.,]\d{3})*(?![\d]|[.,]\d))")
_YEAR = re.compile(r"^(?:1[5-9]\d\d|20\d\d)$")
_PUNCT = "()[].,;:!?\"'„“”»«"


def at_risk(number: str) -> bool:
    """True for a number the model often miscopies: digit groups with separators, or three
    digits or more, except a year. Years are frequent in training and copied well; read as a
    placeholder ("im Jahr 36"), they cost BLEU on newstest2015 where protecting them
    gained no number."""
    if not number.isdigit():
        return True
    return len(number) >= 3 and _YEAR.match(number) is None


class Placeholders:
    """One sentence's model view of its words and the numbers behind its placeholders."""

    def __init__(self, *, notation: NumberNotation | None, src_lang: str) -> None:
        """`notation`: how a number is written in the target (None: as in the source)."""
        self.notation = notation
        self.currency = CURRENCY_WORDS.get(src_lang, {})
        self.numbers: dict[str, str] = {}  # placeholder -> the number in the target's notation
        self._placeholder_of: dict[str, str] = {}  # a number as the source writes it -> its
        # placeholder
        self._seen: set[str] = set()  # numbers of the sentence left as written
        self._model_words: list[str] = []
        self._after_number = False  # the last word was a number a thousands group may follow

    def model_words(self, words: Sequence[str]) -> list[str]:
        """The model's view of the sentence's `words` received so far (a longer list each
        call: only its new words are looked at). One model word per word."""
        for word in words[len(self._model_words) :]:
            self._model_words.append(self._view(word))
        return self._model_words

    def _view(self, word: str) -> str:
        after_number, self._after_number = self._after_number, _GROUPED.match(word) is not None
        if after_number and _GROUP.match(word):
            return word  # "40 000": the model copies the group with its number, as written
        sign = word.strip(_PUNCT)
        if sign in self.currency:
            return word.replace(sign, self.currency[sign])
        m = _NUMBER_WORD.match(word)
        if m is None:
            return word
        before, number, after = m.groups()
        if number in self._placeholder_of:  # the same number again: the same placeholder
            return before + self._placeholder_of[number] + after
        if not at_risk(number) and number not in self.numbers:
            self._seen.add(number)
            return word
        taken = self.numbers.keys() | self._seen
        free = next((p for p in PLACEHOLDERS if p not in taken), None)
        if free is None:
            self._seen.add(number)
            return word
        converted = self.notation.convert(number) if self.notation is not None else None
        self.numbers[free] = converted or number
        self._placeholder_of[number] = free
        return before + free + after

    def restore(self, words: list[str]) -> list[str]:
        """Target `words` with each placeholder of this sentence written as its number."""
        if not self.numbers or not any(c.isdigit() for w in words for c in w):
            return words
        return [_TARGET_NUMBER.sub(lambda m: self.numbers.get(m.group(), m.group()), w)
                for w in words]
