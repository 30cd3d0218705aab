"""Word <-> subword bookkeeping shared by training, search and sessions.

A READ consumes one source *word* (all of its subword tokens). `word_ends[w]` is the number of
source tokens once words 0..w have been read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def ends_sentence(word: str) -> bool:
    """A word that closes a sentence: final punctuation, perhaps followed by quotes/brackets."""
    stripped = word.rstrip("\"'»«”“’)]")
    return stripped.endswith(SENTENCE_END)
