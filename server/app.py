"""The captioning server: websockets on one port, one model worker, graceful stop.

server = CaptionServer(ServerConfig(port=0), load=Engine.tiny, model_name="tiny")
await server.start()          # listening at once; /healthz is 503 until the model loads
await server.wait_ready()     # raises what loading raised
...
await server.stop()           # open sessions get their finals, then `shutting_down` and 1001
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
from collections.abc import Callable
from http import HTTPStatus

from simulmt.server.admission import Addresses
from simulmt.server.auth import Access, is_loopback
from simulmt.server.config import ServerConfig
from simulmt.server.connection import CLOSE_TIMEOUT_S, Connection
from simulmt.server.liveness import WorkerState, watch, worker_state
from simulmt.server.machine import SessionMachine
from simulmt.server.metrics import CONTENT_TYPE as METRICS_TYPE
from simulmt.server.metrics import ServerMetrics, Snapshot
from simulmt.server.ops import Delivery
from simulmt.server.protocol import ErrorCode
from simulmt.server.replies import encode, error_message
from simulmt.server.sessions import SessionTable, new_token
from simulmt.server.web import Health, gate, load_static, respond
from simulmt.server.worker import Worker
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from simulmt.engine import Engine

logger = logging.getLogger(__name__)
TEXT = "text/plain; charset=utf-8"


class Phase(enum.Enum):
    LOADING = "loading"
    READY = "ok"
    FAILED = "failed"
    STOPPING = "stopping"


class CaptionServer:
    def __init__(
        self, config: ServerConfig, *, load: Callable[[], Engine], model_name: str
    ) -> None:
        self.config = config
        self.model_name = model_name
        self.precision: str | None = None  # the engine's, once loaded (/healthz, `session`)
        self.instance = secrets.token_hex(4)  # tells server processes apart in their logs
        origins = config.allowed_origins
        self.access = Access.of(host=config.host, token=config.token, allowed=origins)
        self.metrics = ServerMetrics(self.snapshot)
        self.worker = Worker(
            load,
            max_batch=config.max_batch,
            batch_window_s=config.batch_window_ms / 1000,
            steps_per_turn=config.steps_per_turn,
            step_retries=config.step_retries,
            on_batch=self.metrics.observe_batch,
        )
        self.table = SessionTable(
            max_sessions=config.max_sessions,
            resume_window_s=config.resume_window_s,
            worker=self.worker,
        )
        self.connections: set[Connection] = set()
        self.addresses = Addresses(config.admission)  # connections per client address
        self.phase = Phase.LOADING
        self._static = load_static()
        self._server: Server | None = None
        self._metrics_server: Server | None = None  # the metrics port's, when it has its own
        self.failed = asyncio.Event()  # the model worker died or is stuck: the process should end
        self.worker_failure: WorkerState | None = None
        self._watch: asyncio.Task[None] | None = None
        self._load_task: asyncio.Task[None] | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The port listened on (the real one when the config asked for 0)."""
        assert self._port is not None, "start() first"
        return self._port

    async def start(self) -> None:
        self.worker.start(asyncio.get_running_loop())
        self._load_task = asyncio.create_task(self._await_model())
        c = self.config
        self._server = await serve(
            self._handle,
            c.host,
            c.port,
            process_request=self._process_request,
            max_size=c.hard_max_bytes,
            max_queue=c.admission.max_queue,  # frames buffered before TCP backpressure
            write_limit=c.write_limit_bytes,
            ping_interval=c.ping_interval_s,
            ping_timeout=c.ping_timeout_s,
            close_timeout=CLOSE_TIMEOUT_S,
        )
        self._port = int(self._server.sockets[0].getsockname()[1])
        logger.info("listening on ws://%s:%d/ (instance %s)", c.host, self.port, self.instance)
        if c.metrics_port is not None:
            self._metrics_server = await serve(
                self._refuse_websocket,
                c.metrics_host,
                c.metrics_port,
                process_request=self._metrics_request,
            )
            logger.info("metrics on http://%s:%d/metrics", c.metrics_host, self.metrics_port)

    @property
    def metrics_port(self) -> int:
        """The separate metrics listener's port (the real one when the config asked for 0)."""
        assert self._metrics_server is not None, "no metrics port configured, or not started"
        return int(self._metrics_server.sockets[0].getsockname()[1])

    def _metrics_request(self, ws: ServerConnection, request: Request) -> Response:
        if request.path.split("?", 1)[0] != "/metrics":
            return respond(ws, HTTPStatus.NOT_FOUND, "this port serves /metrics only\n", TEXT)
        return respond(ws, HTTPStatus.OK, self.metrics.render(), METRICS_TYPE)

    async def _refuse_websocket(self, ws: ServerConnection) -> None:
        await ws.close()  # never reached: _metrics_request answers every request

    async def _await_model(self) -> None:
        timeout = self.config.load_timeout_s
        try:
            async with asyncio.timeout(timeout):
                engine = await self.worker.wait_loaded()
        except TimeoutError:
            logger.critical("the model did not load within %g s (--load-timeout-s)", timeout)
            self._on_failure(WorkerState.LOAD_HUNG)
            return
        except Exception:
            self.phase = Phase.FAILED
            return
        self.model_name = engine.info.name
        self.precision = engine.precision
        if self.phase is Phase.LOADING:
            self.phase = Phase.READY
            logger.info("model %s loaded; accepting sessions", self.model_name)
            self._watch = asyncio.create_task(
                watch(self.worker, stall_s=self.config.worker_stall_s, on_failure=self._on_failure)
            )

    def _on_failure(self, state: WorkerState) -> None:
        """The worker will not come back: end every session (1011), refuse new ones, and tell
        whoever runs the server (`failed`) so that the process ends."""
        self.worker_failure = state
        self.phase = Phase.FAILED
        dead = Delivery([], [], error=RuntimeError(f"the model worker is {state.value}"))
        for hosted in list(self.table.sessions.values()):
            if hosted.owner is not None:
                hosted.deliver(dead)
            else:
                self.table.remove(hosted)
        for conn in list(self.connections):
            if not conn.started:
                conn.begin_shutdown()
        self.failed.set()

    async def wait_ready(self) -> None:
        assert self._load_task is not None, "start() first"
        await asyncio.shield(self._load_task)
        if self.worker_failure is WorkerState.LOAD_HUNG:
            raise TimeoutError(f"the model did not load within {self.config.load_timeout_s:g} s")
        await self.worker.wait_loaded()  # re-raises a loading failure

    @property
    def serves_metrics(self) -> bool:
        """/metrics on the main port: unless it has its own, and only behind a token or on a
        loopback address (never open to the internet)."""
        c = self.config
        return c.metrics_port is None and (c.token is not None or is_loopback(c.host))

    def worker_state(self) -> WorkerState:
        return self.worker_failure or worker_state(self.worker, stall_s=self.config.worker_stall_s)

    def health(self) -> Health:
        """Status and counts for anyone who asks: never paths or exception text (the log has
        those). A dead or stuck worker makes it 503 before the watch even notices."""
        worker = self.worker_state()
        body: dict[str, object] = {
            "status": self.phase.value,
            "worker": worker.value,  # loading, ok, load_failed, load_hung, dead, stuck, stopped
            "sessions": len(self.table.sessions),  # started, parked included
            "parked": self.table.parked,
            "connections": len(self.connections),
            "max_sessions": self.config.max_sessions,
            "batches": self.worker.stats.batches,  # batched model calls so far
            "failed_batches": self.worker.stats.failed_batches,
            "sessions_advanced": self.worker.stats.sessions_advanced,  # summed batch sizes
            "busy_s": round(self.worker.stats.busy_s, 2),  # time the model worker computed
        }
        if self.phase is Phase.READY:
            body["model"] = self.model_name  # the model's own name, never its path
            body["precision"] = self.precision  # what `--dtype` (auto: measured) chose
        ok = self.phase is Phase.READY and worker is WorkerState.OK
        return Health(ok=ok, body=body)

    def snapshot(self) -> Snapshot:
        """The gauges of /metrics."""
        hosted = list(self.table.sessions.values())
        parked = sum(h.owner is None for h in hosted)
        return Snapshot(
            active=len(hosted) - parked,
            parked=parked,
            connections=len(self.connections),
            queue=self.worker.pending_count(),
            inflight_words=sum(h.machine.inflight for h in hosted),
            worker_up=self.phase is Phase.READY and self.worker_state() is WorkerState.OK,
        )

    def _process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        refused = gate(
            ws,
            request,
            static=self._static,
            health=self.health(),
            access=self.access,
            metrics=self.metrics.render if self.serves_metrics else None,
        )
        return refused or self.addresses.refuse(ws, request)  # a websocket: per-address limit

    async def _handle(self, ws: ServerConnection) -> None:
        sid = secrets.token_urlsafe(12)  # random: an id tells nothing about other sessions
        self.metrics.connections.inc()
        # slots are taken at `start`; until then a connection counts against a small bound and
        # has admission.handshake_timeout_s to send it
        waiting = sum(not c.started for c in self.connections)
        if waiting >= self.config.admission.max_unstarted or self.phase is not Phase.READY:
            code = ErrorCode.OVERLOADED
            why = (
                f"{waiting} connections are waiting to start; retry later"
                if self.phase is Phase.READY
                else f"the server is {self.phase.value}; retry later"
            )
            await ws.send(encode(error_message(code, why, fatal=True), 1))
            self.metrics.errors.labels(code=code.value).inc()
            await ws.close(code.close_code, code.value)
            return
        machine = SessionMachine(
            config=self.config,
            session_id=sid,
            model=self.model_name,
            precision=self.precision,
            token=new_token(),
            require_token=(  # fail closed: no request seen, no token proven
                self.access.start_token_needed(ws.request) if ws.request else self.access.token
            ),
            events=self.metrics.session(),
        )
        address = self.addresses.of(ws)
        conn = Connection(
            ws,
            config=self.config,
            worker=self.worker,
            table=self.table,
            machine=machine,
            address=address,
        )
        self.connections.add(conn)
        self.addresses.opened(address)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)
            self.addresses.closed(address)

    async def stop(self) -> None:
        """Graceful stop: refuse new sessions, finish open sentences, close them with 1001."""
        if self._server is None:
            return
        if self.phase is not Phase.FAILED:
            self.phase = Phase.STOPPING
        if self._watch is not None:
            self._watch.cancel()
        if self._metrics_server is not None:
            self._metrics_server.close()
        self._server.close(close_connections=False)  # stop listening; keep open sessions
        self.table.close_all_parked()  # nobody can resume here any more
        for conn in list(self.connections):
            conn.begin_shutdown()
        try:
            async with asyncio.timeout(self.config.shutdown_timeout_s):
                await self._server.wait_closed()
        except TimeoutError:  # abort: a client that reads nothing cannot hold the stop up
            left = len(self.connections)
            logger.warning("shutdown grace time over; aborting %d connections", left)
            for conn in list(self.connections):
                conn.abort()
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await self._server.wait_closed()
            except TimeoutError:
                logger.error("%d connections did not end after abort", len(self.connections))
        # a stuck worker never joins: do not wait for it (its thread is a daemon)
        await asyncio.to_thread(self.worker.stop, timeout=0 if self.worker_failure else 10)
        if self._load_task is not None:
            self._load_task.cancel()
        logger.info("stopped")
