"""Wesnoth campaign catalogs: gettext `.mo` files, msgid (English) → msgstr (German)."""

from __future__ import annotations

import gettext
import re
from collections.abc import Iterator
from pathlib import Path

from simulmt.data.clean import Pair, pair_sentences, strip_markup
from simulmt.data.document import Document

MO_GLOB = "usr/share/games/wesnoth/*/locale/de/LC_MESSAGES/*.mo"
_PLACEHOLDER = re.compile(r"[$%{}@=\\|~]|\[/?\w|&\w+;")  # WML variables, format codes, WML tags
_GENDER_CONTEXT = re.compile(r"^[\w ]+\^")  # "female^Elvish Fighter"


def read_catalog(path: Path) -> dict[str, str]:
    """Singular entries of a `.mo` catalog as {msgid: msgstr}, message contexts removed."""
    with path.open("rb") as handle:
        catalog = gettext.GNUTranslations(handle)._catalog  # type: ignore[attr-defined]
    entries: dict[str, str] = {}
    for key, value in catalog.items():
        if not isinstance(key, str) or not key or not value:  # plural forms and the header
            continue
        msgid = key.split("\x04", 1)[-1]  # "context\x04msgid"
        entries[msgid] = value
    return entries


def _usable(text: str) -> bool:
    return not _PLACEHOLDER.search(text)


def entry_pairs(msgid: str, msgstr: str) -> list[Pair]:
    """Sentence pairs of one catalog entry, or [] when it holds placeholders or markup residue."""
    en = strip_markup(_GENDER_CONTEXT.sub("", msgid))
    de = strip_markup(_GENDER_CONTEXT.sub("", msgstr))
    if not (_usable(en) and _usable(de)):
        return []
    en_lines = [line for line in en.split("\n") if line.strip()]
    de_lines = [line for line in de.split("\n") if line.strip()]
    if len(en_lines) != len(de_lines):
        return pair_sentences(" ".join(de_lines), " ".join(en_lines))
    pairs: list[Pair] = []
    for de_line, en_line in zip(de_lines, en_lines, strict=True):
        pairs.extend(pair_sentences(de_line.strip(), en_line.strip()))
    return pairs


def read_documents(roots: list[Path]) -> Iterator[Document]:
    """One document per text domain (campaign or game part), in file-name order."""
    paths = sorted((p for root in roots for p in root.glob(MO_GLOB)), key=lambda p: p.name)
    for path in paths:
        pairs: list[Pair] = []
        for msgid, msgstr in sorted(read_catalog(path).items()):
            pairs.extend(entry_pairs(msgid, msgstr))
        yield Document("wesnoth", path.stem, tuple(pairs))
