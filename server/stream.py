"""A `simulmt.v1` client core: stream words at a speech-like rate, collect what comes back.

Used by `simulmt client`, the load benchmark and the tests. Times are milliseconds on the
client's clock, from when the connection opened.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from simulmt.server.config import PROTOCOL
from simulmt.server.subtitles import TimedSentence
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

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
            sid = int(message["sentence_id"])
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


def start_message(policy: str | None, beam: int) -> JsonDict:
    msg: JsonDict = {"type": "start", "protocol": PROTOCOL, "beam": beam}
    if policy is not None:
        msg["policy"] = policy
    return msg


async def run_stream(
    url: str,
    words: AsyncIterator[str],
    *,
    policy: str | None = None,
    beam: int = 1,
    token: str | None = None,
    on_message: Callable[[JsonDict], None] | None = None,
) -> StreamLog:
    """Connect, `start`, send each word as a `source` message, `end`, and collect everything."""
    t0 = time.monotonic()

    def clock() -> float:
        return (time.monotonic() - t0) * 1000

    log = StreamLog()
    record = Recorder(log, clock)
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with connect(url, additional_headers=headers, open_timeout=30) as ws:
        await ws.send(json.dumps(start_message(policy, beam)))
        reader = asyncio.create_task(_read(ws, record, on_message))
        sender = asyncio.create_task(_send(ws, words, log, clock))
        done, _ = await asyncio.wait({reader, sender}, return_when=asyncio.FIRST_COMPLETED)
        if sender in done and sender.exception() is None:
            await reader  # the server sends `end` and closes
        else:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            await reader
    log.close_code = ws.close_code
    log.close_reason = ws.close_reason or ""
    return log


async def _send(
    ws: ClientConnection, words: AsyncIterator[str], log: StreamLog, clock: Callable[[], float]
) -> None:
    try:
        async for word in words:
            log.sent_ms.append(clock())
            await ws.send(json.dumps({"type": "source", "text": word}))
        await ws.send(json.dumps({"type": "end"}))
    except ConnectionClosed:
        pass


async def _read(
    ws: ClientConnection,
    record: Recorder,
    on_message: Callable[[JsonDict], None] | None,
) -> None:
    try:
        async for frame in ws:
            message = json.loads(frame)
            record(message)
            if on_message is not None:
                on_message(message)
    except ConnectionClosed:
        pass
