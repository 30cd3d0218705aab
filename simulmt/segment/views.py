"""How a source stream looks: as typed text, or as a speech recognizer sends it.

The recognizer view (lowercase, no punctuation; `simulmt.data.asr`) is what live captioning
clients send; the segmenter trains on both views and `simulmt eval --source-style asr`
evaluates on it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from simulmt.data.asr import recognizer_view, strip_punctuation

__all__ = ["SourceStyle", "apply_style", "recognizer_view", "strip_punctuation"]


class SourceStyle(enum.Enum):
    TEXT = "text"  # as written: case and punctuation kept
    ASR = "asr"  # a recognizer's output: lowercased, punctuation stripped
    LOWER = "lower"  # lowercased, punctuation kept (some recognizers)
    NO_PUNCT = "no-punct"  # case kept, punctuation stripped (others)


def _styled(word: str, style: SourceStyle) -> str:
    if style in (SourceStyle.ASR, SourceStyle.LOWER):
        word = word.lower()
    if style in (SourceStyle.ASR, SourceStyle.NO_PUNCT):
        word = strip_punctuation(word)
    return word


def apply_style(words: Sequence[str], style: SourceStyle) -> list[str]:
    """`words` as `style` shows them; words that were only punctuation disappear."""
    if style is SourceStyle.TEXT:
        return list(words)
    return [w for w in (_styled(w, style) for w in words) if w]
