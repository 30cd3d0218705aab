"""The recognizer view of a sentence: what many speech recognizers emit for it.

Live captions often come from a speech recognizer that writes lowercase words without
punctuation ("herr modi befindet sich auf einer fünftägigen reise nach japan"). Training on this
view as well as the written one, and evaluating on both, keeps the model usable on such input.
"""

from __future__ import annotations

import re
import unicodedata

# Inside a word, an apostrophe or hyphen stays (geht's, E-Mail); between digits, a point or comma
# stays (3.5, 1,000). Every other punctuation or symbol character becomes a space.
_KEEP_INSIDE = re.compile(r"(?<=[^\W_])['’-](?=[^\W_])|(?<=\d)[.,](?=\d)")
_SPACE = re.compile(r"\s+")


def _is_punctuation(char: str) -> bool:
    return unicodedata.category(char)[0] in "PS"


def recognizer_view(text: str) -> str:
    """`text` lowercased, with punctuation and symbols removed (except inside words/numbers)."""
    keep = {m.start() for m in _KEEP_INSIDE.finditer(text)}
    chars = [" " if _is_punctuation(c) and i not in keep else c for i, c in enumerate(text)]
    return _SPACE.sub(" ", "".join(chars)).strip().lower()
