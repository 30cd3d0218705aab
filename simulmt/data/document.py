"""The unit that sources yield and the split works on: a document of German–English pairs."""

from __future__ import annotations

from dataclasses import dataclass

from simulmt.data.clean import Pair


@dataclass(frozen=True)
class Document:
    """Pairs from one document (a campaign, a Bible book, a help folder, a dictionary slice)."""

    source: str  # source name, e.g. "wesnoth"
    name: str  # document name, unique within the source, e.g. "wesnoth-httt"
    pairs: tuple[Pair, ...]  # (German, English), raw: cleaning happens later
