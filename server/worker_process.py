"""The model worker in a process of its own (`serve --model-worker process`).

In one process the event loop and the worker thread share the GIL: every torch op the worker
calls gives it up and takes it back, and while the loop serializes and sends messages the
worker waits at each hand-over. Beside a Python thread busy 30% of the time a server turn took
35-50% longer in wall time (bench/RESULTS.md, session 44). Here the worker thread runs as
before (`Worker`, unchanged) inside a child process that owns the engine and every Session;
the server process keeps the sockets and one handle per stream (`RemoteStream`).

One pipe each way, pickled messages:
- server -> child: ("open", call id, factory), ("submit", stream id, Op), ("pause", stream id,
  flag), ("discard", stream id), ("stop",).
- child -> server: ("loaded", LoadedModel) or ("load_failed", error), ("opened", call id,
  stream id, segmentation) or ("open_failed", call id, error), and per turn ("turn",
  [(stream id, Delivery)], [(size, seconds, failed)], WorkerStats): one wake-up of the event
  loop per turn, as the thread worker posts one.
The turn's start time (`turn_since`, for the stall watch) and the pending count are shared
values the child writes and the server reads without a message.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.sharedctypes
import pickle
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from simulmt.server.config import ModelWorkerKind, ServerConfig
from simulmt.server.ops import Delivery, Op
from simulmt.server.worker import Stream, StreamHandle, Worker, WorkerStats

from simulmt.engine import Engine, ModelInfo
from simulmt.input.sentences import Segmentation
from simulmt.session import Session

logger = logging.getLogger(__name__)
NO_TURN = -1.0  # `turn_since` while no turn runs
STOP_GRACE_S = 2.0  # after `stop`, the child gets this long to end before it is killed


@dataclass(frozen=True)
class LoadedModel:
    """What the server process knows of the engine in the child (/healthz, `session`)."""

    info: ModelInfo
    precision: str


@dataclass(eq=False)
class RemoteStream:
    """The server process's handle on a stream whose Session lives in the child."""

    sid: int
    deliver: Callable[[Delivery], None]
    segmentation: Segmentation


