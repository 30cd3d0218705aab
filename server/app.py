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
import itertools
import logging
import secrets
from collections.abc import Callable

from simulmt.server.config import ServerConfig
from simulmt.server.connection import Connection
from simulmt.server.machine import SessionMachine
from simulmt.server.protocol import ErrorCode, encode, error_message
from simulmt.server.sessions import SessionTable, new_token
from simulmt.server.web import Health, gate, load_static
from simulmt.server.worker import Worker
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from simulmt.engine import Engine

logger = logging.getLogger(__name__)


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
        self.instance = secrets.token_hex(4)  # tells server processes apart behind a proxy
        self.worker = Worker(
            load,
            max_batch=config.max_batch,
            batch_window_s=config.batch_window_ms / 1000,
            steps_per_turn=config.steps_per_turn,
        )
        self.table = SessionTable(
            max_sessions=config.max_sessions,
            resume_window_s=config.resume_window_s,
            worker=self.worker,
        )
        self.connections: set[Connection] = set()
        self.phase = Phase.LOADING
        self._ids = itertools.count(1)
        self._static = load_static()
        self._server: Server | None = None
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
            max_queue=16,  # frames buffered per connection before TCP backpressure
            write_limit=c.write_limit_bytes,
            ping_interval=c.ping_interval_s,
            ping_timeout=c.ping_timeout_s,
            close_timeout=5,
        )
        self._port = int(self._server.sockets[0].getsockname()[1])
        logger.info("listening on ws://%s:%d/ (instance %s)", c.host, self.port, self.instance)

    async def _await_model(self) -> None:
        try:
            engine = await self.worker.wait_loaded()
        except Exception:
            self.phase = Phase.FAILED
            return
        self.model_name = engine.info.name
        self.precision = engine.precision
        if self.phase is Phase.LOADING:
            self.phase = Phase.READY
            logger.info("model %s loaded; accepting sessions", self.model_name)

    async def wait_ready(self) -> None:
        assert self._load_task is not None, "start() first"
        await asyncio.shield(self._load_task)
        await self.worker.wait_loaded()  # re-raises a loading failure

    def health(self) -> Health:
        body: dict[str, object] = {
            "status": self.phase.value,
            "model": self.model_name,
            "precision": self.precision,  # what `--dtype` (auto: measured) chose
            "instance": self.instance,
            "sessions": len(self.table.sessions),  # started, parked included
            "parked": self.table.parked,
            "connections": len(self.connections),
            "max_sessions": self.config.max_sessions,
            "batches": self.worker.stats.batches,  # batched model calls so far
            "sessions_advanced": self.worker.stats.sessions_advanced,  # summed batch sizes
            "busy_s": round(self.worker.stats.busy_s, 2),  # time the model worker computed
        }
        if self.worker.load_error is not None:
            body["error"] = str(self.worker.load_error)
        return Health(ok=self.phase is Phase.READY, body=body)

    def _process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        return gate(
            ws,
            request,
            static=self._static,
            health=self.health(),
            token=self.config.token,
            allowed_origins=self.config.allowed_origins,
        )

    async def _handle(self, ws: ServerConnection) -> None:
        sid = f"{self.instance}-{next(self._ids)}"
        waiting = sum(not c.started for c in self.connections)  # slots are taken at `start`
        if waiting >= self.config.max_sessions or self.phase is not Phase.READY:
            code = ErrorCode.OVERLOADED
            why = (
                f"{waiting} connections are waiting to start; retry later"
                if self.phase is Phase.READY
                else f"the server is {self.phase.value}; retry later"
            )
            await ws.send(encode(error_message(code, why, fatal=True), 1))
            await ws.close(code.close_code, code.value)
            return
        machine = SessionMachine(
            config=self.config,
            session_id=sid,
            model=self.model_name,
            precision=self.precision,
            token=new_token(),
        )
        conn = Connection(
            ws, config=self.config, worker=self.worker, table=self.table, machine=machine
        )
        self.connections.add(conn)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)

    async def stop(self) -> None:
        """Graceful stop: refuse new sessions, finish open sentences, close them with 1001."""
        if self._server is None:
            return
        self.phase = Phase.STOPPING
        self._server.close(close_connections=False)  # stop listening; keep open sessions
        self.table.close_all_parked()  # nobody can resume here any more
        for conn in list(self.connections):
            conn.begin_shutdown()
        try:
            async with asyncio.timeout(self.config.shutdown_timeout_s):
                await self._server.wait_closed()
        except TimeoutError:
            logger.warning("shutdown grace time over; closing %d sessions", len(self.connections))
            await asyncio.gather(*(conn.force_close() for conn in list(self.connections)))
            await self._server.wait_closed()
        await asyncio.to_thread(self.worker.stop)
        if self._load_task is not None:
            self._load_task.cancel()
        logger.info("stopped")

    async def serve_until(self, stop: asyncio.Event) -> None:
        await stop.wait()
        await self.stop()
