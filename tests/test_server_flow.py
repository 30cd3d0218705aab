"""Flow control that keeps the connection alive, and a stop that always ends (issue 52, part A).

On a real server (127.0.0.1, tiny model): the reader goes on reading while words wait for the
model (up to `max_backlog_words`, then `backlog_full`), a client that reads none of its output
is closed with 1008 after `drain_timeout_s`, `stop()` returns after the grace time whatever the
clients do, and per-session memory (the replay log) is capped in bytes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from simulmt.server.app import CaptionServer
from simulmt.server.config import PROTOCOL, Limits, ServerConfig
from simulmt.server.machine import Build, Send, SessionMachine
from websockets.asyncio.client import ClientConnection, connect

from tests._server_helpers import engine, running

START = json.dumps({"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=1"})
END = json.dumps({"type": "end"})
SENTENCE = "ich habe heute einen Brief geschrieben ."
SERVING = re.compile(r"serving \S+ on http://127\.0\.0\.1:(\d+)/")


def source(text: str) -> str:
    return json.dumps({"type": "source", "text": text})


@asynccontextmanager
async def non_reader(server: CaptionServer) -> AsyncIterator[ClientConnection]:
    """A client with tiny socket buffers on both ends that reads nothing until told."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    url = f"ws://127.0.0.1:{server.port}/ws"
    async with connect(url, sock=sock, max_queue=1, compression=None) as ws:
        await ws.send(START)
        assert json.loads(await ws.recv())["type"] == "session"
        [server_ws] = server._server.connections if server._server else []
        server_sock = server_ws.transport.get_extra_info("socket")
        server_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # no kernel slack
        yield ws


async def until(condition: Any, what: str) -> None:
    async with asyncio.timeout(60):  # a hang guard, not a timing assertion
        while not condition():
            await asyncio.sleep(0.02)


async def test_the_reader_keeps_reading_while_words_wait() -> None:
    """A client that stops reading: the server stops computing for it (its outbox is bounded)
    but goes on reading its frames, takes words up to `max_backlog_words`, refuses the rest
    with `backlog_full`, and delivers everything it took once the client reads again."""
    config = ServerConfig(port=0, outbox_high_water=8, max_backlog_words=50, write_limit_bytes=4096)
    n = 100
    async with running(config) as server, non_reader(server) as ws:
        [conn] = server.connections
        for _ in range(n):
            await ws.send(source(SENTENCE))
        await ws.send('{"type":"ping"}')
        await until(lambda: conn.machine.received == n + 1, "every frame read")
        assert conn.machine.inflight <= config.max_backlog_words
        assert conn.max_outbox <= config.outbox_high_water + 100  # plus one turn's output
        await ws.send(END)
        messages = [json.loads(m) async for m in ws]  # now read: nothing taken was lost
    assert ws.close_code == 1000
    assert [m["seq"] for m in messages] == list(range(2, len(messages) + 2))
    refused = [m for m in messages if m["type"] == "error"]
    assert refused and {(m["code"], m["fatal"]) for m in refused} == {("backlog_full", False)}
    assert "at most 50 may wait" in refused[0]["message"]
    finals = [m["source"] for m in messages if m["type"] == "final"]
    assert finals == [SENTENCE] * (n - len(refused))


@pytest.mark.slow
async def test_a_client_that_reads_nothing_is_closed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="simulmt.server")
    config = ServerConfig(port=0, drain_timeout_s=1, write_limit_bytes=4096, ping_interval_s=None)
    async with running(config) as server, non_reader(server) as ws:
        for _ in range(100):
            await ws.send(source(SENTENCE))
        await until(lambda: not server.connections, "closed")
        assert not server.table.sessions and server.table.parked == 0  # closed, not parked
    assert any("read none of its output for 1 s" in r.message for r in caplog.records)


@pytest.mark.slow
async def test_stop_ends_although_a_client_reads_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """The issue's probe: with a client that never reads, `stop()` logged "grace time over"
    and had not returned 15 s later. Now its socket is aborted; and a parked session is logged
    before it is dropped."""
    caplog.set_level(logging.INFO, logger="simulmt.server")
    config = ServerConfig(
        port=0, shutdown_timeout_s=0.5, write_limit_bytes=4096, ping_interval_s=None
    )
    server = CaptionServer(config, load=engine, model_name="tiny")
    await server.start()
    await server.wait_ready()
    url = f"ws://127.0.0.1:{server.port}/ws"
    async with connect(url) as dropped:
        await dropped.send(START)
        await dropped.recv()
        dropped.transport.abort()
    await until(lambda: server.table.parked == 1, "parked")
    async with non_reader(server) as ws:
        for _ in range(100):
            await ws.send(source(SENTENCE))
        await until(lambda: any(c._paused for c in server.connections), "writer stuck")
        async with asyncio.timeout(60):  # a hang guard: it used to wait on the client forever
            await server.stop()
        assert not server.connections
    assert any("dropped at shutdown while parked" in r.message for r in caplog.records)


