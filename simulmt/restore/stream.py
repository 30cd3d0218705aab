"""The streaming restorer: feed recognizer words one at a time, get them back restored.

Word j comes back (with its case and a comma if one follows it) once word j+lookahead has
been read, decided by the head trained for that lookahead; `finish` decides the last words
with what is left and starts a new stream. The state is one GRU state and the last
`lookahead`+1 word embeddings, so a session can own one over an endless stream.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import torch

from simulmt.restore.labels import Case, Punct, restore_word
from simulmt.restore.model import RestorerNet, load_restorer
from simulmt.smallnet.features import words_features

__all__ = ["Restorer"]


class Restorer:
    """Case and comma restoration over one recognizer word stream."""

    def __init__(self, net: RestorerNet, *, lookahead: int = 2) -> None:
        if not 0 <= lookahead <= net.cfg.max_lookahead:
            raise ValueError(
                f"restore lookahead must be in 0..{net.cfg.max_lookahead}, got {lookahead}"
            )
        self.net = net.eval()
        self.lookahead = lookahead
        self.reset()

    @classmethod
    def load(cls, path: Path, *, lookahead: int = 2) -> Restorer:
        return cls(load_restorer(path)[0], lookahead=lookahead)

    def reset(self) -> None:
        """Forget the stream: the next word starts a new one."""
        self._state: torch.Tensor | None = None  # (1, 1, hidden)
        self._h: torch.Tensor | None = None  # (hidden,) the state after the newest word
        self._pending: deque[tuple[str, torch.Tensor]] = deque()  # (word, embedding (dim,))

    @property
    def pending(self) -> int:
        """Words read but not given back yet (at most `lookahead`)."""
        return len(self._pending)

    def _restore(self, ahead: int) -> str:
        word, x = self._pending.popleft()
        assert self._h is not None
        logits = self.net.decide(ahead, self._h, x)  # (N_CLASSES,)
        nc = len(Case)
        return restore_word(word, Case(int(logits[:nc].argmax())), Punct(int(logits[nc:].argmax())))

    @torch.no_grad()
    def push(self, word: str) -> list[str]:
        """Read one word; returns the restored word that became due (none for the first
        `lookahead` words of a stream)."""
        if not word or any(c.isspace() for c in word):
            raise ValueError(f"a restorer word must be non-empty without whitespace, got {word!r}")
        ids, flags = words_features([word], self.net.cfg.buckets)  # (1, N_IDS), (1, N_FLAGS)
        x = self.net.embed_words(ids[None], flags[None])  # (1, 1, dim)
        h, self._state = self.net.encode(x, self._state)  # (1, 1, hidden)
        self._h = h[0, 0]
        self._pending.append((word, x[0, 0]))
        if len(self._pending) > self.lookahead:
            return [self._restore(self.lookahead)]
        return []

    @torch.no_grad()
    def finish(self) -> list[str]:
        """The stream ended (a sentence's source is complete): restore the words still
        waiting with the lookahead they have, then start a new stream."""
        out = []
        while self._pending:
            out.append(self._restore(len(self._pending) - 1))
        self.reset()
        return out
