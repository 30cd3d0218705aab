"""The soak's hostile and broken clients: each misbehaves again and again until the deadline,
beside the well-behaved sessions, and records how the server ended each of its connections.

- flood: starts a session, then sends 2000 pings as fast as it can (`rate_limited`, 1008)
- oversize_frame: starts a session, then sends one frame over the transport cap (1009)
- silent: opens a websocket and never sends `start` (handshake deadline: `idle_timeout`, 1008)
- non_reader: connects to a server process directly (nginx's buffers would absorb megabytes
  first), starts a session, then sends two frames of words a second and reads nothing, until
  a send fails because the server closed it (drain timeout: 1008, then the socket is aborted),
  or for the hang guard at most; then it reads what it was sent and sees the end (1008 or
  1006). A server that had not closed it would go on streaming to it: "not closed".
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from simulmt.server.config import PROTOCOL
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

START = json.dumps({"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=3"})
HANG_GUARD_S = 120  # an attempt the server has not ended by then counts as "not closed"


@dataclass
class HostileResult:
    attempts: int = 0
    closes: Counter[str] = field(default_factory=Counter)  # close code the client saw
    errors: Counter[str] = field(default_factory=Counter)  # `error` codes it read
    seconds_to_close: list[float] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        times = sorted(self.seconds_to_close)
        return {
            "attempts": self.attempts,
            "closes": dict(sorted(self.closes.items())),
            "errors": dict(sorted(self.errors.items())),
            "max_s_to_close": round(times[-1], 1) if times else None,
        }


async def _read_until_closed(ws: ClientConnection, errors: Counter[str]) -> None:
    async with asyncio.timeout(HANG_GUARD_S):
        try:
            async for raw in ws:
                message = json.loads(raw)
                if message.get("type") == "error":
                    errors[str(message.get("code"))] += 1
        except ConnectionClosed:
            pass


async def _started(url: str, **options: Any) -> ClientConnection:
    ws = await connect(url, open_timeout=30, **options)
    await ws.send(START)
    await asyncio.wait_for(ws.recv(), 60)  # the `session` message
    return ws


async def flood(url: str, errors: Counter[str]) -> ClientConnection:
    ws = await _started(url)
    try:
        for i in range(2000):
            await ws.send('{"type":"ping"}' if i % 2 else '{"type":"caption_style"}')
    except ConnectionClosed:
        pass
    await _read_until_closed(ws, errors)
    return ws


async def oversize_frame(url: str, errors: Counter[str]) -> ClientConnection:
    ws = await _started(url)
    try:
        await ws.send(json.dumps({"type": "source", "text": "zu " * 400_000}))  # 1.2 MB
    except ConnectionClosed:
        pass
    await _read_until_closed(ws, errors)
    return ws


async def silent(url: str, errors: Counter[str]) -> ClientConnection:
    ws = await connect(url, open_timeout=30)
    await _read_until_closed(ws, errors)
    return ws


async def non_reader(url: str, errors: Counter[str]) -> ClientConnection:
    parts = urlsplit(url)
    sock = socket.socket()
    # small buffers and segments before connecting: on loopback a server's send buffer is sized
    # from the peer's window and segment size at the handshake (a megabyte or more), which it
    # would fill for minutes before its drain timeout could start
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    if hasattr(socket, "TCP_MAXSEG"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1024)
    sock.connect((parts.hostname, parts.port))
    ws = await _started(url, sock=sock, max_queue=1, ping_interval=None, compression=None)
    ws.transport.pause_reading()  # from now on it reads nothing, not even a close
    words = " ".join(["ich habe heute einen Brief geschrieben und das Wetter ist schön"] * 4)
    stop = time.monotonic() + HANG_GUARD_S
    try:
        while time.monotonic() < stop:  # 2 frames/s: within the rate limit
            await ws.send(json.dumps({"type": "source", "text": words}))
            await asyncio.sleep(0.5)
    except ConnectionClosed:
        pass
    ws.transport.resume_reading()
    await _read_until_closed(ws, errors)
    return ws


Attack = Callable[[str, Counter[str]], Awaitable[ClientConnection]]


ATTACKS: dict[str, Attack] = {
    "flood": flood,
    "oversize_frame": oversize_frame,
    "silent": silent,
    "non_reader": non_reader,
}
KINDS = tuple(ATTACKS)


async def hostile(kind: str, urls: tuple[str, str], deadline: float, *, seed: int) -> HostileResult:
    """Run one kind of attack again and again until shortly before the deadline; `urls`: the
    proxy's, and one server process's own (for the non-reader)."""
    rng, result = random.Random(seed), HostileResult()
    run = ATTACKS[kind]
    url = urls[1] if kind == "non_reader" else urls[0]
    await asyncio.sleep(rng.uniform(1, 5))
    while time.monotonic() < deadline - 20:
        result.attempts += 1
        t0 = time.monotonic()
        try:
            ws = await run(url, result.errors)
            result.closes[str(ws.close_code)] += 1
            result.seconds_to_close.append(time.monotonic() - t0)
        except TimeoutError:
            result.closes["not closed"] += 1
        except (OSError, InvalidHandshake, ConnectionClosed) as e:
            result.closes[type(e).__name__] += 1
        await asyncio.sleep(rng.uniform(1, 4))
    return result
