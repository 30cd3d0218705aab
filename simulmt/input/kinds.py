"""What a session's source words look like: text as written, or a speech recognizer's output.

Recognizer output (lowercase, no punctuation) is translated worse than written text by a
model trained mostly on text (newstest2015: 12.2 against 15.3 BLEU); a `recognizer` session
first restores case and commas (`simulmt.restore`; 12.9 BLEU there).
No torch here: clients import `InputKind` to build their start message.
"""

from __future__ import annotations

import enum

from simulmt.input.choice import parse_choice

__all__ = ["InputKind"]


class InputKind(enum.Enum):
    TEXT = "text"  # as written: case and punctuation kept; read as they come
    RECOGNIZER = "recognizer"  # lowercase without punctuation: case and commas restored first

    @classmethod
    def parse(cls, value: str | InputKind) -> InputKind:
        return parse_choice(cls, value, "input kind")
