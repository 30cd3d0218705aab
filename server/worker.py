"""The model worker: one thread owns the engine and every Session; the event loop never computes.

Connections hand it operations (`feed` words, `end_source`) for their stream. The thread
takes all streams with pending operations (up to `max_batch`), applies the operations, and
advances those sessions together with one batched `advance` call (cross-session batching),
then posts each stream's updates back to the event loop with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import torch
from simulmt.server.ops import Delivery, Marker, Op, OpKind
from simulmt.server.protocol import ErrorCode, ProtocolError

from simulmt.engine import Engine
from simulmt.model.devices import use_device
from simulmt.output.updates import Update
from simulmt.session import InputError, Session, advance, check_words

logger = logging.getLogger(__name__)
T = TypeVar("T")
LOAD_POLL_S = 0.05  # how often `wait_loaded` looks whether the model has loaded


@dataclass
class Stream:
    """A connection's handle on its session; only the worker thread touches `session`."""

    session: Session
    deliver: Callable[[Delivery], None]  # called on the event loop
    ops: list[Op] = field(default_factory=list)  # guarded by the worker's lock
    held: list[Marker] = field(default_factory=list)  # markers waiting for the session to finish
    paused: bool = False  # its reader is slow: take none of its ops (guarded by the lock)
    failures: int = 0  # batched turns in a row that failed with this session in them


@dataclass
class WorkerStats:
    batches: int = 0
    sessions_advanced: int = 0  # sum of batch sizes
    busy_s: float = 0.0  # time spent in advance()
    max_batch: int = 0  # the most sessions advanced together so far
    failed_batches: int = 0  # batched calls that raised (their sessions were retried alone)

    @property
    def mean_batch(self) -> float:
        return self.sessions_advanced / self.batches if self.batches else 0.0


