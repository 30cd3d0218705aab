"""Ding dictionary (`trans-de-en`): full example sentences from `de1 | de2 :: en1 | en2` lines."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from simulmt.data.clean import Pair, tidy
from simulmt.data.document import Document

DICT_PATH = "usr/share/trans/de-en"
SLICE = 250  # sentences per document: consecutive entries, so a slice shares head words
_TAGS = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\)")  # {m} [ugs.] (comment)
_SENTENCE = re.compile(r"[.!?][\"'“”’»«]?$")
# fragments and templates rather than sentences: a/b alternatives, ellipses, placeholder pronouns
REJECT = re.compile(r"/|\.\.\.|…|\b(?:etw|jdm|jdn|jds|jd|sb|sth|sb's)\b\.?|~|\+")


def first_alternative(text: str) -> str:
    """The first alternative of a sub-entry (`a; b`), its tags (`{m}`, `[ugs.]`) removed."""
    return tidy(_TAGS.sub("", text.split(";")[0]))


def _sentence(text: str) -> str | None:
    """The first alternative of a sub-entry with tags removed, if it is a full sentence."""
    cleaned = first_alternative(text)
    if REJECT.search(cleaned) or not _SENTENCE.search(cleaned):
        return None
    if not cleaned[0].isupper() and not cleaned[0].isdigit() and cleaned[0] not in "\"„“»«'":
        return None
    return cleaned


def sub_entries(line: str) -> list[tuple[str, str]]:
    """The raw (German, English) sub-entries of one dictionary line `de1 | de2 :: en1 | en2`
    (none for comments and lines whose sides do not line up one-to-one)."""
    if line.startswith("#") or "::" not in line:
        return []
    de_side, en_side = line.split("::", 1)
    de_subs, en_subs = de_side.split("|"), en_side.split("|")
    if len(de_subs) != len(en_subs):
        return []
    return list(zip(de_subs, en_subs, strict=True))


def line_pairs(line: str) -> list[Pair]:
    """Full-sentence pairs of one dictionary line (sub-entries line up one-to-one)."""
    pairs: list[Pair] = []
    for de_raw, en_raw in sub_entries(line):
        de, en = _sentence(de_raw), _sentence(en_raw)
        if de and en and len(en.split()) >= 4 and len(de.split()) >= 3:
            pairs.append((de, en))
    return pairs


def read_documents(roots: list[Path]) -> Iterator[Document]:
    """Consecutive slices of SLICE sentence pairs, named ding-0000, ding-0001, …"""
    pairs: list[Pair] = []
    with (roots[0] / DICT_PATH).open(encoding="utf-8") as handle:
        for line in handle:
            pairs.extend(line_pairs(line.rstrip("\n")))
    for index in range(0, len(pairs), SLICE):
        yield Document("ding", f"ding-{index // SLICE:04d}", tuple(pairs[index:index + SLICE]))
