"""One websocket connection: it moves frames between the socket and a `SessionMachine`.

Every protocol rule lives in the machine (machine.py); this module reads frames into it and
carries out its effects: send, close, hand ops to the model worker, build a session, attach to
a parked one. Two tasks per connection: the reader, and the writer, which sends the outbox in
order. Backpressure, so that a slow reader stalls only its own session and never grows memory
without bound: `send()` waits on the socket's write buffer; while `outbox_high_water`
messages are unsent the worker computes nothing for this session; and the reader takes no new
input while the outbox is full or `max_inflight_words` words still wait for the model.
A connection that drops (1006, 1001) parks its session for a resume.
"""

from __future__ import annotations

import asyncio
import logging

from simulmt.policies.registry import PolicyError
from simulmt.server.config import ServerConfig
from simulmt.server.machine import (
    Attach,
    Build,
    Close,
    Discard,
    Effect,
    Send,
    SessionMachine,
    Submit,
)
from simulmt.server.protocol import ErrorCode, ProtocolError, Start
from simulmt.server.sessions import Hosted, SessionTable
from simulmt.server.worker import Stream, Worker
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from simulmt.engine import Engine
from simulmt.search.options import SearchOptions
from simulmt.sentences import Segmentation
from simulmt.session import Session, SessionLimits

logger = logging.getLogger(__name__)
PARK_CODES = frozenset({CloseCode.ABNORMAL_CLOSURE, CloseCode.GOING_AWAY})  # 1006, 1001


