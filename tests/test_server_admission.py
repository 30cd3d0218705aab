"""Admission control and parking on a real server (127.0.0.1, tiny model), issue 52 part A.

Silent connections get a handshake deadline and do not hold session slots; limits per client
address (the real one from X-Forwarded-For, believed only from trusted proxies); a flood of
frames is answered `rate_limited` and closed 1008; and a session the server closed itself is
never parked, while one the network dropped is.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from simulmt.server.admission import Addresses
from simulmt.server.app import CaptionServer
from simulmt.server.config import PROTOCOL, Admission, ServerConfig
from simulmt.server.ratelimit import Bucket
from websockets.asyncio.client import ClientConnection, connect
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests._server_helpers import running

START = json.dumps({"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=2"})


def url(server: CaptionServer) -> str:
    return f"ws://127.0.0.1:{server.port}/ws"


async def read_all(ws: ClientConnection) -> list[dict[str, Any]]:
    out = []
    try:
        async with asyncio.timeout(60):  # a hang guard
            async for raw in ws:
                out.append(json.loads(raw))
    except ConnectionClosed:
        pass
    return out


async def started(ws: ClientConnection) -> dict[str, Any]:
    await ws.send(START)
    return dict(json.loads(await asyncio.wait_for(ws.recv(), 60)))


async def settled(server: CaptionServer) -> None:
    """Until every connection has ended on the server's side."""
    async with asyncio.timeout(60):
        while server.connections:
            await asyncio.sleep(0.02)


def errors(messages: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    return [(m["code"], m["fatal"]) for m in messages if m["type"] == "error"]


# ---- parking: only what the network dropped ----


async def test_a_dropped_connection_is_parked() -> None:
    async with running() as server:
        async with connect(url(server)) as ws:
            await started(ws)
            ws.transport.abort()  # the network fails: the server sees 1006
        await settled(server)
        assert server.table.parked == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "how", ["frame over the transport cap (1009)", "invalid UTF-8 (1007)", "flood (1008)"]
)
async def test_a_session_the_server_closed_is_not_parked(how: str) -> None:
    """A broken client does not answer the server's close either: the server then sees no
    close code from it (1006, as for a network drop), and must still not park the session."""
    admission = Admission(burst_messages=50)
    async with running(ServerConfig(port=0, hard_max_bytes=100_000, admission=admission)) as server:
        async with connect(url(server), max_size=None) as ws:
            await started(ws)
            [server_ws] = server._server.connections if server._server else []
            ws.transport.pause_reading()  # never sees (or echoes) the server's close
            if how.startswith("frame"):
                await ws.send(json.dumps({"type": "source", "text": "x" * 200_000}))
            elif how.startswith("invalid"):
                await ws.send(b'{"type":"source","text":"\xff\xfe"}', text=True)
            else:
                for _ in range(200):
                    await ws.send('{"type":"ping"}')
            await settled(server)
            assert server.table.parked == 0 and not server.table.sessions
            ws.transport.abort()
        sent = server_ws.protocol.close_sent
        assert sent is not None and sent.code == int(how[-5:-1])
        assert server_ws.close_code == 1006  # what the server saw: no close from the client


# ---- silent connections ----


async def test_silent_connections_hold_no_session_slot_and_are_closed() -> None:
    admission = Admission(handshake_timeout_s=3, max_unstarted=4)
    async with running(ServerConfig(port=0, max_sessions=1, admission=admission)) as server:
        silent = [await connect(url(server)) for _ in range(3)]
        async with connect(url(server)) as real:  # the one session slot is still free
            assert (await started(real))["type"] == "session"
            silent.append(await connect(url(server)))  # the 4th waiting for `start`
            async with connect(url(server)) as late:  # over max_unstarted: refused at once
                assert errors(await read_all(late)) == [("overloaded", True)]
            assert late.close_code == 1013
            silent_out = await asyncio.gather(*(read_all(ws) for ws in silent))
        for ws, messages in zip(silent, silent_out, strict=True):
            [(code, fatal)] = errors(messages)
            assert (code, fatal) == ("idle_timeout", True)
            assert "no `start` message within 3 s" in messages[0]["message"]
            assert ws.close_code == 1008


# ---- per-address limits ----