class ProcessWorker:
    """`Worker`'s interface, with the worker thread in a child process (see the module doc).

    `load` and every session factory are pickled to the child, so they must be module-level
    callables or `functools.partial`s of them."""

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
        threads: int = 1,
    ) -> None:
        self.on_batch = on_batch
        self._options = dict(max_batch=max_batch, words_per_turn=words_per_turn,
                             steps_per_turn=steps_per_turn, batch_window_s=batch_window_s,
                             step_retries=step_retries)
        self._load = load
        self._threads = threads
        self.max_batch = max_batch
        self.engine: LoadedModel | None = None
        self.load_error: BaseException | None = None
        self.stats = WorkerStats()
        ctx = multiprocessing.get_context("spawn")  # never fork a process that runs torch
        self._ctx = ctx
        self._turn_since = ctx.Value("d", NO_TURN, lock=False)
        self._pending = ctx.Value("i", 0, lock=False)
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loaded: asyncio.Future[LoadedModel] | None = None
        self._calls: dict[int, asyncio.Future[tuple[int, Segmentation]]] = {}
        self._call_ids = itertools.count(1)
        self._streams: dict[int, RemoteStream] = {}
        self._stopping = False

    # ---- the interface the server uses (event loop) ----
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loaded = loop.create_future()
        ours, theirs = self._ctx.Pipe()
        self._process = self._ctx.Process(
            target=_child_main,
            args=(theirs, self._load, self._options, self._threads, self._turn_since,
                  self._pending, sys.getswitchinterval(), logging.getLogger().level),
            name="simulmt-model-worker",
            daemon=True,
        )
        self._process.start()
        theirs.close()
        self._conn = ours
        loop.add_reader(ours.fileno(), self._on_readable)

    async def wait_loaded(self) -> LoadedModel:
        """Wait for the model in the child; raise what loading raised."""
        assert self._loaded is not None, "start() first"
        return await asyncio.shield(self._loaded)

    async def open(
        self, factory: Callable[[Engine], Session], deliver: Callable[[Delivery], None]
    ) -> RemoteStream:
        """Build a session in the child with `factory(engine)`; raise what it raised."""
        assert self._loop is not None, "start() first"
        call = next(self._call_ids)
        future: asyncio.Future[tuple[int, Segmentation]] = self._loop.create_future()
        self._calls[call] = future
        try:
            self._send(("open", call, factory))
            sid, segmentation = await future
        finally:
            self._calls.pop(call, None)
        stream = RemoteStream(sid=sid, deliver=deliver, segmentation=segmentation)
        self._streams[sid] = stream
        return stream

    def submit(self, stream: StreamHandle, op: Op) -> None:
        self._send(("submit", _remote(stream).sid, op))

    def set_paused(self, stream: StreamHandle, paused: bool) -> None:
        self._send(("pause", _remote(stream).sid, paused))

    def discard(self, stream: StreamHandle) -> None:
        """Drop the stream's pending ops and its session in the child."""
        sid = _remote(stream).sid
        self._streams.pop(sid, None)
        self._send(("discard", sid))

    def pending_count(self) -> int:
        return int(self._pending.value)

    @property
    def alive(self) -> bool:
        """The child runs (False before start(), after stop(), or once it died)."""
        return self._process is not None and self._process.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def turn_s(self) -> float:
        """How long the child's running turn has been running (0 when idle). Both processes
        read the same monotonic clock (CLOCK_MONOTONIC is system-wide on Linux)."""
        since = self._turn_since.value
        return 0.0 if since == NO_TURN else time.monotonic() - since

    def stop(self, *, timeout: float = 10.0) -> None:
        """Ask the child to stop; kill it if it has not ended after `timeout` (+ a grace)."""
        self._stopping = True
        if self._loop is not None and self._conn is not None:
            try:
                self._loop.call_soon_threadsafe(self._loop.remove_reader, self._conn.fileno())
            except RuntimeError:  # the loop is closed already
                pass
        self._send(("stop",))
        if self._process is not None:
            self._process.join(timeout=timeout + STOP_GRACE_S)
            if self._process.is_alive():
                logger.warning("the model worker process did not stop; killing it")
                self._process.kill()
                self._process.join(timeout=STOP_GRACE_S)

    # ---- messages ----
    def _send(self, message: tuple[Any, ...]) -> None:
        """Send to the child. Once it is gone only `open` fails (the session cannot start);
        ops for a stream are dropped: the liveness watch ends every session then."""
        try:
            if self._conn is None:
                raise OSError("the model worker process is not running")
            self._conn.send(message)
        except OSError as e:
            if message[0] == "open":
                raise RuntimeError("the model worker process is not running") from e
            logger.debug("model worker process gone; dropped %r", message[0])

    def _on_readable(self) -> None:
        """The child wrote (event loop): read every message that is there."""
        assert self._conn is not None and self._loop is not None
        try:
            while self._conn.poll():
                self._handle(self._conn.recv())
        except (EOFError, OSError):  # the child died: the liveness watch reports it
            self._loop.remove_reader(self._conn.fileno())
            if self._loaded is not None and not self._loaded.done():
                self.load_error = RuntimeError("the model worker process died while loading")
                self._loaded.set_exception(self.load_error)
            for future in self._calls.values():
                if not future.done():
                    future.set_exception(RuntimeError("the model worker process died"))

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "turn":
            _, deliveries, batches, stats = message
            self.stats = stats
            if self.on_batch is not None:
                for size, seconds, failed in batches:
                    self.on_batch(size, seconds, failed)
            for sid, delivery in deliveries:
                stream = self._streams.get(sid)
                if stream is None:
                    continue  # discarded while the child computed
                try:
                    stream.deliver(delivery)
                except Exception:  # one connection's failure must not starve the others
                    logger.exception("delivering a worker result failed")
        elif kind in ("opened", "open_failed"):
            future = self._calls.get(message[1])
            if future is not None and not future.done():
                if kind == "opened":
                    future.set_result((message[2], message[3]))
                else:
                    future.set_exception(message[2])
        elif kind == "loaded":
            self.engine = message[1]
            assert self._loaded is not None
            if not self._loaded.done():
                self._loaded.set_result(message[1])
        elif kind == "load_failed":
            self.load_error = message[1]
            assert self._loaded is not None
            if not self._loaded.done():
                self._loaded.set_exception(message[1])


# what the server runs its model in (`--model-worker`)
ModelWorker: TypeAlias = Worker | ProcessWorker