class Connection:
    def __init__(
        self,
        ws: ServerConnection,
        *,
        config: ServerConfig,
        worker: Worker,
        table: SessionTable,
        machine: SessionMachine,
    ) -> None:
        self.ws = ws
        self.config = config
        self.worker = worker
        self.table = table
        self.machine = machine  # replaced by the parked session's machine on a resume
        self.hosted: Hosted | None = None  # the session this connection carries, once started
        self.max_outbox = 0  # high-water mark actually reached (for tests and stats)
        self._outbox: asyncio.Queue[Send | Close] = asyncio.Queue()
        self._room = asyncio.Event()  # set while the reader may take more input
        self._room.set()
        self._paused = False  # the worker holds this session back: its outbox is full
        self._closing = False  # a close is queued or done; input is ignored
        self._detached = False  # a resume moved the session to another connection
        self._writer: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        return self.hosted is not None

    # ---- lifecycle ----
    async def run(self) -> None:
        self._writer = asyncio.create_task(self._write_loop(), name="writer")
        try:
            await self._read_loop()
        finally:
            if not self._writer.done():
                self._writer.cancel()
            self._closing = True
            self._leave()

    def _leave(self) -> None:
        """The socket is gone: park the session for a resume if it dropped, else end it."""
        hosted = self.hosted
        if hosted is None or hosted.owner is not self:
            return
        code = self.ws.close_code
        if self.machine.parkable and code in PARK_CODES:
            self.table.park(hosted)
        else:
            self.table.remove(hosted)

    def begin_shutdown(self) -> None:
        """Graceful stop: finish the open sentence (its final goes out), then close 1001."""
        if not self._detached:
            self.machine.shutdown()
            self.pump()

    async def force_close(self) -> None:
        """Shutdown grace time is over: close now, even under a send stuck on a slow reader."""
        self._closing = True
        self._room.set()
        await self.ws.close(CloseCode.GOING_AWAY, "server shutting down")

    def detach(self) -> None:
        """A resume on another connection took the session: this one just closes."""
        self._detached = True
        self._closing = True
        self._room.set()
        if self._writer is not None:
            self._writer.cancel()
        self._closer = asyncio.create_task(
            self.ws.close(CloseCode.POLICY_VIOLATION, "session resumed on another connection")
        )

    # ---- effects ----
    def pump(self) -> None:
        """Carry out the machine's effects (all but Build/Attach, which only `receive` makes)."""
        if self._detached:
            return
        for effect in self.machine.take():
            self._apply(effect)
        self._flow()

    def _apply(self, effect: Effect) -> None:
        stream = self.hosted.stream if self.hosted is not None else None
        if isinstance(effect, Send):
            self._outbox.put_nowait(effect)
            self.max_outbox = max(self.max_outbox, self._outbox.qsize())
        elif isinstance(effect, Close):
            self._closing = True
            self._outbox.put_nowait(effect)
            self._room.set()  # the reader must not wait for room that will never come
        elif isinstance(effect, Submit) and stream is not None:
            self.worker.submit(stream, effect.op)
        elif isinstance(effect, Discard) and stream is not None:
            self.worker.discard(stream)
        elif isinstance(effect, Build | Attach):
            raise AssertionError(f"{effect} outside receive()")

    def _flow(self) -> None:
        """Backpressure: pause the session's compute while the client is not reading (high
        water; resume at half of it), and read no input while the model has a backlog."""
        queued, high = self._outbox.qsize(), self.config.outbox_high_water
        pause = queued >= high or (self._paused and queued > high // 2)
        stream = self.hosted.stream if self.hosted is not None else None
        if stream is not None and pause != self._paused:
            self._paused = pause
            self.worker.set_paused(stream, pause)
        busy = self.machine.inflight >= self.config.max_inflight_words
        if self._closing or not (pause or busy):
            self._room.set()
        else:
            self._room.clear()

    async def _write_loop(self) -> None:
        try:
            while True:
                item = await self._outbox.get()
                self._flow()
                if isinstance(item, Close):
                    await self.ws.close(item.code, item.reason)
                    return
                await self.ws.send(item.text)
        except ConnectionClosed:
            pass
        finally:
            self._closing = True
            self._room.set()

    # ---- input ----
    async def _read_loop(self) -> None:
        idle = self.config.limits.idle_timeout_s
        while True:
            await self._room.wait()
            try:
                async with asyncio.timeout(idle if not self._closing else None):
                    frame = await self.ws.recv()
            except TimeoutError:
                self.machine.idle()
                self.pump()
                continue
            except ConnectionClosed:
                return
            if self._closing or self._detached:
                continue  # keep draining so that the closing handshake can complete
            self.machine.receive(frame)
            effects = self.machine.take()
            for effect in effects:
                if isinstance(effect, Build):
                    await self._build(effect.start)
                elif isinstance(effect, Attach):
                    self._attach(effect)
                else:
                    self._apply(effect)
            self.pump()

    async def _build(self, start: Start) -> None:
        machine = self.machine
        hosted = self.table.reserve(machine)
        if hosted is None:
            why = f"the server is at its limit of {self.table.max_sessions} sessions"
            machine.start_failed(ProtocolError(ErrorCode.OVERLOADED, why + "; retry later"))
            return
        try:
            session = await self.worker.call(self._session_factory(start))
        except Exception as e:
            self.table.remove(hosted)
            machine.start_failed(_start_error(e, machine.session_id))
            return
        hosted.stream = Stream(session, hosted.deliver)
        hosted.owner = self
        self.hosted = hosted
        machine.started(segmentation=session.segmentation.value)

    def _session_factory(self, start: Start) -> _Factory:
        limits = self.config.limits
        session_limits = SessionLimits(  # the session cuts over-long sentences, never drops
            max_word_chars=limits.max_word_chars,
            max_sentence_words=limits.max_sentence_words,
            cut_window=min(10, max(1, limits.max_sentence_words // 4)),
        )
        return _Factory(start, session_limits, loop_guard=self.config.loop_guard)

    def _attach(self, effect: Attach) -> None:
        try:
            hosted = self.table.claim(effect.resume, self)
        except ProtocolError as e:
            self.machine.start_failed(e)
            return
        self.machine = hosted.machine
        self.hosted = hosted
        if hosted.stream is not None:
            self._paused = False
            self.worker.set_paused(hosted.stream, False)
        self.machine.replay(effect.resume.last_seq)


class _Factory:
    """Builds a session on the worker thread (the engine lives there)."""

    def __init__(self, start: Start, limits: SessionLimits, *, loop_guard: int = 0) -> None:
        self.start, self.limits, self.loop_guard = start, limits, loop_guard

    def __call__(self, engine: Engine) -> Session:
        _check_langs(engine, self.start)
        options = SearchOptions(beam=self.start.beam, loop_guard=self.loop_guard)
        segmentation = self.start.segmentation
        if segmentation is None:  # the server's default: auto when the model can
            segmentation = Segmentation.AUTO if engine.segmenter is not None else None
            if segmentation is None:
                logger.warning(
                    "the model has no boundary detector (segmenter.pt): this session ends "
                    "sentences at punctuation; ask for segmentation 'auto' to get an error instead"
                )
                segmentation = Segmentation.PUNCTUATION
        return Session(
            engine,
            policy=self.start.policy,
            options=options,
            limits=self.limits,
            segmentation=segmentation,
            lookahead=self.start.lookahead if self.start.lookahead is not None else 2,
            drop_fillers=self.start.drop_fillers,
            localise_numbers=self.start.localise_numbers,
            input_kind=self.start.input_kind,
        )


def _start_error(error: Exception, sid: str) -> ProtocolError:
    if isinstance(error, PolicyError):
        return ProtocolError(ErrorCode.BAD_POLICY, str(error))
    if isinstance(error, ValueError):
        return ProtocolError(ErrorCode.BAD_START, str(error))
    logger.error("session %s: could not start", sid, exc_info=error)
    return ProtocolError(ErrorCode.INTERNAL, "the session could not start")


def _check_langs(engine: Engine, start: Start) -> None:
    pairs = (
        ("src_lang", start.src_lang, engine.info.src),
        ("tgt_lang", start.tgt_lang, engine.info.tgt),
    )
    for key, asked, have in pairs:
        if asked is not None and asked != have:
            raise ValueError(f"start.{key} is {asked!r}; this server's model translates {have!r}")
