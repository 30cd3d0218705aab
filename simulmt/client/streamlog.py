"""What a streaming client saw: every message, word timings, and the sentences they make.

Times are milliseconds on the client's clock, from when the stream started. A stream may span
several connections (resumes) and even several sessions (a new one after a server stopped):
sentence ids then restart on the server, and the recorder keys them past the old ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from simulmt.client.subtitles import TimedSentence

JsonDict = dict[str, Any]


@dataclass
class SentenceLog:
    sentence_id: int
    first_word: int  # index (in the whole stream) of the sentence's first source word
    words: list[str] = field(default_factory=list)  # committed target words
    times_ms: list[float] = field(default_factory=list)  # emission time of each, client clock
    delays: list[int] = field(default_factory=list)
    text: str | None = None  # set by `final`
    source: str | None = None
    final_ms: float = 0.0  # when the final arrived


@dataclass
class StreamLog:
    """Everything a streaming run saw."""

    session: JsonDict | None = None
    messages: list[JsonDict] = field(default_factory=list)
    recv_ms: list[float] = field(default_factory=list)  # arrival time of each message
    sent_ms: list[float] = field(default_factory=list)  # send time of each source word
    sentences: dict[int, SentenceLog] = field(default_factory=dict)
    errors: list[JsonDict] = field(default_factory=list)
    close_code: int | None = None
    close_reason: str = ""

    def timed_sentences(self) -> list[TimedSentence]:
        """The `final` texts with each word's emission time, for `subtitles.build_cues`.

        Times come from the partials that committed the words (they are the same words, as
        committed text is never retracted); a word no partial timed gets the final's time."""
        out = []
        for s in sorted(self.sentences.values(), key=lambda s: s.sentence_id):
            words = tuple((s.text or "").split())
            if words:
                times = s.times_ms[: len(words)]
                times += [s.final_ms] * (len(words) - len(times))
                out.append(TimedSentence(words, tuple(times)))
        return out

    def finals(self) -> list[str]:
        return [m["text"] for m in self.messages if m["type"] == "final"]


class Recorder:
    """Folds server messages into a StreamLog; word times = sentence start + `emitted_ms`."""

    def __init__(self, log: StreamLog, clock: Callable[[], float]) -> None:
        self.log = log
        self.clock = clock
        self.words_done = 0  # source words of the sentences finished so far
        self.offset = 0  # added to sentence ids: a new session's ids start after the old ones

    def new_session(self) -> None:
        """The next messages come from a new session, whose sentence ids start at 0 again."""
        self.offset = max(self.log.sentences, default=-1) + 1

    def __call__(self, message: JsonDict) -> None:
        now = self.clock()
        self.log.messages.append(message)
        self.log.recv_ms.append(now)
        kind = message.get("type")
        if kind == "session":
            self.log.session = message
        elif kind == "error":
            self.log.errors.append(message)
        elif kind in ("partial", "final"):
            sid = int(message["sentence_id"]) + self.offset
            sent = self.log.sentences.setdefault(sid, SentenceLog(sid, self.words_done))
            if kind == "partial":
                self._partial(sent, message, now)
            else:
                sent.text, sent.source, sent.final_ms = message["text"], message["source"], now
                self.words_done += len(sent.source.split())

    def _partial(self, sent: SentenceLog, message: JsonDict, now: float) -> None:
        new = message["committed_delta"].split()
        emitted = list(message.get("emitted_ms") or [])
        sent_ms = self.log.sent_ms
        anchor = sent_ms[sent.first_word] if sent.first_word < len(sent_ms) else None
        for i, word in enumerate(new):
            at = anchor + emitted[i] if anchor is not None and i < len(emitted) else now
            sent.words.append(word)
            sent.times_ms.append(min(at, now))  # never later than we saw it
        sent.delays.extend(message.get("delays") or [])


async def paced(words: Iterable[str], rate: float) -> AsyncIterator[str]:
    """Yield words at `rate` words per second (0 = as fast as possible), on a fixed schedule."""
    start = time.monotonic()
    for i, word in enumerate(words):
        if rate > 0:
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        yield word
