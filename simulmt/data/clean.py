"""Cleaning rules of all sources: normalization, markup stripping, sentence pairing, filters."""

from __future__ import annotations

import enum
import html
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

Pair = tuple[str, str]  # (German, English)

_TAG = re.compile(r"<[^<>]*>")
_SPACE = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,;:!?])")
# a sentence ends at . ! ? (optionally closed by quotes/brackets) followed by space and an
# upper-case letter, digit or opening quote; abbreviations such as "z. B." rarely match because
# the next word is lower-case, and a wrong split is caught by requiring equal sentence counts on
# both sides.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'»«“”’)\]]*\s+(?=[\"'„“»«(\[]?[A-ZÄÖÜ0-9])")
_ABBREV_END = re.compile(r"(?:\b(?:z|d|u|s|o|v|bzw|ca|Nr|Dr|St|Mr|Mrs|Ms|e\.g|i\.e|vs|etc|usw|"
                         r"ggf|evtl|vgl|bzw|Abb|Fig|ff|Bd|Kap)\.|\b[A-Z]\.|\d\.)$")
_LETTER = re.compile(r"[^\W\d_]")


class DropReason(enum.Enum):
    """Why a candidate pair was rejected by `PairFilter`."""

    EMPTY = "empty side"
    IDENTICAL = "identical sides"
    TOO_LONG = "over-long line"
    RATIO = "extreme length ratio"
    NO_LETTERS = "no letters"


@dataclass(frozen=True)
class CleanConfig:
    """Thresholds of the pair filter."""

    max_chars: int = 300  # longer lines are rare in speech and slow training; drop them
    max_ratio: float = 2.5  # char-length ratio beyond which pairs are usually misaligned
    ratio_min_chars: int = 12  # short pairs (names, "Ja." / "Yes.") vary a lot; no ratio test


def normalize(text: str) -> str:
    """NFC, HTML entities decoded, whitespace collapsed to single spaces, stripped."""
    text = html.unescape(text)
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\u00ad", "").replace("\u200b", "")  # soft hyphen, zero-width space
    return _SPACE.sub(" ", text).strip()


def strip_markup(text: str) -> str:
    """Remove HTML/Pango tags such as `<b>`, `<span color='red'>`."""
    return _TAG.sub("", text)


def tidy(text: str) -> str:
    """Normalize and remove spaces left before punctuation by stripping things out."""
    return _SPACE_BEFORE_PUNCT.sub(r"\1", normalize(text))


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences (conservatively: abbreviations, ordinals do not split)."""
    pieces: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        head = text[start:match.start()]
        if _ABBREV_END.search(head.rstrip("\"'»«“”’)]")):
            continue
        pieces.append(head.strip())
        start = match.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


def pair_sentences(de: str, en: str) -> list[Pair]:
    """Sentence pairs of aligned paragraphs: one per sentence if both split alike, else whole."""
    de_parts, en_parts = split_sentences(de), split_sentences(en)
    if len(de_parts) == len(en_parts):
        return list(zip(de_parts, en_parts, strict=True))
    return [(de, en)]


def check_pair(pair: Pair, config: CleanConfig) -> DropReason | None:
    """The reason to drop `pair`, or None if it is kept."""
    de, en = pair
    if not de or not en:
        return DropReason.EMPTY
    if de == en:
        return DropReason.IDENTICAL
    if len(de) > config.max_chars or len(en) > config.max_chars:
        return DropReason.TOO_LONG
    if not _LETTER.search(de) or not _LETTER.search(en):
        return DropReason.NO_LETTERS
    short, long_ = sorted((len(de), len(en)))
    if long_ >= config.ratio_min_chars and long_ > config.max_ratio * short:
        return DropReason.RATIO
    return None


def clean_pairs(pairs: Iterable[Pair], config: CleanConfig) -> Iterator[Pair]:
    """Tidy both sides and keep the pairs that pass `check_pair` (duplicates are kept here)."""
    for de, en in pairs:
        pair = (tidy(de), tidy(en))
        if check_pair(pair, config) is None:
            yield pair
