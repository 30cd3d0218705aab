"""Word features of the small networks (segmenter, restorer): hashed lexical ids and a few
surface flags.

Hashing (crc32, stable across processes, unlike `hash`) keeps the model small and open-
vocabulary: a word is its lowercased core, its 3-letter prefix and suffix, its raw form and its
trailing punctuation, each mapped to one of `buckets` embedding rows. The flags carry what the
recognizer view lacks (case, sentence-final punctuation), so one model serves both views.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import torch

from simulmt.data.asr import strip_punctuation
from simulmt.input.words import SENTENCE_END

__all__ = ["N_FLAGS", "N_IDS", "word_features", "words_features"]

N_IDS = 5  # hashed ids per word
N_FLAGS = 6  # surface flags per word
_CLAUSE_END = (",", ";", ":", "–", "-")
_CLOSERS = "\"'»«”“’)]"


def _bucket(kind: str, text: str, buckets: int) -> int:
    return zlib.crc32(f"{kind}\x1f{text}".encode()) % buckets


def word_features(word: str, buckets: int) -> tuple[list[int], list[float]]:
    """The hashed ids (N_IDS) and flags (N_FLAGS) of one word."""
    core = strip_punctuation(word).lower()
    trailing = word[len(word.rstrip("".join(SENTENCE_END) + "".join(_CLAUSE_END) + _CLOSERS)) :]
    ids = [
        _bucket("w", core, buckets),
        _bucket("p", core[:3], buckets),
        _bucket("s", core[-3:], buckets),
        _bucket("r", word, buckets),
        _bucket("t", trailing, buckets),
    ]
    bare = word.rstrip(_CLOSERS)
    flags = [
        float(word[:1].isupper()),
        float(len(core) > 1 and word.isupper()),
        float(bare.endswith(SENTENCE_END)),
        float(bare.endswith(_CLAUSE_END)),
        float(core.isdigit()),
        float(not core),
    ]
    return ids, flags


def words_features(words: Sequence[str], buckets: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Features of a word sequence: ids (T, N_IDS) long, flags (T, N_FLAGS) float."""
    ids: list[list[int]] = []
    flags: list[list[float]] = []
    for w in words:
        i, f = word_features(w, buckets)
        ids.append(i)
        flags.append(f)
    if not words:
        return torch.zeros(0, N_IDS, dtype=torch.long), torch.zeros(0, N_FLAGS)
    return torch.tensor(ids, dtype=torch.long), torch.tensor(flags)  # (T, N_IDS), (T, N_FLAGS)
