"""Characters no caption text may hold, found and dropped before they reach the model or a reply.

A JSON string may hold any code point, lone surrogates (`"\\ud800"`) included, but such a string
cannot be encoded as UTF-8: the tokenizer refuses it, and so does the websocket layer when it is
echoed back. Bytes that are not UTF-8, read with `surrogateescape`, arrive as lone surrogates
too. Control characters (other than whitespace, which splits words anyway) are not speech
either. `clean_words` drops both and says what it dropped (the server, `simulmt translate`);
`check_words` of `simulmt.session` refuses them (the Python API, `simulmt eval`); `scrub` makes
any outgoing text encodable, a last line of defence for echoes of client input in error
messages; `read_utf8` reads a text file or says which line is not UTF-8.
"""

from __future__ import annotations

import io
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

SURROGATES = re.compile("[\ud800-\udfff]")
# C0 and C1 controls and DEL; the whitespace among them never reaches a word (str.split)
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
BAD = re.compile("[\ud800-\udfff\x00-\x1f\x7f-\x9f]")
SHOWN = 5  # distinct code points `describe` names


def scrub(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD: always encodable as UTF-8."""
    return SURROGATES.sub("\ufffd", text)


def clean_words(words: Sequence[str]) -> tuple[tuple[str, ...], str | None]:
    """The words without lone surrogates and control characters (a word left empty is dropped),
    and what was dropped (`describe`), or None when nothing was."""
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
    """What `found` holds, e.g. "2 lone surrogates and 1 control character (U+0000 NULL,
    U+D800, U+DFFF)"."""
    surrogates = sum(n for ch, n in found.items() if SURROGATES.match(ch))
    controls = sum(found.values()) - surrogates
    parts = []
    if surrogates:
        parts.append(f"{surrogates} lone surrogate{'s' * (surrogates != 1)}")
    if controls:
        parts.append(f"{controls} control character{'s' * (controls != 1)}")
    names = ", ".join(_name(ch) for ch in sorted(found)[:SHOWN])
    more = ", …" if len(found) > SHOWN else ""
    return f"{' and '.join(parts)} ({names}{more})"


def dropped_note(dropped: str, *, rest: str) -> str:
    """A command line's note on what `clean_words` dropped from one line of its input."""
    return (
        f"dropped {dropped}, which no text may hold (bytes that are not UTF-8, or control "
        f"characters); the rest is {rest}"
    )


def tolerate_bad_bytes(stream: TextIO) -> None:
    """Make `stream` (stdin) read bytes that are not UTF-8 as lone surrogates, which
    `clean_words` then drops, instead of raising mid-input."""
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(errors="surrogateescape")


def read_utf8(path: Path, what: str) -> str:
    """The text of `path`, or ValueError naming the line that is not UTF-8 (a file's bytes are
    never guessed at: a test set read wrongly would be scored wrongly)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ValueError(
            f"{what} file {path} line {line} is not UTF-8 text (byte 0x{data[e.start]:02x} at "
            f"byte {column} of the line): save it as UTF-8"
        ) from None


def _name(ch: str) -> str:
    code = f"U+{ord(ch):04X}"
    if SURROGATES.match(ch):
        return code
    return f"{code} {unicodedata.name(ch, 'control')}".rstrip()