class Worker:
    def __init__(
        self,
        load: Callable[[], Engine],
        *,
        max_batch: int,
        words_per_turn: int = 32,
        steps_per_turn: int = 1,
        batch_window_s: float = 0.0,
        step_retries: int = 2,
        on_batch: Callable[[int, float, bool], None] | None = None,
    ) -> None:
        """`step_retries`: how many failed batched turns in a row a session is retried alone
        after, before it ends with an error. `on_batch(size, seconds, failed)`: called on the
        worker thread after each batched turn (metrics)."""
        self.step_retries = step_retries
        self.on_batch = on_batch
        self.turn_since: float | None = None  # monotonic start of the turn running, if any
        self.batch_window_s = batch_window_s
        self._load = load
        self.max_batch = max_batch
        self.steps_per_turn = steps_per_turn  # decoder steps per turn before updates go out
        self.words_per_turn = words_per_turn  # a long paste is fed in slices: turns stay short
        self.engine: Engine | None = None
        self.load_error: BaseException | None = None
        self.stats = WorkerStats()
        self._cond = threading.Condition()
        self._pending: dict[int, Stream] = {}  # id(stream) -> stream, FIFO by first submit
        self._calls: list[Callable[[Engine], None]] = []
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._loaded = threading.Event()
        self._continuing: set[int] = set()  # streams given back mid-work by the last turn
        # torch's thread count is an OpenMP setting of the thread that sets it: a new thread
        # starts with OpenMP's default (all cores), so the worker applies the caller's setting
        self._torch_threads = torch.get_num_threads()

    # ---- event-loop side ----
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._main, name="simulmt-worker", daemon=True)
        self._thread.start()

    async def wait_loaded(self) -> Engine:
        """Wait for the model; raise what loading raised. Polls rather than blocking a helper
        thread: a load that never ends would leave that thread waiting, and the process
        could not exit to be restarted."""
        while not self._loaded.is_set():
            await asyncio.sleep(LOAD_POLL_S)
        if self.load_error is not None:
            raise self.load_error
        assert self.engine is not None
        return self.engine

    async def call(self, fn: Callable[[Engine], T]) -> T:
        """Run `fn(engine)` on the worker thread (e.g. build a Session) and return its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def job(engine: Engine) -> None:
            try:
                result: Any = fn(engine)
            except Exception as exc:  # handed to the caller, who reports it
                self._post(_set_exception, future, exc)
            else:
                self._post(_set_result, future, result)

        with self._cond:
            self._calls.append(job)
            self._cond.notify()
        return await future

    def submit(self, stream: Stream, op: Op) -> None:
        with self._cond:
            stream.ops.append(op)
            self._pending.setdefault(id(stream), stream)
            self._cond.notify()

    def set_paused(self, stream: Stream, paused: bool) -> None:
        """Backpressure: a paused stream keeps its ops but gets no compute until resumed.
        Resuming wakes the worker for a stream with ops *or* one still pending without any (a
        turn gave it back mid-work): the worker may be asleep with nothing else runnable."""
        with self._cond:
            stream.paused = paused
            if paused:
                return
            if stream.ops:
                self._pending.setdefault(id(stream), stream)
            if id(stream) in self._pending:
                self._cond.notify()

    def discard(self, stream: Stream) -> None:
        with self._cond:
            self._pending.pop(id(stream), None)
            stream.ops.clear()

    def pending_count(self) -> int:
        with self._cond:
            return len(self._pending)

    @property
    def alive(self) -> bool:
        """The worker thread runs (False before start(), after stop(), or once it died)."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def turn_s(self) -> float:
        """How long the turn now running has been running (0 when idle)."""
        since = self.turn_since
        return 0.0 if since is None else time.monotonic() - since

    def stop(self, *, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)

    # ---- worker-thread side ----
    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            logger.debug("event loop closed; dropped a worker result")

    def _main(self) -> None:
        torch.set_num_threads(self._torch_threads)
        try:
            self.engine = self._load()
        except BaseException as exc:  # reported by wait_loaded(), and by /healthz
            self.load_error = exc
            logger.error("model failed to load: %s", exc)
            return
        finally:
            self._loaded.set()
        try:
            use_device(self.engine.device)  # this thread runs all model work
            self._loop_turns(self.engine)
        except BaseException:  # the thread ends: the liveness watch sees it gone; say why here
            logger.critical("the model worker died", exc_info=True)

    def _loop_turns(self, engine: Engine) -> None:
        while True:
            with self._cond:
                while not (self._runnable() or self._calls or self._stopping):
                    self._cond.wait()
                if self._stopping:
                    return
                self._gather()
                calls, self._calls = self._calls, []
                batch = self._take_batch()
                self.turn_since = time.monotonic()
            for job in calls:
                job(engine)
            if batch:
                self._advance(engine, batch)
            self.turn_since = None

    def _gather(self) -> None:
        """Batching window (lock held): let more sessions join before a turn starts, unless a
        session is still mid-work from the last turn (its next step should not wait)."""
        if self.batch_window_s <= 0 or self._calls or self._continuing & self._pending.keys():
            return
        deadline = time.monotonic() + self.batch_window_s
        while not self._stopping and not self._calls:
            if sum(not s.paused for s in self._pending.values()) >= self.max_batch:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._cond.wait(left)

    def _runnable(self) -> bool:
        return any(not s.paused for s in self._pending.values())

    def _take_batch(self) -> list[tuple[Stream, list[Op]]]:
        """Up to max_batch unpaused streams with their ops, oldest first."""
        batch: list[tuple[Stream, list[Op]]] = []
        for key in list(self._pending):
            if len(batch) == self.max_batch:
                break
            stream = self._pending[key]
            if not stream.paused:  # a paused one stays pending; set_paused(False) wakes us
                del self._pending[key]
                batch.append((stream, stream.ops))
                stream.ops = []
        return batch

    def _give_back(self, stream: Stream, ops: list[Op]) -> None:
        """Ops a turn did not reach go first in line, the stream to the back (round robin)."""
        with self._cond:
            stream.ops = ops + stream.ops
            self._pending.setdefault(id(stream), stream)

    def _advance(self, engine: Engine, batch: list[tuple[Stream, list[Op]]]) -> None:
        turns: dict[int, Turn] = {}
        results: dict[int, list[Update] | BaseException] = {}
        live: list[Stream] = []
        for stream, ops in batch:
            turn = turns[id(stream)] = Turn()
            try:
                budget = max(0, self.words_per_turn - stream.session.backlog_words)
                left = turn.play(engine, stream, ops, budget=budget)
                live.append(stream)
            except Exception as exc:  # a bad op breaks its own session only
                logger.exception("session rejected its input")
                results[id(stream)] = exc
                continue
            if left:
                self._give_back(stream, left)
        t0 = time.perf_counter()
        failed = False
        try:
            outs: list[list[Update] | BaseException] = list(
                advance(engine, [s.session for s in live], max_steps=self.steps_per_turn)
            )
            for stream in live:
                stream.failures = 0
        except Exception:
            failed = True
            logger.exception("batched advance of %d sessions failed; retrying each", len(live))
            outs = [self._retry_alone(engine, s) for s in live]
        results.update({id(s): out for s, out in zip(live, outs, strict=True)})
        seconds = time.perf_counter() - t0
        self.stats.busy_s += seconds
        self.stats.batches += 1
        self.stats.failed_batches += failed
        self.stats.sessions_advanced += len(live)
        self.stats.max_batch = max(self.stats.max_batch, len(live))
        if self.on_batch is not None and live:
            self.on_batch(len(live), seconds, failed)
        self._continuing = set()
        for stream in live:  # iteration-level batching: unfinished work goes round again
            if stream.session.has_work and not isinstance(results[id(stream)], BaseException):
                self._continuing.add(id(stream))
                self._give_back(stream, [])
        deliveries: list[tuple[Callable[[Delivery], None], Delivery]] = []
        for stream, _ in batch:
            turn, result = turns[id(stream)], results[id(stream)]
            error = result if isinstance(result, BaseException) else None
            updates = [] if isinstance(result, BaseException) else result
            # a marker (end, shutdown) goes out once its session has done all its work
            stream.held += turn.markers
            markers: list[Marker] = []
            if error is not None or not stream.session.has_work:
                markers, stream.held = stream.held, []
            deliveries.append(
                (
                    stream.deliver,
                    Delivery(
                        updates,
                        markers,
                        turn.rejected,
                        error=error,
                        words_taken=turn.words_taken,
                        dropped=turn.dropped,
                    ),
                )
            )
        self._post(_deliver_all, deliveries)  # one event-loop wake-up per turn, not per stream

    def _retry_alone(self, engine: Engine, stream: Stream) -> list[Update] | BaseException:
        """After a failed batched turn: this session alone, unless it was in `step_retries`
        failed turns in a row already (then it ends: retrying it would never stop)."""
        stream.failures += 1
        if stream.failures > self.step_retries:
            logger.error("session failed %d batched turns in a row; ending it", stream.failures)
            return RuntimeError(f"{stream.failures} failed batched turns in a row")
        try:
            return advance(engine, [stream.session])[0]
        except Exception as exc:  # this session is broken; its neighbours are not
            logger.exception("session failed")
            return exc


