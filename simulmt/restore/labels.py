"""What the restorer predicts for each recognizer word, and how a prediction is applied.

Labels come from written text: each word as a recognizer writes it (`recognizer_word`), the
case it had (lower / capitalised / all caps) and the punctuation after it. Only case and
commas are applied to recognizer words: sentence ends are the segmenter's job, and a comma or
capital letter is what the translation model misses most in recognizer input (model-notes).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from simulmt.data.asr import recognizer_word, strip_punctuation

__all__ = ["Case", "Labelled", "Punct", "label_words", "restore_word"]


class Case(enum.IntEnum):
    LOWER = 0
    CAPITAL = 1  # first letter upper: German nouns, names, sentence starts
    UPPER = 2  # all caps: acronyms (USA, EU)


class Punct(enum.IntEnum):
    NONE = 0
    COMMA = 1  # also ; (the same pause inside a sentence)
    PERIOD = 2
    QUESTION = 3
    EXCLAMATION = 4
    COLON = 5


_MARKS = {
    ",": Punct.COMMA,
    ";": Punct.COMMA,
    ".": Punct.PERIOD,
    "?": Punct.QUESTION,
    "!": Punct.EXCLAMATION,
    ":": Punct.COLON,
}


@dataclass(frozen=True)
class Labelled:
    """A written sentence (or run of sentences) as recognizer words with their labels."""

    words: list[str]
    cases: list[Case]
    puncts: list[Punct]


def _case(core: str, word: str) -> Case:
    if core == word:
        return Case.LOWER
    if len(core) > 1 and core.isupper():
        return Case.UPPER
    return Case.CAPITAL


def _trailing_mark(token: str) -> Punct:
    """The last punctuation mark of `token` that follows its last letter or digit."""
    for ch in reversed(token):
        if ch in _MARKS:
            return _MARKS[ch]
        if ch.isalnum():
            break
    return Punct.NONE


def label_words(tokens: Sequence[str]) -> Labelled:
    """Written tokens -> recognizer words with their case and following punctuation. A token
    that is only punctuation ("–", ",") marks the word before it."""
    words: list[str] = []
    cases: list[Case] = []
    puncts: list[Punct] = []
    for t in tokens:
        word = recognizer_word(t)
        if word:
            words.append(word)
            cases.append(_case(strip_punctuation(t), word))
            puncts.append(_trailing_mark(t))
        elif puncts and puncts[-1] is Punct.NONE:
            puncts[-1] = next((_MARKS[c] for c in t if c in _MARKS), Punct.NONE)
    return Labelled(words, cases, puncts)


def restore_word(word: str, case: Case, punct: Punct) -> str:
    """`word` with a predicted case and comma applied. Never lowers a letter a recognizer
    capitalised, and adds no comma after a word that already ends in punctuation."""
    # a letter whose upper case is longer ("ß" -> "SS") is left as it is: the word stays the
    # same word in the recognizer's eyes
    if word[:1].islower():
        if case is Case.UPPER and len(word.upper()) == len(word):
            word = word.upper()
        elif case is not Case.LOWER and len(word[0].upper()) == 1:
            word = word[0].upper() + word[1:]
    if punct is Punct.COMMA and word[-1:].isalnum():
        word += ","
    return word
