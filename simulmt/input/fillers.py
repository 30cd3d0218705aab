"""Hesitation fillers of spoken German ("äh", "ähm", "hm"), which sessions drop by default.

Verbatim speech recognizers write them, and the model, trained on written text, translates
them: "ich habe äh gestern mit dem ähm bürgermeister gesprochen" came out as "I have a look
like the mayor of the mayor." against "I talked to the mayor yesterday." without them. Only
sounds that are never German words are fillers: "eh" (= anyway), "um", "na", "ja", "also"
stay, since they carry meaning as often as not.
"""

from __future__ import annotations

import re

from simulmt.data.asr import recognizer_word
from simulmt.input.words import ends_sentence

__all__ = ["filler_ends_sentence", "is_filler"]

_FILLER = re.compile(r"(?:ä+h+m*|ö+h+m*|e+h+m+|h+m+|m+h+m+)")  # lowercase, as a recognizer writes


def is_filler(word: str) -> bool:
    """True for a whitespace-free word that is a hesitation sound, with or without
    punctuation around it ("Äh,", "ähm...", "(hm)"): its recognizer form is one."""
    return _FILLER.fullmatch(recognizer_word(word)) is not None


def filler_ends_sentence(word: str) -> bool:
    """A filler that carries its sentence's final punctuation ("äh."): dropping the sound
    must not drop the sentence end."""
    return is_filler(word) and ends_sentence(word)