async def test_connections_per_address_with_trusted_proxy() -> None:
    admission = Admission(max_connections_per_ip=2, trusted_proxies=("127.0.0.1",))
    async with running(ServerConfig(port=0, admission=admission)) as server:
        alice = {"X-Forwarded-For": "203.0.113.5"}
        held = [await connect(url(server), additional_headers=alice) for _ in range(2)]
        with pytest.raises(InvalidStatus) as info:
            await connect(url(server), additional_headers=alice)
        assert info.value.response.status_code == 429
        assert b"limit is 2 per address" in info.value.response.body
        bob = {"X-Forwarded-For": "198.51.100.7"}  # another client behind the same proxy
        async with connect(url(server), additional_headers=bob):
            pass
        for ws in held:
            await ws.close()
        await settled(server)
        async with connect(url(server), additional_headers=alice):
            pass  # a closed connection frees its place


async def test_forwarded_for_is_ignored_from_an_untrusted_peer() -> None:
    config = ServerConfig(port=0, admission=Admission(max_connections_per_ip=1))
    async with running(config) as server:
        async with connect(url(server), additional_headers={"X-Forwarded-For": "203.0.113.5"}):
            with pytest.raises(InvalidStatus) as info:  # both are 127.0.0.1 in truth
                await connect(url(server), additional_headers={"X-Forwarded-For": "10.1.1.1"})
            assert info.value.response.status_code == 429


async def test_sessions_per_address() -> None:
    async with running(ServerConfig(port=0, admission=Admission(max_sessions_per_ip=1))) as server:
        async with connect(url(server)) as first, connect(url(server)) as second:
            assert (await started(first))["type"] == "session"
            await second.send(START)
            messages = await read_all(second)
            assert errors(messages) == [("overloaded", True)]
            assert "this address has its limit of 1 sessions" in messages[0]["message"]
            assert second.close_code == 1013


def test_client_address_from_the_forwarded_chain() -> None:
    book = Addresses(Admission(trusted_proxies=("10.0.0.0/8", "127.0.0.1")))
    xff = Headers([("X-Forwarded-For", "198.51.100.7, 203.0.113.5, 10.2.3.4")])
    assert book.client_of("127.0.0.1", xff) == "203.0.113.5"  # the first untrusted from the right
    assert book.client_of("192.0.2.1", xff) == "192.0.2.1"  # an untrusted peer's header: ignored
    assert book.client_of("10.9.9.9", Headers([("X-Forwarded-For", "junk")])) == "10.9.9.9"
    assert book.client_of("10.9.9.9", Headers()) == "10.9.9.9"
    with pytest.raises(ValueError, match="not an IP address"):
        Admission(trusted_proxies=("proxy.example",))


# ---- rate limits ----


def test_token_bucket() -> None:
    now = [0.0]
    bucket = Bucket(rate=2.0, burst=3.0, clock=lambda: now[0])
    assert [bucket.take(1) for _ in range(4)] == [True, True, True, False]
    now[0] = 1.0  # two tokens back
    assert [bucket.take(1) for _ in range(3)] == [True, True, False]


async def test_a_flood_is_rate_limited_with_few_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    """The issue's probe: 3000 pings and 2000 unknown types in a burst made 2000 error replies
    and 2000 INFO lines. Now the burst ends in one `rate_limited` error and close 1008."""
    caplog.set_level(logging.INFO, logger="simulmt")
    async with running() as server:
        async with connect(url(server)) as ws:
            await started(ws)
            try:
                for i in range(3000):
                    await ws.send('{"type":"ping"}' if i % 2 else '{"type":"shout"}')
            except ConnectionClosed:
                pass
            messages = await read_all(ws)
        assert ws.close_code == 1008
        codes = errors(messages)
        assert codes[-1] == ("rate_limited", True)
        assert len(codes) <= Admission().burst_messages  # one unknown_type each, then the end
        assert "messages per second" in messages[-1]["message"]
        info = [r for r in caplog.records if r.levelno >= logging.INFO and "shout" in r.message]
        assert not info  # frame errors are debug lines
    assert server.table.parked == 0


async def test_unread_frames_buffer_is_small() -> None:
    async with running(ServerConfig(port=0, admission=Admission(max_queue=3))) as server:
        async with connect(url(server)):
            [server_ws] = server._server.connections if server._server else []
            assert server_ws.max_queue_high == 3
