"""One websocket connection = one session: read client frames, write server messages in `seq` order.

Two tasks per connection: the reader parses frames and hands work to the model worker; the
writer sends the outbox in order, numbering messages with `seq`. A fatal error puts an `error`
message and then a close into the outbox, so the client always learns why before the close.
Backpressure, so that a slow reader stalls only its own session and never grows memory without
bound: `send()` waits on the socket's write buffer; while `outbox_high_water` messages are
unsent the worker computes nothing for this session; and the reader takes no new input while
the outbox is full or `max_inflight_words` words still wait for the model.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass

from simulmt.policies.registry import PolicyError
from simulmt.server.config import ServerConfig
from simulmt.server.protocol import (
    End,
    ErrorCode,
    Flush,
    JsonDict,
    Ping,
    ProtocolError,
    SentenceCounter,
    Source,
    Start,
    encode,
    end_message,
    error_message,
    parse_client_message,
    session_message,
    update_messages,
)
from simulmt.server.worker import Delivery, Op, OpKind, Stream, Worker
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from simulmt.engine import Engine
from simulmt.search.options import SearchOptions
from simulmt.session import Session, SessionLimits, max_source_tokens

logger = logging.getLogger(__name__)


class State(enum.Enum):
    AWAITING_START = "awaiting_start"
    STREAMING = "streaming"
    ENDING = "ending"  # the client sent `end`; finishing the last sentence
    CLOSING = "closing"  # a close is queued or done; input is ignored


class Marker(enum.Enum):
    END = "end"  # the client's `end` has been processed
    SHUTDOWN = "shutdown"  # the server's graceful stop has been processed


@dataclass(frozen=True)
class Close:
    code: int
    reason: str


class Connection:
    def __init__(
        self, ws: ServerConnection, *, config: ServerConfig, worker: Worker, model: str, sid: str
    ) -> None:
        self.ws = ws
        self.config = config
        self.worker = worker
        self.model = model
        self.session_id = sid
        self.state = State.AWAITING_START
        self.seq = 0  # seq of the last message sent
        self.sentences = 0  # finals sent
        self.max_outbox = 0  # high-water mark actually reached (for tests and stats)
        self.words_in = 0  # source words handed to the worker
        self.stream: Stream | None = None
        self._committed: dict[int, int] = {}  # sentence_id -> committed words sent so far
        self._last_final = -1  # sentences are finished in order: ids <= this one are done
        self._outbox: asyncio.Queue[JsonDict | Close] = asyncio.Queue()
        self._room = asyncio.Event()  # set while the reader may take more input
        self._room.set()
        self._inflight = 0  # words handed to the worker that it has not taken yet
        self._paused = False  # the worker holds this session back: its outbox is full
        self._shutting_down = False

    # ---- lifecycle ----
    async def run(self) -> None:
        writer = asyncio.create_task(self._write_loop(), name=f"writer-{self.session_id}")
        try:
            await self._read_loop()
        finally:
            if not writer.done():
                writer.cancel()
            if self.stream is not None:
                self.worker.discard(self.stream)
            self.state = State.CLOSING

    def begin_shutdown(self) -> None:
        """Graceful stop: finish the open sentence (its final goes out), then close 1001."""
        if self._shutting_down or self.state is State.CLOSING:
            return
        self._shutting_down = True
        if self.stream is None:
            self._close(CloseCode.GOING_AWAY, "server shutting down")
        else:
            self.worker.submit(self.stream, Op(OpKind.END_SOURCE, marker=Marker.SHUTDOWN))

    async def force_close(self) -> None:
        """Shutdown grace time is over: close now, even under a send stuck on a slow reader."""
        self.state = State.CLOSING
        self._room.set()
        await self.ws.close(CloseCode.GOING_AWAY, "server shutting down")

    # ---- outbox ----
    def _send(self, message: JsonDict) -> None:
        self._outbox.put_nowait(message)
        self.max_outbox = max(self.max_outbox, self._outbox.qsize())
        self._flow()

    def _flow(self) -> None:
        """Backpressure: pause the session's compute while the client is not reading (high
        water; resume at half of it), and read no input while the model has a backlog."""
        queued, high = self._outbox.qsize(), self.config.outbox_high_water
        pause = queued >= high or (self._paused and queued > high // 2)
        if self.stream is not None and pause != self._paused:
            self._paused = pause
            self.worker.set_paused(self.stream, pause)
        busy = self._inflight >= self.config.max_inflight_words
        if self.state is State.CLOSING or not (pause or busy):
            self._room.set()
        else:
            self._room.clear()

    def _close(self, code: int, reason: str) -> None:
        if self.state is not State.CLOSING:
            self.state = State.CLOSING
            self._outbox.put_nowait(Close(code, reason))
            self._room.set()  # the reader must not wait for room that will never come

    def _error(self, code: ErrorCode, message: str) -> None:
        if self.state is State.CLOSING:
            return
        logger.info("session %s: %s: %s", self.session_id, code.value, message)
        self._send(error_message(code, message))
        if code.close_code is not None:
            if self.stream is not None:
                self.worker.discard(self.stream)
            self._close(code.close_code, code.value)

    async def _write_loop(self) -> None:
        try:
            while True:
                item = await self._outbox.get()
                self._flow()
                if isinstance(item, Close):
                    await self.ws.close(item.code, item.reason)
                    return
                self.seq += 1
                await self.ws.send(encode(item, self.seq))
        except ConnectionClosed:
            pass
        finally:
            self.state = State.CLOSING
            self._room.set()

    # ---- input ----
    async def _read_loop(self) -> None:
        idle = self.config.limits.idle_timeout_s
        while True:
            await self._room.wait()
            try:
                async with asyncio.timeout(idle if self.state is not State.CLOSING else None):
                    frame = await self.ws.recv()
            except TimeoutError:
                self._error(ErrorCode.IDLE_TIMEOUT, f"no message for {idle:g} s; closing")
                continue
            except ConnectionClosed:
                return
            if self.state is State.CLOSING or self._shutting_down:
                continue  # keep draining so that the closing handshake can complete
            await self._handle(frame)

    async def _handle(self, frame: str | bytes) -> None:
        if self.state is State.ENDING:
            self._error(ErrorCode.AFTER_END, "the session has ended; this message was ignored")
            return
        try:
            message = parse_client_message(
                frame,
                limits=self.config.limits,
                default_policy=self.config.default_policy,
                max_beam=self.config.max_beam,
            )
            if isinstance(message, Start):
                await self._start(message)
            elif self.state is State.AWAITING_START:
                raise ProtocolError(ErrorCode.NOT_STARTED, 'the first message must be "start"')
            else:
                self._stream_input(message)
        except ProtocolError as e:
            self._error(e.code, e.message)

    def _stream_input(self, message: Source | Flush | End | Ping) -> None:
        assert self.stream is not None
        if isinstance(message, Source):
            if message.words:
                self.words_in += len(message.words)
                self._inflight += len(message.words)
                self.worker.submit(self.stream, Op(OpKind.FEED, words=message.words))
                self._flow()
        elif isinstance(message, Flush):
            self.worker.submit(self.stream, Op(OpKind.END_SOURCE))
        elif isinstance(message, End):
            self.state = State.ENDING
            self.worker.submit(self.stream, Op(OpKind.END_SOURCE, marker=Marker.END))
        # Ping: the frame itself reset the idle timer; nothing to answer

    async def _start(self, start: Start) -> None:
        if self.state is not State.AWAITING_START:
            raise ProtocolError(ErrorCode.ALREADY_STARTED, "this session has already started")

        limits = self.config.limits

        def build(engine: Engine) -> tuple[Session, SentenceCounter]:
            _check_langs(engine, start)
            options = SearchOptions(beam=start.beam)
            session_limits = SessionLimits(  # ours are checked first; the session never cuts
                max_word_chars=limits.max_word_chars,
                max_sentence_words=limits.max_sentence_words + 1,
            )
            session = Session(engine, policy=start.policy, options=options, limits=session_limits)
            counter = SentenceCounter(
                max_words=limits.max_sentence_words,
                max_tokens=max_source_tokens(engine, options),
            )
            return session, counter

        try:
            session, counter = await self.worker.call(build)
        except PolicyError as e:
            raise ProtocolError(ErrorCode.BAD_POLICY, str(e)) from None
        except ValueError as e:
            raise ProtocolError(ErrorCode.BAD_START, str(e)) from None
        except Exception:
            logger.exception("session %s: could not start", self.session_id)
            raise ProtocolError(ErrorCode.INTERNAL, "the session could not start") from None
        if self.state is not State.AWAITING_START:
            return  # closed while the session was being built
        self.stream = Stream(session, counter, self._on_delivery)
        self.state = State.STREAMING
        self._send(session_message(self.session_id, self.model, self.config.limits))

    # ---- output (called on the event loop by the worker) ----
    def _on_delivery(self, delivery: Delivery) -> None:
        if self.state is State.CLOSING:
            return
        self._inflight -= delivery.words_taken
        self._flow()
        for rejected in delivery.rejected:
            self._error(rejected.code, rejected.message)
        if delivery.error is not None:
            self._error(ErrorCode.INTERNAL, "translation failed; the session cannot go on")
            return
        for update in delivery.updates:
            if update.sentence_id <= self._last_final:
                logger.warning("session %s: update after final dropped", self.session_id)
                continue
            before = self._committed.get(update.sentence_id, 0)
            if update.committed_len - len(update.delays) != before:  # words went missing
                logger.error("session %s: committed words lost in a failure", self.session_id)
                self._error(ErrorCode.INTERNAL, "translation failed; the session cannot go on")
                return
            self._committed[update.sentence_id] = update.committed_len
            for message in update_messages(update):
                self._send(message)
            if update.final:
                self.sentences += 1
                self._last_final = update.sentence_id
                self._committed.pop(update.sentence_id, None)
        for marker in delivery.markers:
            if marker is Marker.END:
                self._send(end_message(self.sentences))
                self._close(CloseCode.NORMAL_CLOSURE, "end")
            elif marker is Marker.SHUTDOWN:
                self._close(CloseCode.GOING_AWAY, "server shutting down")


def _check_langs(engine: Engine, start: Start) -> None:
    pairs = (
        ("src_lang", start.src_lang, engine.info.src),
        ("tgt_lang", start.tgt_lang, engine.info.tgt),
    )
    for key, asked, have in pairs:
        if asked is not None and asked != have:
            raise ValueError(f"start.{key} is {asked!r}; this server's model translates {have!r}")
