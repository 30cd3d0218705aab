"""Prometheus metrics of one server, in the text exposition format (`GET /metrics`).

Each server has its own `CollectorRegistry` (never the process-global one), so that tests and
several servers in one process do not collide. Counters and histograms are updated as things
happen (the model worker's thread observes its batches; the event loop everything else);
gauges (sessions, connections, queue) are read from the server when scraped.

The added delay of a committed target word is the time from the arrival at the server of the
source word it needed (its delay d: the d-th word of its sentence) to the moment the word is
sent: what the server adds to the policy's own latency (queueing and computation). A source
word the model never sees (a filler the session drops) is not counted.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from simulmt.server.protocol import ErrorCode, Start

from simulmt.input.fillers import is_filler
from simulmt.output.updates import Update

# the classic text format every Prometheus reads (our names need none of 1.0.0's escaping)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "simulmt"
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)  # s a turn
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # sessions advanced together
# the load goal is a p95 added delay <= 200 ms (bench/RESULTS.md): buckets around it
DELAY_BUCKETS = (0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass(frozen=True)
class Snapshot:
    """The server's state at a scrape."""

    active: int  # sessions carried by a connection
    parked: int  # sessions waiting for a resume
    connections: int  # open websocket connections (started or not)
    queue: int  # sessions with work waiting for the model worker
    inflight_words: int  # source words received and not yet taken by the model worker
    worker_up: bool  # the model is loaded and its worker alive and not stuck


class ServerMetrics:
    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.source_words = Counter(
            f"{PREFIX}_source_words", "Source words received and handed to the model", registry=r
        )
        self.target_words = Counter(
            f"{PREFIX}_target_words", "Committed target words sent to clients", registry=r
        )
        self.errors = Counter(
            f"{PREFIX}_errors", "Error messages sent to clients, by code", ["code"], registry=r
        )
        for code in ErrorCode:  # every code shows, at 0 until it happens
            self.errors.labels(code=code.value)
        self.sessions_started = Counter(
            f"{PREFIX}_sessions_started", "Sessions started (resumes not included)", registry=r
        )
        self.resumes = Counter(f"{PREFIX}_resumes", "Sessions resumed after a drop", registry=r)
        self.connections = Counter(
            f"{PREFIX}_connections_opened", "Websocket connections accepted", registry=r
        )
        self.step_seconds = Histogram(
            f"{PREFIX}_model_step_seconds",
            "Time of one batched model turn (all its sessions together)",
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            f"{PREFIX}_batch_sessions",
            "Sessions advanced together in one batched model turn",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.failed_batches = Counter(
            f"{PREFIX}_failed_batches",
            "Batched model turns that raised (their sessions were retried one by one)",
            registry=r,
        )
        self.added_delay = Histogram(
            f"{PREFIX}_added_delay_seconds",
            "Per committed word: time from the arrival of the source word it needed to its send",
            buckets=DELAY_BUCKETS,
            registry=r,
        )
        r.register(_StateCollector(snapshot))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def observe_batch(self, size: int, seconds: float, failed: bool) -> None:
        """One model turn (called on the worker thread; the client library is thread-safe)."""
        self.batch_size.observe(size)
        self.step_seconds.observe(seconds)
        if failed:
            self.failed_batches.inc()

    def session(self) -> SessionMetrics:
        return SessionMetrics(self)


class SessionMetrics:
    """One session's events (`simulmt.server.events.SessionEvents`) counted."""

    def __init__(self, metrics: ServerMetrics, clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics = metrics
        self.clock = clock
        self.drop_fillers = True
        # per source word of open sentences: its arrival, and its source message and position
        # there (a word the worker drops unread is taken out again: `dropped`)
        self.arrivals: deque[tuple[float, int, int]] = deque()

    def started(self, start: Start) -> None:
        self.drop_fillers = start.drop_fillers
        self.metrics.sessions_started.inc()

    def error(self, code: ErrorCode) -> None:
        self.metrics.errors.labels(code=code.value).inc()

    def source(self, words: Sequence[str], *, feed: int = 0) -> None:
        self.metrics.source_words.inc(len(words))
        now = self.clock()
        self.arrivals.extend(
            (now, feed, i) for i, w in enumerate(words) if not (self.drop_fillers and is_filler(w))
        )

    def dropped(self, feed: int, offset: int, count: int) -> None:
        """Words the worker refused unread: no committed word will ever need them, and the
        delays of the words after them count positions without them."""
        gone = range(offset, offset + count)
        self.arrivals = deque(a for a in self.arrivals if not (a[1] == feed and a[2] in gone))

    def resumed(self) -> None:
        self.metrics.resumes.inc()

    def update(self, update: Update) -> None:
        if update.delays:
            self.metrics.target_words.inc(len(update.delays))
        now = self.clock()
        for d in update.delays:  # 1-based, within the open sentence (arrivals[0] is its first)
            if 0 < d <= len(self.arrivals):
                self.metrics.added_delay.observe(max(0.0, now - self.arrivals[d - 1][0]))
        if update.final:
            for _ in range(min(len(update.source.split()), len(self.arrivals))):
                self.arrivals.popleft()


class _StateCollector(Collector):
    """Gauges read from the server at each scrape."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self.snapshot = snapshot

    def describe(self) -> list[Metric]:
        return []  # not read at registration: the server may not be running yet

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot()
        sessions = GaugeMetricFamily(
            f"{PREFIX}_sessions", "Sessions holding a slot, by state", labels=["state"]
        )
        sessions.add_metric(["active"], s.active)
        sessions.add_metric(["parked"], s.parked)
        yield sessions
        yield GaugeMetricFamily(
            f"{PREFIX}_connections", "Open websocket connections", value=s.connections
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_queue_sessions", "Sessions with work waiting for the model", value=s.queue
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_inflight_words",
            "Source words received and not yet taken by the model",
            value=s.inflight_words,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_worker_up",
            "1 while the model is loaded and its worker is alive and not stuck",
            value=int(s.worker_up),
        )
