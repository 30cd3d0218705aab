"""A `simulmt.v1` client that survives the network: stream words, resume after a drop.

Used by `simulmt client`, the load and soak benchmarks and the tests. The words come from an
async iterator (each item is one `source` message). When the connection drops, the client
reconnects and resumes its session: the server replays what the client missed and says how
many of the client's frames it received, and the client sends the rest again, so no word is
lost or translated twice. When the session cannot be resumed (the server process stopped, the
resume window passed), it starts a new session and sends again the words that have no final.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from urllib.parse import urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from simulmt.client.streamlog import JsonDict, Recorder, SentenceLog, StreamLog, paced
from simulmt.server.config import PROTOCOL

__all__ = ["JsonDict", "Recorder", "SentenceLog", "StartOptions", "StreamClient", "StreamLog"]
__all__ += ["paced", "run_stream", "start_message"]
logger = logging.getLogger(__name__)
NEW_SESSION_CODES = ("shutting_down", "resume_failed", "internal", "idle_timeout")
RETRY_CLOSE = (1001, 1006, 1011, 1012, 1013, 1014)
# Flow control on the client's side: the server reads every frame at once and takes at most
# its max_backlog_words (4096 by default) waiting words, and a few dozen frames a second; so a
# client that pumps text as fast as it can keeps at most this many words without a final, and
# sends what is waiting in one frame (of at most COALESCE_CHARS characters). At speaking rate
# neither ever applies: each text goes out alone, as soon as it comes.
MAX_UNCONFIRMED_WORDS = 1024
# Sessions in a row the server may end with `internal` before this stream has a new final:
# the server fails on something in the stream itself (every new session gets the same words
# again), so starting over would never end.
MAX_FAILED_SESSIONS = 3
COALESCE_CHARS = 16 * 1024


@dataclass(frozen=True)
class StartOptions:
    """What the client asks of its session in the `start` frame, one field each, named as in
    the frame; None leaves a field to the server's default (README, "Protocol")."""

    policy: str | None = None
    beam: int = 1
    segmentation: str | None = None  # "auto", "punctuation" or "client"
    segment_lookahead: int | None = None  # auto segmentation: words read past a boundary
    fillers: str | None = None  # "drop" or "keep"
    numbers: str | None = None  # "localise" or "keep"
    input_kind: str | None = None  # "text" or "recognizer"


def start_message(options: StartOptions) -> JsonDict:
    """The `start` frame of a new session."""
    fields = {k: v for k, v in asdict(options).items() if v is not None}
    return {"type": "start", "protocol": PROTOCOL, **fields}


@dataclass
class Resumable:
    """What the client needs to resume its session, and to send again what was not received."""

    session_id: str
    token: str
    route: str | None
    window_s: float
    last_seq: int = 0
    frames: list[tuple[str, int]] = field(default_factory=list)  # sent after start, + words
    base: int = 0  # frames dropped from the front of `frames` (surely received)
    words_base: int = 0  # source words in those dropped frames
    end_sent: bool = False


