"""What the server tests share: the tiny engine (trained once per test process) and a real
`CaptionServer` on 127.0.0.1 for the length of an `async with`.

Not a test module (pytest collects `test_*.py` only); import it as `tests._server_helpers`,
as the other shared test code is (`pythonpath = ["."]` in pyproject's pytest options).
"""

from __future__ import annotations

import functools
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from simulmt.server.app import CaptionServer
from simulmt.server.config import ServerConfig

from simulmt.engine import Engine


@functools.cache
def engine() -> Engine:
    """The tiny model, shared by every server of the process (it trains once)."""
    return Engine.tiny(0)


@asynccontextmanager
async def running(
    config: ServerConfig | None = None,
    load: Callable[[], Engine] = engine,
    *,
    before_stop: Callable[[], object] | None = None,
) -> AsyncIterator[CaptionServer]:
    """A started server (default: any free port, default limits) whose model is loaded;
    `before_stop` runs before it is stopped (e.g. to let a stuck worker go)."""
    server = CaptionServer(config or ServerConfig(port=0), load=load, model_name="tiny")
    await server.start()
    try:
        await server.wait_ready()
        yield server
    finally:
        if before_stop is not None:
            before_stop()
        await server.stop()


def free_ports(n: int) -> int:
    """A port p such that p..p+n-1 are all free right now (for `serve --workers n`, which
    takes consecutive ports). Another process may still take one before it is used."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        held = []
        try:
            for port in range(base, base + n):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError(f"no {n} consecutive free ports")
