"""Word <-> subword bookkeeping shared by training, search and sessions.

A READ consumes one source *word* (all of its subword tokens). `word_ends[w]` is the number of
source tokens once words 0..w have been read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

FULL = 0  # the wait-k value that means "full sentence" in training configs

SENTENCE_END = (".", "!", "?", "…", "。", "！", "？")


def word_ends(ids: Sequence[int], is_word_start: Callable[[int], bool]) -> list[int]:
    """Token counts at the end of each word; a token opens a word if it starts with '▁'."""
    ends: list[int] = []
    for pos, tok in enumerate(ids):
        if pos > 0 and is_word_start(tok):
            ends.append(pos)
    if ids:
        ends.append(len(ids))
    return ends


def waitk_visible(ends: Sequence[int], k: int, tgt_len: int) -> torch.Tensor:
    """Source tokens visible to each of tgt_len target steps under word-level wait-k.

    Step t (0-based, predicting target token i = t+1) sees words x<=g(i), g(i) = min(|x|, k+i-1);
    k = FULL (0) means the whole source. Returns (tgt_len,) long.
    """
    n = len(ends)
    if k == FULL:
        return torch.full((tgt_len,), ends[-1], dtype=torch.long)
    g = torch.clamp(torch.arange(tgt_len) + k, max=n)  # (T,) words read for step t
    return torch.tensor(ends, dtype=torch.long)[g - 1]  # (T,)


def ends_sentence(word: str) -> bool:
    """A word that closes a sentence: final punctuation, perhaps followed by quotes/brackets."""
    stripped = word.rstrip("\"'»«”“’)]")
    return stripped.endswith(SENTENCE_END)
