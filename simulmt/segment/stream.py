"""The streaming segmenter: feed words one at a time, get boundary decisions back.

A decision on word i (does a sentence end after it?) is made when word i+lookahead arrives,
by the head trained for that lookahead; `finish` decides the last words with what is left.
The state is one encoder state per stream (O(1) per word), so a session can own one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from simulmt.segment.model import SegmenterNet, load_segmenter
from simulmt.smallnet.features import words_features

__all__ = ["Decision", "Segmenter", "cut_point"]


@dataclass(frozen=True)
class Decision:
    index: int  # the word's position in the stream (0-based, since the last reset)
    boundary: bool  # a sentence ends after this word
    probability: float  # P(boundary) from the head that decided
    lookahead: int  # words read after this one when it was decided


def _check_word(word: str) -> None:
    if not word or any(c.isspace() for c in word):
        raise ValueError(f"a segmenter word must be non-empty without whitespace, got {word!r}")


class Segmenter:
    """Online sentence-boundary detector over one word stream."""

    def __init__(
        self, net: SegmenterNet, *, lookahead: int = 2, threshold: float | None = None
    ) -> None:
        """`threshold` overrides the dev-tuned thresholds of every head (higher: fewer,
        surer boundaries)."""
        if not 0 <= lookahead <= net.cfg.max_lookahead:
            raise ValueError(f"lookahead must be in 0..{net.cfg.max_lookahead}, got {lookahead}")
        if threshold is not None and not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {threshold}")
        self.net = net.eval()
        self.lookahead = lookahead
        self.threshold = threshold
        self.reset()

    @classmethod
    def load(cls, path: Path, *, lookahead: int = 2, threshold: float | None = None) -> Segmenter:
        net, _ = load_segmenter(path)
        return cls(net, lookahead=lookahead, threshold=threshold)

    def reset(self) -> None:
        """Forget the stream: the next word is word 0 of a new stream."""
        self._state: torch.Tensor | None = None
        self._count = 0  # words pushed
        self._probs: deque[list[float]] = deque(maxlen=self.lookahead + 1)  # newest last

    @property
    def words_seen(self) -> int:
        return self._count

    def _threshold(self, head: int) -> float:
        return self.threshold if self.threshold is not None else float(self.net.thresholds[head])

    def _decide(self, index: int, head: int, newest: list[float]) -> Decision:
        p = newest[head]
        return Decision(index, p >= self._threshold(head), p, head)

    @torch.no_grad()
    def push(self, word: str) -> list[Decision]:
        """Read one word; returns the decision that became due (none for the first
        `lookahead` words of a stream)."""
        _check_word(word)
        ids, flags = words_features([word], self.net.cfg.buckets)  # (1, N_IDS), (1, N_FLAGS)
        logits, self._state = self.net(ids[None], flags[None], self._state)  # (1, 1, L+1)
        probs = torch.sigmoid(logits[0, 0]).tolist()
        self._probs.append(probs)
        self._count += 1
        due = self._count - 1 - self.lookahead
        return [self._decide(due, self.lookahead, probs)] if due >= 0 else []

    def push_many(self, words: Sequence[str]) -> list[Decision]:
        return [d for w in words for d in self.push(w)]

    def finish(self) -> list[Decision]:
        """The stream ended: decide the undecided last words with the lookahead they have
        (the last word always ends a sentence), then start a new stream. With lookahead 0
        every word was decided by `push` already, and this returns nothing."""
        if not self._probs or self.lookahead == 0:
            self.reset()
            return []
        newest = self._probs[-1]
        first = max(0, self._count - self.lookahead)
        out = [self._decide(i, self._count - 1 - i, newest) for i in range(first, self._count)]
        out[-1] = Decision(self._count - 1, True, 1.0, 0)
        self.reset()
        return out

    def cut_point(self, words: Sequence[str], *, window: int = 20) -> int:
        """See `cut_point`; uses this segmenter's network (its stream state is untouched)."""
        return cut_point(self.net, words, window=window)


@torch.no_grad()
def cut_point(net: SegmenterNet, words: Sequence[str], *, window: int = 20) -> int:
    """Where to cut an over-long sentence: the number of leading `words` to keep, chosen as
    the most likely boundary among the last `window` words (each scored with as much
    lookahead as `words` gives, up to the network's maximum). Earlier words are context."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if not words:
        raise ValueError("cut_point needs at least one word")
    for w in words:
        _check_word(w)
    ids, flags = words_features(words, net.cfg.buckets)  # (N, N_IDS), (N, N_FLAGS)
    logits, _ = net(ids[None], flags[None])  # (1, N, L+1)
    p = torch.sigmoid(logits[0])  # (N, L+1)
    n, top = len(words), net.cfg.max_lookahead
    best, best_p = n - 1, -1.0
    for i in range(max(0, n - window), n):
        head = min(top, n - 1 - i)
        if float(p[i + head, head]) > best_p:  # ties: the earliest word wins
            best, best_p = i, float(p[i + head, head])
    return best + 1
