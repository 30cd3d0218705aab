"""One websocket connection: it moves frames between the socket and a `SessionMachine`.

Every protocol rule lives in the machine (machine.py); this module reads frames into it and
carries out its effects: send, close, hand ops to the model worker, build a session, attach to
a parked one. Two tasks per connection: the reader, and the writer, which sends the outbox in
order. The reader never stops reading, so pings, `flush` and `end` are always answered and the
idle timer always runs; what bounds memory is the rate limit on frames and bytes, the
machine's `max_backlog_words`, and the outbox: `send()` waits on the socket's write buffer and
while `outbox_high_water` messages are unsent the worker computes nothing for this session. A
client that reads none of its output for `drain_timeout_s` is closed with 1008.
A connection the network dropped (1006, 1001) parks its session for a resume; one this server
closed (1007, 1008, 1009, 1011, a protocol error) ends it.
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
    Phase,
    Send,
    SessionMachine,
    Submit,
)
from simulmt.server.protocol import ErrorCode, ProtocolError, Start
from simulmt.server.ratelimit import RateLimiter
from simulmt.server.sessions import Hosted, SessionTable
from simulmt.server.worker import Stream, Worker
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from simulmt.defaults import SEGMENT_LOOKAHEAD
from simulmt.engine import Engine
from simulmt.input.sentences import Segmentation
from simulmt.search.options import PrematureStops, SearchOptions
from simulmt.session import Session, SessionLimits

logger = logging.getLogger(__name__)
PARK_CODES = frozenset({CloseCode.ABNORMAL_CLOSURE, CloseCode.GOING_AWAY})  # 1006, 1001
KEEPALIVE_TIMEOUT = "keepalive ping timeout"  # websockets' reason: the peer missed a pong
CLOSE_TIMEOUT_S = 5.0  # a close waits this long for the client, then the socket is aborted


def dropped_by_network(ws: ServerConnection) -> bool:
    """True when the network lost the connection (the session is parked for a resume); False
    when this server closed it itself (1007 bad UTF-8, 1008, 1009, 1011, a protocol error),
    except for a keepalive timeout, which is the network's failure, or the client closed it
    with a code other than 1001."""
    protocol = ws.protocol
    sent = protocol.close_sent
    by_server = sent is not None and protocol.close_rcvd_then_sent is not True
    if by_server and sent is not None and sent.reason != KEEPALIVE_TIMEOUT:
        return False
    return ws.close_code in PARK_CODES


class Connection:
    def __init__(
        self,
        ws: ServerConnection,
        *,
        config: ServerConfig,
        worker: Worker,
        table: SessionTable,
        machine: SessionMachine,
        address: str = "",
    ) -> None:
        self.ws = ws
        self.address = address  # the client's address (X-Forwarded-For from a trusted proxy)
        self.limiter = RateLimiter(config.admission)
        self.config = config
        self.worker = worker
        self.table = table
        self.machine = machine  # replaced by the parked session's machine on a resume
        self.hosted: Hosted | None = None  # the session this connection carries, once started
        self.max_outbox = 0  # high-water mark actually reached (for tests and stats)
        self._outbox: asyncio.Queue[Send | Close] = asyncio.Queue()
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
        if self.machine.parkable and dropped_by_network(self.ws):
            self.table.park(hosted)
        else:
            logger.debug(
                "session %s ended: closed %s %s",
                self.machine.session_id, self.ws.close_code, self.ws.close_reason,
            )  # fmt: skip
            self.table.remove(hosted)

    def begin_shutdown(self) -> None:
        """Graceful stop: finish the open sentence (its final goes out), then close 1001."""
        if not self._detached:
            self.machine.shutdown()
            self.pump()

    def abort(self) -> None:
        """Shutdown grace time is over: drop the socket now, without waiting on its buffers."""
        self._closing = True
        self.ws.transport.abort()

    async def close(self, code: int, reason: str) -> None:
        """Close, but never wait on a client that reads nothing: abort after CLOSE_TIMEOUT_S."""
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self.ws.close(code, reason)
        except TimeoutError:
            self.ws.transport.abort()

    def detach(self) -> None:
        """A resume on another connection took the session: this one just closes."""
        self._detached = True
        self._closing = True
        if self._writer is not None:
            self._writer.cancel()
        self._closer = asyncio.create_task(
            self.close(CloseCode.POLICY_VIOLATION, "session resumed on another connection")
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
        elif isinstance(effect, Submit) and stream is not None:
            self.worker.submit(stream, effect.op)
        elif isinstance(effect, Discard) and stream is not None:
            self.worker.discard(stream)
        elif isinstance(effect, Build | Attach):
            raise AssertionError(f"{effect} outside receive()")

    def _flow(self) -> None:
        """Backpressure: pause the session's compute while the client is not reading (high
        water; resume at half of it)."""
        queued, high = self._outbox.qsize(), self.config.outbox_high_water
        pause = queued >= high or (self._paused and queued > high // 2)
        stream = self.hosted.stream if self.hosted is not None else None
        if stream is not None and pause != self._paused:
            self._paused = pause
            self.worker.set_paused(stream, pause)

    async def _write_loop(self) -> None:
        drain = self.config.drain_timeout_s
        try:
            while True:
                item = await self._outbox.get()
                self._flow()
                if isinstance(item, Close):
                    await self.close(item.code, item.reason)
                    return
                try:
                    async with asyncio.timeout(drain):  # send() waits while the buffer is full
                        await self.ws.send(item.text)
                except TimeoutError:
                    logger.info(
                        "session %s: the client read none of its output for %g s; closing 1008",
                        self.machine.session_id, drain,
                    )  # fmt: skip
                    await self.close(CloseCode.POLICY_VIOLATION, f"output not read for {drain:g} s")
                    return
        except ConnectionClosed:
            pass
        finally:
            self._closing = True

    # ---- input ----
    def _read_timeout(self) -> float | None:
        if self._closing:
            return None  # the close has its own timeout
        if self.machine.phase is Phase.AWAITING_START:
            return self.config.admission.handshake_timeout_s
        return self.config.limits.idle_timeout_s

    def _timed_out(self) -> None:
        """No frame for the read timeout: close, unless words sent are still being translated
        (a client waiting for its backlog is not idle)."""
        if self.machine.inflight > 0 and self.machine.phase is not Phase.AWAITING_START:
            return
        self.machine.idle()
        self.pump()

    async def _read_loop(self) -> None:
        while True:  # never waits for room: control frames are always read and answered
            try:
                async with asyncio.timeout(self._read_timeout()):
                    frame = await self.ws.recv()
            except TimeoutError:
                self._timed_out()
                continue
            except ConnectionClosed:
                return
            if self._closing or self._detached:
                continue  # keep draining so that the closing handshake can complete
            flood = self.limiter.allow(_size(frame))
            if flood is not None:
                self.machine.rate_limited(flood)
                self.pump()
                continue
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
        per_address = self.config.admission.max_sessions_per_ip
        if self.table.sessions_from(self.address) >= per_address:
            why = f"this address has its limit of {per_address} sessions (parked ones count)"
            machine.start_failed(ProtocolError(ErrorCode.OVERLOADED, why + "; retry later"))
            return
        hosted = self.table.reserve(machine)
        if hosted is None:
            why = f"the server is at its limit of {self.table.max_sessions} sessions"
            machine.start_failed(ProtocolError(ErrorCode.OVERLOADED, why + "; retry later"))
            return
        hosted.address = self.address
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
            max_sentence_words=limits.live_max_sentence_words,
            cut_window=min(10, max(1, limits.live_max_sentence_words // 4)),
        )
        return _Factory(start, session_limits, loop_guard=self.config.loop_guard,
                        premature_stops=self.config.premature_stops,
                        copy_bonus=self.config.copy_bonus,
                        tentative_hold_ms=self.config.tentative_hold_ms)

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


def _size(frame: str | bytes) -> int:
    return len(frame) if isinstance(frame, bytes) else len(frame.encode("utf-8", "surrogatepass"))


class _Factory:
    """Builds a session on the worker thread (the engine lives there)."""

    def __init__(self, start: Start, limits: SessionLimits, *,
                 loop_guard: int = SearchOptions.loop_guard,
                 premature_stops: PrematureStops = SearchOptions.premature_stops,
                 copy_bonus: float = SearchOptions.copy_bonus,
                 tentative_hold_ms: float = 0.0) -> None:
        self.start, self.limits, self.loop_guard = start, limits, loop_guard
        self.premature_stops, self.copy_bonus = premature_stops, copy_bonus
        self.tentative_hold_ms = tentative_hold_ms

    def __call__(self, engine: Engine) -> Session:
        _check_langs(engine, self.start)
        options = SearchOptions(beam=self.start.beam, loop_guard=self.loop_guard,
                                premature_stops=self.premature_stops,
                                copy_bonus=self.copy_bonus)
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
            segment_lookahead=(
                SEGMENT_LOOKAHEAD
                if self.start.segment_lookahead is None
                else self.start.segment_lookahead
            ),
            drop_fillers=self.start.drop_fillers,
            localise_numbers=self.start.localise_numbers,
            input_kind=self.start.input_kind,
            tentative_hold_ms=self.tentative_hold_ms,
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