class StreamClient:
    """One stream of words, over as many connections (and sessions) as it takes."""

    def __init__(
        self,
        url: str,
        *,
        start: StartOptions = StartOptions(),
        token: str | None = None,
        on_message: Callable[[JsonDict], None] | None = None,
        reconnect: bool = True,
        max_attempts: int = 20,
    ) -> None:
        self.url, self.start, self.token = url, start, token
        self.on_message = on_message
        self.reconnect, self.max_attempts = reconnect, max_attempts
        self.t0 = time.monotonic()
        self.log = StreamLog()
        self.record = Recorder(self.log, self.clock)
        self.words: list[str] = []  # every source word, in order (first sends)
        self.confirmed = 0  # words whose sentence has its final
        self.session: Resumable | None = None
        self.resumes = 0  # successful resumes
        self.sessions = 0  # sessions started
        self.reading = asyncio.Event()  # cleared: the reader stops reading (a slow client)
        self.reading.set()
        self.ws: ClientConnection | None = None
        self._queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=256)
        self._finals = asyncio.Event()  # set by each `final`: the window may have opened
        self._pending: list[str] = []  # texts to send before taking more from the queue
        self._input_done = False  # the iterator is exhausted
        self._resend: list[str] = []
        self._live = False  # this connection has its session
        self._fatal: JsonDict | None = None  # the fatal error of this connection
        self._done = False
        self._failed_sessions = 0  # ended with `internal` in a row, with no final between
        self._confirmed_at_failure = -1  # `confirmed` when the last of them ended
        self._gave_up: str | None = None  # why the stream stops (raised by `run`)

    def clock(self) -> float:
        return (time.monotonic() - self.t0) * 1000

    # ---- fault hooks (soak benchmark, tests) ----
    def drop(self) -> None:
        """Cut the connection abruptly, as a network failure does (the server sees 1006)."""
        if self.ws is not None:
            self.ws.transport.abort()

    async def send_raw(self, frame: str | bytes) -> None:
        """Send a frame outside the word stream (malformed, unknown...): it counts as a frame
        the server receives, so it is logged (and sent again, harmlessly, on a resume)."""
        if self.ws is not None and self.session is not None and self._live:
            self.session.frames.append((frame if isinstance(frame, str) else "", 0))
            try:
                await self.ws.send(frame)
            except ConnectionClosed:
                pass

    # ---- the stream ----
    async def run(self, texts: AsyncIterator[str]) -> StreamLog:
        producer = asyncio.create_task(self._produce(texts))
        try:
            await self._connections()
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
        return self.log

    async def _produce(self, texts: AsyncIterator[str]) -> None:
        """The words, paced by their iterator and independent of any connection (a sender
        cancelled by a drop must not close the iterator)."""
        async for text in texts:
            await self._queue.put(text)
        await self._queue.put(None)

    async def _connections(self) -> None:
        failures = 0
        while not self._done:
            resuming = self.session is not None
            try:
                await self._connection()
            except (OSError, InvalidHandshake, TimeoutError) as e:
                if not (self.reconnect and self.sessions):
                    raise
                logger.info("reconnect failed (%s); retrying", e)
                if resuming and failures >= 3:
                    self._abandon()  # its process is gone: a new session elsewhere
            if self._gave_up is not None:
                raise ConnectionError(self._gave_up)
            failures = 0 if self._live else failures + 1
            if failures > self.max_attempts:
                raise ConnectionError(f"no session after {failures} attempts")
            if not self._done:
                await asyncio.sleep(min(0.05 * 2**failures, 2.0))

    def _url(self) -> str:
        if self.session is None or self.session.route is None:
            return self.url
        parts = urlsplit(self.url)
        route = urlencode({"route": self.session.route})
        return urlunsplit(parts._replace(query=f"{parts.query}&{route}".lstrip("&")))

    async def _connection(self) -> None:
        self._live, self._fatal, self._resend = False, None, []
        async with connect(self._url(), open_timeout=30) as ws:
            self.ws = ws
            start = start_message(self.start)
            if self.token:  # in the first frame, not the URL (proxies log URLs)
                start["token"] = self.token
            if self.session is not None:
                s = self.session
                start["resume"] = {"session_id": s.session_id, "token": s.token,
                                   "last_seq": s.last_seq}  # fmt: skip
            await ws.send(json.dumps(start))
            ready = asyncio.Event()
            reader = asyncio.create_task(self._read(ws, ready))
            sender = asyncio.create_task(self._send(ws, ready))
            done, _ = await asyncio.wait({reader, sender}, return_when=asyncio.FIRST_COMPLETED)
            if sender in done and sender.exception() is None:
                await reader  # the server sends `end` and closes
            else:
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
                await reader
        self.ws = None
        self._after_close(ws)

    def _after_close(self, ws: ClientConnection) -> None:
        code, fatal = ws.close_code, self._fatal
        self.log.close_code, self.log.close_reason = code, ws.close_reason or ""
        if code == 1000 or not self.reconnect:
            self._done = True
        elif (fatal is not None and fatal.get("code") in NEW_SESSION_CODES) or code == 1013:
            if fatal is not None and fatal.get("code") == "internal" and self._failing(fatal):
                self._done = True
                return
            self._abandon()
        elif fatal is not None or code not in RETRY_CLOSE or self.session is None:
            self._done = True  # refused for a reason a retry will not change

    def _failing(self, fatal: JsonDict) -> bool:
        """Count a session the server ended with `internal`; True once MAX_FAILED_SESSIONS
        ended so in a row with no new final between them (the stream then stops)."""
        if self.confirmed != self._confirmed_at_failure:
            self._failed_sessions = 0  # progress since the last failure: a fresh count
        self._confirmed_at_failure = self.confirmed
        self._failed_sessions += 1
        if self._failed_sessions < MAX_FAILED_SESSIONS:
            return False
        self._gave_up = (
            f"the server ended {self._failed_sessions} sessions of this stream in a row with "
            f"an internal error and no new final between them (last: "
            f"{fatal.get('message', '')!r}); not starting another"
        )
        logger.error("%s", self._gave_up)
        return True

    def _abandon(self) -> None:
        """Start over in a new session: the words without a final are sent again."""
        self.session = None
        rest = self.words[self.confirmed :]
        self._pending = [" ".join(rest)] if rest else []

    async def _read(self, ws: ClientConnection, ready: asyncio.Event) -> None:
        try:
            while True:
                await self.reading.wait()
                self._on_message(json.loads(await ws.recv()), ready)
        except ConnectionClosed:
            pass
        finally:
            ready.set()  # a sender waiting for the session must not wait forever

    def _on_message(self, message: JsonDict, ready: asyncio.Event) -> None:
        kind, seq, s = message.get("type"), int(message.get("seq", 0)), self.session
        if kind == "error" and message.get("fatal"):
            self._fatal = message
        if kind == "session":
            self._on_session(message)
            self._live = True
            ready.set()
        elif s is not None and seq <= s.last_seq and kind != "error":
            return  # seen before the drop
        if self.session is not None and (kind != "error" or seq > self.session.last_seq):
            self.session.last_seq = seq
        self.record(message)
        if kind == "final":
            self.confirmed += len(str(message.get("source", "")).split())
            self._finals.set()
            self._trim()
        if self.on_message is not None:
            self.on_message(message)

    def _on_session(self, message: JsonDict) -> None:
        resumed = message.get("resumed")
        if resumed is None:
            if self.sessions:
                self.record.new_session()
            self.sessions += 1
            resume = message.get("resume") or {}
            self.session = Resumable(
                session_id=str(message["session_id"]),
                token=str(resume.get("token", "")),
                route=resume.get("route"),
                window_s=float(resume.get("window_s", 0)),
            )
            return
        assert self.session is not None
        self.resumes += 1
        s = self.session
        again = s.frames[max(0, int(resumed["received"]) - s.base) :]
        self._resend = [frame for frame, _ in again if frame]

    def _trim(self) -> None:
        """Forget frames the server surely received: those up to the last one whose words all
        have finals (frames arrive in order)."""
        s = self.session
        if s is None:
            return
        end, last = s.words_base, -1
        for i, (_, n) in enumerate(s.frames):
            end += n
            if n and end <= self.confirmed:
                last = i
        if last >= 0:
            s.words_base += sum(n for _, n in s.frames[: last + 1])
            s.base += last + 1
            del s.frames[: last + 1]

    async def _send(self, ws: ClientConnection, ready: asyncio.Event) -> None:
        await ready.wait()
        s = self.session
        if not self._live or s is None:
            return  # refused: the reader sees the close
        try:
            for frame in self._resend:
                await ws.send(frame)
            while self._pending:  # logged before it goes out: a resume sends it again
                await self._send_text(ws, s, self._pending.pop(0), first=False)
            while not self._input_done:
                await self._window()  # before taking: a drop must not lose what was taken
                text = await self._queue.get()
                if text is None:
                    self._input_done = True
                else:
                    await self._send_text(ws, s, self._coalesce(text), first=True)
            if not s.end_sent:
                end = json.dumps({"type": "end"})
                s.frames.append((end, 0))
                s.end_sent = True
                await ws.send(end)
        except ConnectionClosed:
            pass

    async def _window(self) -> None:
        """Wait while MAX_UNCONFIRMED_WORDS words have no final yet."""
        while len(self.words) - self.confirmed >= MAX_UNCONFIRMED_WORDS:
            self._finals.clear()
            await self._finals.wait()

    def _coalesce(self, text: str) -> str:
        """`text` and the texts already waiting behind it, as one frame."""
        texts, size = [text], len(text)
        while size < COALESCE_CHARS and not self._queue.empty():
            more = self._queue.get_nowait()
            if more is None:
                self._input_done = True
                break
            texts.append(more)
            size += len(more) + 1
        return " ".join(texts)

    async def _send_text(
        self, ws: ClientConnection, s: Resumable, text: str, *, first: bool
    ) -> None:
        words = text.split()
        if first:
            self.words += words
            self.log.sent_ms += [self.clock()] * len(words)
        frame = json.dumps({"type": "source", "text": text}, ensure_ascii=False)
        s.frames.append((frame, len(words)))
        await ws.send(frame)


async def run_stream(
    url: str,
    words: AsyncIterator[str],
    *,
    start: StartOptions = StartOptions(),
    token: str | None = None,
    on_message: Callable[[JsonDict], None] | None = None,
    reconnect: bool = True,
) -> StreamLog:
    """Connect, `start`, send each item as a `source` message, `end`, and collect everything;
    resume (or start over) when the connection drops."""
    client = StreamClient(
        url,
        start=start,
        token=token,
        on_message=on_message,
        reconnect=reconnect,
    )
    return await client.run(words)