@dataclass
class Turn:
    """What one worker turn did with a stream's ops."""

    markers: list[Marker] = field(default_factory=list)  # of the END_SOURCE ops played
    rejected: list[ProtocolError] = field(default_factory=list)  # FEED ops dropped whole
    words_taken: int = 0  # FEED words fed or dropped
    dropped: list[tuple[int, int, int]] = field(default_factory=list)  # (feed, offset, count)

    def play(self, engine: Engine, stream: Stream, ops: list[Op], *, budget: int) -> list[Op]:
        """Hand ops to the session in order, feeding at most `budget` words; return the rest.

        A FEED op is checked (or dropped, if the session would refuse a word) as a whole, then
        fed in slices of the budget, so one long paste cannot hog the worker. Over-long
        sentences are the session's to cut."""
        session = stream.session
        for i, op in enumerate(ops):
            if op.kind is OpKind.END_SOURCE:
                session.end_source()
                if op.marker is not None:
                    self.markers.append(op.marker)
                continue
            if budget <= 0:
                return ops[i:]
            if not op.checked:
                problem = _session_refusal(engine, session, op.words)
                if problem is not None:
                    self.rejected.append(ProtocolError(ErrorCode.WORD_TOO_LONG, problem))
                    self.dropped.append((op.feed, op.offset, len(op.words)))
                    self.words_taken += len(op.words)
                    continue
            head, rest = op.words[:budget], op.words[budget:]
            try:
                session.feed(" ".join(head))
            except InputError as e:  # nothing of the slice was taken
                self.rejected.append(ProtocolError(ErrorCode.WORD_TOO_LONG, str(e)))
                self.dropped.append((op.feed, op.offset, len(head)))
            self.words_taken += len(head)
            budget -= len(head)
            if rest:
                rest_op = replace(op, words=rest, checked=True, offset=op.offset + len(head))
                return [rest_op, *ops[i + 1 :]]
        return []


def _session_refusal(engine: Engine, session: Session, words: tuple[str, ...]) -> str | None:
    """What the session would refuse in these words (the session's own check); checked on the
    whole message before its first slice is fed, so that it is dropped whole."""
    try:
        check_words(words, engine=engine, limits=session.limits, max_tokens=session.max_tokens)
    except InputError as e:
        return f"{e}; the whole message was dropped"
    return None


def _deliver_all(deliveries: list[tuple[Callable[[Delivery], None], Delivery]]) -> None:
    for deliver, delivery in deliveries:
        try:
            deliver(delivery)
        except Exception:  # one connection's failure must not starve the others' updates
            logger.exception("delivering a worker result failed")


def _set_result(future: asyncio.Future[Any], value: object) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
