"""Characters no caption text may hold, found and dropped before they reach the model or a reply.

A JSON string may hold any code point, lone surrogates (`"\\ud800"`) included, but such a string
cannot be encoded as UTF-8: the tokenizer refuses it, and so does the websocket layer when it is
echoed back. Control characters (other than whitespace, which splits words anyway) are not
speech either. `clean_words` drops both and says what it dropped; `scrub` makes any outgoing
text encodable, a last line of defence for echoes of client input in error messages.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

SURROGATES = re.compile("[\ud800-\udfff]")
# C0 and C1 controls and DEL; the whitespace among them never reaches a word (str.split)
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
BAD = re.compile("[\ud800-\udfff\x00-\x1f\x7f-\x9f]")
SHOWN = 5  # distinct code points named in a `bad_text` message


def scrub(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD: always encodable as UTF-8."""
    return SURROGATES.sub("\ufffd", text)


def clean_words(words: Sequence[str]) -> tuple[tuple[str, ...], str | None]:
    """The words without lone surrogates and control characters (a word left empty is dropped),
    and a message naming what was dropped, or None when nothing was."""
    found: Counter[str] = Counter()
    out: list[str] = []
    for word in words:
        bad = BAD.findall(word)
        if not bad:
            out.append(word)
            continue
        found.update(bad)
        kept = BAD.sub("", word)
        if kept:
            out.append(kept)
    if not found:
        return tuple(words), None
    return tuple(out), describe(found)


def describe(found: Counter[str]) -> str:
    surrogates = sum(n for ch, n in found.items() if SURROGATES.match(ch))
    controls = sum(found.values()) - surrogates
    parts = []
    if surrogates:
        parts.append(f"{surrogates} lone surrogate{'s' * (surrogates != 1)}")
    if controls:
        parts.append(f"{controls} control character{'s' * (controls != 1)}")
    names = ", ".join(_name(ch) for ch in sorted(found)[:SHOWN])
    more = ", …" if len(found) > SHOWN else ""
    return (
        f"source.text held {' and '.join(parts)} ({names}{more}), which no text may hold; "
        "they were dropped and the rest of the message was taken (send text as valid Unicode "
        "without control characters)"
    )


def _name(ch: str) -> str:
    code = f"U+{ord(ch):04X}"
    if SURROGATES.match(ch):
        return code
    return f"{code} {unicodedata.name(ch, 'control')}".rstrip()
