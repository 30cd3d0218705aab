"""Where a session's sentences end: the segmentation modes and the length-limit cut.

An endless word stream becomes sentences here, before any model work. Three modes
(`Segmentation`): `punctuation` ends a sentence at a word ending in . ! ?, `client` only at
`flush`, `auto` where an online boundary detector says so (it decides word j once it has read
`lookahead` more words, so word j+1 waits for that decision before the policy may read it).
In every mode a sentence that nears the model's limit is cut at the likeliest boundary among
its last words, so no word is ever dropped: near the limit, new words are *held* (the policy
does not see them yet), and at the limit the cut falls among the held words only; words the
policy has read never move.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from simulmt.input.choice import parse_choice
from simulmt.input.words import ends_sentence

if TYPE_CHECKING:  # no torch at import: clients import `Segmentation` from here
    from simulmt.segment.model import SegmenterNet
    from simulmt.segment.stream import Decision

log = logging.getLogger(__name__)

__all__ = ["BoundaryDetector", "Segmentation", "Sentence", "SentenceCutter", "fallback_cut"]

WEAK_ENDS = (",", ";", ":", "—", "–")  # a cut after these splits a sentence least badly


class Segmentation(enum.Enum):
    """What ends a sentence of the stream (a `flush` always does)."""

    PUNCTUATION = "punctuation"  # a word ending in . ! ? (text with punctuation)
    CLIENT = "client"  # only `flush` (the client knows its sentences)
    AUTO = "auto"  # the boundary detector (speech recognizer output, with or without punctuation)

    @classmethod
    def parse(cls, value: str | Segmentation) -> Segmentation:
        return parse_choice(cls, value, "segmentation")


class BoundaryDetector(Protocol):
    """An online sentence-boundary detector (`simulmt.segment.Segmenter` is one)."""

    lookahead: int

    def push(self, word: str) -> list[Decision]: ...

    def finish(self) -> list[Decision]: ...

    def cut_point(self, words: Sequence[str], *, window: int = 20) -> int: ...


@dataclass
class Sentence:
    id: int
    words: list[str] = field(default_factory=list)
    tokens: int = 0  # subword tokens of its words
    complete: bool = False
    t0: float = 0.0  # when its first word arrived


def fallback_cut(words: Sequence[str], *, window: int) -> int:
    """Without a detector: keep up to the last word among the last `window` that ends a
    sentence or a weak break (WEAK_ENDS), else keep them all (the cut falls at the limit)."""
    for i in range(len(words) - 1, max(0, len(words) - window) - 1, -1):
        if ends_sentence(words[i]) or words[i].endswith(WEAK_ENDS):
            return i + 1
    return len(words)


class SentenceCutter:
    """Turns fed words into `Sentence`s; `sentences[0]` is the one being decoded."""

    def __init__(
        self,
        *,
        mode: Segmentation,
        detector: BoundaryDetector | None,
        cut_net: SegmenterNet | None,
        max_words: int,
        max_tokens: int,
        window: int,
        clock: Callable[[], float],
        warn: Callable[[str], None],
    ) -> None:
        """`detector` decides boundaries in `auto` mode; `cut_net` (or the detector) scores the
        cut of an over-long sentence in any mode. `window`: how many last words the cut may
        choose among (held back from the policy once a sentence is that close to a limit)."""
        if mode is Segmentation.AUTO and detector is None:
            raise ValueError("segmentation auto needs a boundary detector")
        self.mode = mode
        self.detector = detector if mode is Segmentation.AUTO else None
        self._cut_with = detector.cut_point if detector is not None else None
        if self._cut_with is None and cut_net is not None:
            from simulmt.segment.stream import cut_point

            net = cut_net
            self._cut_with = lambda words, *, window=20: cut_point(net, words, window=window)
        self.max_words, self.max_tokens = max_words, max_tokens
        self.window = max(1, min(window, max_words - 1)) if max_words > 1 else 1
        self.clock, self.warn = clock, warn
        self.sentences: list[Sentence] = []
        self.next_id = 0
        self._held: list[tuple[str, int]] = []  # words of the open sentence the policy can't see
        self._pending: deque[tuple[int, str, int]] = deque()  # (index, word, tokens): undecided
        self._pushed = 0  # words given to the detector since its last reset
        self._decided = -1  # words 0.._decided (detector indices) have their decision

    @property
    def waiting(self) -> int:
        """Words received that no sentence holds yet (awaiting a decision or a cut)."""
        return len(self._held) + len(self._pending)

    # ---- input ----
    def add(self, word: str, tokens: int, *, received: str | None = None) -> None:
        """Place `word` (of `tokens` subword tokens); the boundary detector reads it as it was
        `received` when that differs (a recognizer's word before its case was restored: the
        detector was trained on recognizer and written text, not on restored text)."""
        if self.detector is None:
            self._place(word, tokens)
            if self.mode is Segmentation.PUNCTUATION and ends_sentence(word):
                self._close()
            return
        self._pending.append((self._pushed, word, tokens))
        self._pushed += 1
        self._apply(self.detector.push(received if received is not None else word))

    def end(self) -> None:
        """`flush`: the detector decides its last words, and the open sentence ends."""
        if self.detector is not None:
            self._apply(self.detector.finish())
            self._release(self._pushed)
            self._pushed, self._decided = 0, -1
        self._close()

    # ---- auto mode ----
    def _apply(self, decisions: Sequence[Decision]) -> None:
        for d in decisions:
            self._release(d.index)  # the decided word itself is in the sentence now
            if d.boundary:
                self._close()
            self._decided = d.index
        self._release(self._decided + 1)

    def _release(self, upto: int) -> None:
        """Give the sentence every pending word up to detector index `upto`."""
        while self._pending and self._pending[0][0] <= upto:
            _, word, tokens = self._pending.popleft()
            self._place(word, tokens)

    # ---- sentences and the length limit ----
    def _open(self) -> Sentence:
        if not self.sentences or self.sentences[-1].complete:
            self.sentences.append(Sentence(self.next_id, t0=self.clock()))
            self.next_id += 1
        return self.sentences[-1]

    def _place(self, word: str, tokens: int) -> None:
        sent = self._open()
        held_tokens = sum(n for _, n in self._held)
        if (sent.words or self._held) and sent.tokens + held_tokens + tokens > self.max_tokens:
            self._cut(sent)  # the model's positions are finite: cut before this word
            sent = self._open()
            held_tokens = sum(n for _, n in self._held)
        size = len(sent.words) + len(self._held) + 1
        near = size > self.max_words - self.window or (
            sent.tokens + held_tokens + tokens > self.max_tokens - 2 * self.window
        )
        if self._held or (near and sent.words):
            self._held.append((word, tokens))
        else:
            sent.words.append(word)
            sent.tokens += tokens
        if len(sent.words) + len(self._held) >= self.max_words:
            self._cut(sent)

    def _cut(self, sent: Sentence) -> None:
        """End the over-long open sentence at the likeliest boundary among its held words;
        the words after the cut open the next sentence."""
        held, self._held = self._held, []
        keep = len(held)
        if held and self._cut_with is not None:
            words = sent.words + [w for w, _ in held]
            keep = self._cut_with(words, window=len(held)) - len(sent.words)
        elif held:
            keep = fallback_cut([w for w, _ in held], window=len(held))
        keep = min(max(keep, 1), len(held)) if held else 0
        for word, tokens in held[:keep]:
            sent.words.append(word)
            sent.tokens += tokens
        sent.complete = True
        self.warn(
            f"sentence {sent.id} reached the length limit ({len(sent.words)} words, "
            f"{sent.tokens} subword tokens) and was cut at its likeliest boundary"
        )
        for word, tokens in held[keep:]:
            self._place(word, tokens)

    def _close(self) -> None:
        """The open sentence ends here (held words join it: they fit, holding starts early)."""
        if not self.sentences or self.sentences[-1].complete:
            if self._held:  # cannot happen: held words belong to an open sentence
                raise AssertionError("held words without an open sentence")
            return
        sent = self.sentences[-1]
        for word, tokens in self._held:
            sent.words.append(word)
            sent.tokens += tokens
        self._held = []
        sent.complete = True