def make_worker(
    config: ServerConfig,
    load: Callable[[], Engine],
    *,
    on_batch: Callable[[int, float, bool], None] | None = None,
) -> ModelWorker:
    """The model worker `config.model_worker` names, with the config's batching options."""
    options: dict[str, Any] = dict(
        max_batch=config.max_batch,
        batch_window_s=config.batch_window_ms / 1000,
        steps_per_turn=config.steps_per_turn,
        step_retries=config.step_retries,
        on_batch=on_batch,
    )
    if config.model_worker is ModelWorkerKind.PROCESS:
        import torch

        return ProcessWorker(load, threads=torch.get_num_threads(), **options)
    return Worker(load, **options)


def _remote(stream: StreamHandle) -> RemoteStream:
    if not isinstance(stream, RemoteStream):
        raise TypeError(f"a process worker's stream is a RemoteStream, got {type(stream).__name__}")
    return stream


def _sendable(error: BaseException) -> BaseException:
    """`error`, or a RuntimeError with its text where it would not survive pickling."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error


# ---- the child process ----
class _ChildWorker(Worker):
    """The thread worker, its turn start mirrored into the shared value the server reads."""

    def __init__(self, shared_turn: Any, **kwargs: Any) -> None:
        self._shared_turn = shared_turn
        super().__init__(**kwargs)

    @property
    def turn_since(self) -> float | None:
        since = self._shared_turn.value
        return None if since == NO_TURN else float(since)

    @turn_since.setter
    def turn_since(self, value: float | None) -> None:
        self._shared_turn.value = NO_TURN if value is None else value


def _child_main(
    conn: multiprocessing.connection.Connection,
    load: Callable[[], Engine],
    options: dict[str, Any],
    threads: int,
    turn_since: Any,
    pending: Any,
    switch_interval: float,
    log_level: int,
) -> None:
    logging.basicConfig(level=log_level or logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    sys.setswitchinterval(switch_interval)
    import torch

    torch.set_num_threads(threads)
    send_lock = threading.Lock()
    turn_batches: list[tuple[int, float, bool]] = []
    turn_out: list[tuple[int, Delivery]] = []

    def send(message: tuple[Any, ...]) -> None:
        with send_lock:
            try:
                conn.send(message)
            except OSError:  # the server process is gone; the main thread sees EOF and ends
                logger.debug("server process gone; dropped a message")

    def on_batch(size: int, seconds: float, failed: bool) -> None:
        turn_batches.append((size, seconds, failed))

    worker = _ChildWorker(turn_since, load=load, on_batch=on_batch, **options)

    def post(fn: Callable[..., None], *args: Any) -> None:
        """The worker's results (worker thread): run them here, then send the turn at once."""
        fn(*args)
        pending.value = worker.pending_count()
        if turn_out or turn_batches:
            batches, outs = list(turn_batches), list(turn_out)
            turn_batches.clear()
            turn_out.clear()
            send(("turn", outs, batches, worker.stats))

    streams: dict[int, Stream] = {}

    def collect(sid: int) -> Callable[[Delivery], None]:
        def deliver(delivery: Delivery) -> None:
            if delivery.error is not None:
                delivery = Delivery(delivery.updates, delivery.markers, delivery.rejected,
                                    error=_sendable(delivery.error),
                                    words_taken=delivery.words_taken, dropped=delivery.dropped)
            turn_out.append((sid, delivery))
        return deliver

    worker.start_posting(post)
    worker.wait_loaded_sync()
    if worker.load_error is not None:
        send(("load_failed", _sendable(worker.load_error)))
        return
    engine = worker.engine
    assert engine is not None
    send(("loaded", LoadedModel(info=engine.info, precision=engine.precision)))
    sids = itertools.count(1)

    def opener(call: int, factory: Callable[[Engine], Session]) -> Callable[[Engine], None]:
        def job(engine: Engine) -> None:  # on the worker thread, where the engine lives
            try:
                session = factory(engine)
            except Exception as exc:  # the server reports it to the client
                send(("open_failed", call, _sendable(exc)))
                return
            sid = next(sids)
            streams[sid] = Stream(session, collect(sid))
            send(("opened", call, sid, session.segmentation))
        return job

    while worker.alive:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the server process is gone
            break
        kind = message[0]
        if kind == "stop":
            break
        if kind == "open":
            worker.run_on_worker(opener(message[1], message[2]))
        elif kind in ("submit", "pause", "discard"):
            stream = streams.get(message[1])
            if stream is None:
                continue  # a late message for a discarded stream
            if kind == "submit":
                worker.submit(stream, message[2])
            elif kind == "pause":
                worker.set_paused(stream, message[2])
            else:
                worker.discard(stream)
                del streams[message[1]]
        pending.value = worker.pending_count()
    worker.stop()