def test_the_replay_log_is_capped_in_bytes() -> None:
    config = ServerConfig(limits=Limits(max_message_bytes=4096), replay_bytes=8192)
    m = SessionMachine(config=config, session_id="s", model="tiny", token="t")
    m.receive(START)
    assert isinstance(m.take()[0], Build)
    m.started()
    sizes = []
    for i in range(200):  # each error echoes part of the frame: ~150 bytes
        m.receive(json.dumps({"type": f"x{i:03d}" + "y" * 30}))
        sizes += [len(e.text) for e in m.take() if isinstance(e, Send)]
    assert sum(sizes) > 4 * config.replay_bytes
    kept = sum(len(text) for _, text in m._log)
    assert kept <= config.replay_bytes
    problem = m.resume_problem(1)
    assert problem is not None and "at most 8192 bytes" in problem
    assert m.resume_problem(m.seq - 10) is None  # the recent ones are kept


def test_session_warnings_are_capped_in_count_and_bytes() -> None:
    from simulmt.output.notes import MAX_NOTE, Notes
    from simulmt.session import Session

    notes = Notes(max_notes=10, max_bytes=500)
    for i in range(100):
        notes.append(f"note {i:03d} " + "x" * 40)
    assert len(notes) <= 10 and notes.size <= 500 and notes[-1].startswith("note 099")
    assert notes.dropped == 100 - len(notes)
    notes.append("y" * 10 * MAX_NOTE)
    assert len(notes[-1]) == MAX_NOTE and notes.size <= 500 + MAX_NOTE
    session = Session(engine(), policy="wait-k:k=1")
    assert isinstance(session.warnings, Notes)  # what the server's sessions warn into


@pytest.mark.slow
async def test_sigterm_ends_the_process_whatever_a_client_does() -> None:
    """`simulmt serve --shutdown-timeout-s 1` with a client that reads nothing and never closes:
    the process still exits (0) after the grace time; it used to wait on the client."""
    options = ["--shutdown-timeout-s", "1", "--drain-timeout-s", "600", "--threads", "1"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "simulmt.cli", "serve", "--tiny", "--port", "0", *options,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    async with asyncio.timeout(180):  # the tiny model trains for a few seconds first
        while not (match := SERVING.search((await proc.stdout.readline()).decode())):
            assert proc.returncode is None, "simulmt serve exited before serving"
    port = int(match.group(1))
    try:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        url = f"ws://127.0.0.1:{port}/ws"
        async with connect(url, sock=sock, max_queue=1, ping_interval=None) as ws:
            await ws.send(START)
            assert json.loads(await ws.recv())["type"] == "session"
            ws.transport.pause_reading()  # from now on it reads nothing, not even a close
            for _ in range(100):
                await ws.send(source(SENTENCE))
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), timeout=120) == 0  # a hang guard
            ws.transport.abort()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_limit_options_reach_the_config() -> None:
    import argparse

    from simulmt.server.cli import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--max-connections-per-ip", "3", "--trusted-proxies", "10.0.0.0/8", "127.0.0.1",
         "--messages-per-s", "5", "--max-backlog-words", "99", "--drain-timeout-s", "7",
         "--handshake-timeout-s", "2.5", "--shutdown-timeout-s", "4"]
    )  # fmt: skip
    config = config_from_args(args)
    a = config.admission
    assert (a.max_connections_per_ip, a.messages_per_s, a.handshake_timeout_s) == (3, 5.0, 2.5)
    assert a.trusted_proxies == ("10.0.0.0/8", "127.0.0.1")
    assert (config.max_backlog_words, config.drain_timeout_s, config.shutdown_timeout_s) == (
        99, 7.0, 4.0,
    )  # fmt: skip
    with pytest.raises(ValueError, match="not an IP address"):
        config_from_args(parser.parse_args(["--trusted-proxies", "nginx"]))
