"""Resumable sessions on a real server (127.0.0.1, tiny model): drops, parking, replay, tokens."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from simulmt.server.app import CaptionServer
from simulmt.server.config import PROTOCOL, Limits, ServerConfig
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from simulmt.client.stream import StartOptions, StreamClient, paced
from simulmt.engine import Engine
from simulmt.session import Session

TEXT = "ich habe heute einen Brief geschrieben . das Wetter ist schön . wir gehen nach Hause ."
START: dict[str, Any] = {"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=2"}


@functools.cache
def engine() -> Engine:
    return Engine.tiny(0)


@functools.cache
def reference(text: str = TEXT) -> tuple[str, ...]:
    session = Session(engine(), policy="wait-k:k=2")
    updates = [u for w in text.split() for u in session.push(w)] + session.finish()
    return tuple(u.text for u in updates if u.final)


@asynccontextmanager
async def running(**options: Any) -> AsyncIterator[CaptionServer]:
    config = ServerConfig(port=0, limits=Limits(idle_timeout_s=20), **options)
    server = CaptionServer(config, load=engine, model_name="tiny")
    await server.start()
    try:
        await server.wait_ready()
        yield server
    finally:
        await server.stop()


def url(server: CaptionServer) -> str:
    return f"ws://127.0.0.1:{server.port}/ws"


async def recv(ws: ClientConnection) -> dict[str, Any]:
    return dict(json.loads(await asyncio.wait_for(ws.recv(), 20)))


async def until(ws: ClientConnection, kind: str) -> list[dict[str, Any]]:
    got = [await recv(ws)]
    while got[-1]["type"] != kind:
        got.append(await recv(ws))
    return got


async def drain(ws: ClientConnection) -> list[dict[str, Any]]:
    """Everything until the server closes, whatever the close code."""
    out = []
    try:
        while True:
            out.append(await recv(ws))
    except ConnectionClosed:
        return out


def source(text: str) -> str:
    return json.dumps({"type": "source", "text": text})


async def parked(server: CaptionServer, n: int = 1) -> None:
    async with asyncio.timeout(10):
        while server.table.parked != n:
            await asyncio.sleep(0.01)


async def test_resume_replays_what_was_missed_and_ids_continue() -> None:
    words = TEXT.split()
    async with running() as server:
        ws = await connect(url(server))
        await ws.send(json.dumps(START))
        hello = await recv(ws)
        await ws.send(source(" ".join(words[:9])))  # the first sentence and 2 words more
        first = [hello, *await until(ws, "final")]
        ws.transport.abort()  # a network drop: no close frame (1006)
        await parked(server)
        assert len(server.table.sessions) == 1
        # the client pretends it lost the last messages it had in flight
        last_seq = first[-3]["seq"]
        resume = {"session_id": hello["session_id"], "token": hello["resume"]["token"],
                  "last_seq": last_seq}  # fmt: skip
        async with connect(url(server)) as again:
            await again.send(json.dumps({**START, "resume": resume}))
            second = await until(again, "session")
            replay, hello2 = second[:-1], second[-1]
            missed = [m for m in first if m["seq"] > last_seq]
            assert replay[: len(missed)] == missed  # exactly what it missed, in order
            # then whatever the server sent after the test stopped reading at the final (the two
            # extra words may already be translated before the drop): in order, no gap
            later = replay[len(missed) :]
            next_seq = first[-1]["seq"] + 1
            assert [m["seq"] for m in later] == list(range(next_seq, next_seq + len(later)))
            assert all(m.get("sentence_id") == 1 for m in later)
            assert hello2["session_id"] == hello["session_id"]
            assert hello2["resumed"] == {"received": 1, "ending": False}
            assert hello2["seq"] == replay[-1]["seq"] + 1
            await again.send(source(" ".join(words[9:])))
            await again.send(json.dumps({"type": "end"}))
            rest = [json.loads(m) async for m in again]
        assert again.close_code == 1000
    seen = {m["seq"]: m for m in first + second + rest}  # seq, not arrival, identifies
    assert sorted(seen) == list(range(1, len(seen) + 1))  # no gap
    finals = [seen[k] for k in sorted(seen) if seen[k]["type"] == "final"]
    assert [f["sentence_id"] for f in finals] == [0, 1, 2]  # ids keep counting
    assert tuple(f["text"] for f in finals) == reference()
    assert " ".join(f["source"] for f in finals) == TEXT  # every word once
    assert rest[-1] == {"type": "end", "sentences": 3, "seq": max(seen)}


async def test_every_resume_failure_answers_the_same(caplog: pytest.LogCaptureFixture) -> None:
    """Unknown session, wrong token, bad last_seq, expired: one `resume_failed` answer, word for
    word (it must not tell a guesser which ids exist); the cause goes to the server's log."""
    caplog.set_level(logging.INFO, logger="simulmt.server.sessions")
    # a window the three refusals fit in on a loaded CI machine (0.3 s did not, once)
    async with running(resume_window_s=2.0) as server:
        ws = await connect(url(server))
        await ws.send(json.dumps(START))
        hello = await recv(ws)
        sid, token = hello["session_id"], hello["resume"]["token"]
        ws.transport.abort()
        await parked(server)
        cases = [
            ({"session_id": "nope-1", "token": token, "last_seq": 1}, "no such session"),
            ({"session_id": sid, "token": "x" + token, "last_seq": 1}, "wrong resume token"),
            ({"session_id": sid, "token": token, "last_seq": 5}, "ahead of"),
        ]
        answers = []
        for resume, cause in cases:
            async with connect(url(server)) as bad:
                await bad.send(json.dumps({**START, "resume": resume}))
                [error] = await drain(bad)
            assert (error["code"], error["fatal"], bad.close_code) == ("resume_failed", True, 1008)
            answers.append(error["message"])
            assert cause in caplog.text and cause not in error["message"]
        await asyncio.sleep(2.2)  # the window passes
        assert server.table.parked == 0 and not server.table.sessions
        async with connect(url(server)) as late:
            resume = {"session_id": sid, "token": token, "last_seq": 1}
            await late.send(json.dumps({**START, "resume": resume}))
            [error] = await drain(late)
        answers.append(error["message"])
        assert error["code"] == "resume_failed" and "expired unresumed" in caplog.text
        assert len(set(answers)) == 1 and "start a new session" in answers[0]


async def test_a_parked_session_holds_its_slot() -> None:
    async with running(max_sessions=1) as server:
        ws = await connect(url(server))
        await ws.send(json.dumps(START))
        hello = await recv(ws)
        ws.transport.abort()
        await parked(server)
        async with connect(url(server)) as other:  # no room: the parked one counts
            await other.send(json.dumps(START))
            [error] = await drain(other)
        assert (error["code"], other.close_code) == ("overloaded", 1013)
        resume = {"session_id": hello["session_id"], "token": hello["resume"]["token"],
                  "last_seq": 1}  # fmt: skip
        async with connect(url(server)) as again:  # a resume needs no new slot
            await again.send(json.dumps({**START, "resume": resume}))
            assert (await recv(again))["resumed"] == {"received": 0, "ending": False}
            await again.send(source("das Wetter ist schön ."))
            await again.send(json.dumps({"type": "end"}))
            rest = [json.loads(m) async for m in again]
        assert [m["type"] for m in rest][-2:] == ["final", "end"]
        async with connect(url(server)) as fresh:  # the slot is free again
            await fresh.send(json.dumps(START))
            assert (await recv(fresh))["type"] == "session"


async def test_a_resume_takes_over_a_connection_the_server_thinks_alive() -> None:
    async with running() as server:
        old = await connect(url(server))
        await old.send(json.dumps(START))
        hello = await recv(old)
        resume = {"session_id": hello["session_id"], "token": hello["resume"]["token"],
                  "last_seq": 1}  # fmt: skip
        async with connect(url(server)) as new:
            await new.send(json.dumps({**START, "resume": resume}))
            assert "resumed" in await recv(new)
            await new.send(source("wir gehen ."))
            await new.send(json.dumps({"type": "end"}))
            rest = [json.loads(m) async for m in new]
        assert [m["source"] for m in rest if m["type"] == "final"] == ["wir gehen ."]
        assert new.close_code == 1000
        await old.wait_closed()
        assert old.close_code == 1008


async def test_client_resumes_by_itself_after_drops() -> None:
    """StreamClient: the connection is cut three times mid-sentence; the finals are those of
    one uninterrupted session, each source word in exactly one of them."""
    async with running() as server:
        client = StreamClient(url(server), start=StartOptions(policy="wait-k:k=2"))

        async def cut() -> None:
            # each cut waits for the resume of the one before: words sent while the client
            # reconnects go out as one frame, which can pass two marks at once, and a second
            # drop of the same connection is no drop (a flake under `pytest -n 2`)
            for i, at in enumerate((3, 8, 14)):
                while len(client.words) < at or client.resumes < i:
                    await asyncio.sleep(0.005)
                client.drop()

        cutter = asyncio.create_task(cut())
        log = await client.run(paced(TEXT.split(), 40))
        await cutter
    assert client.resumes == 3 and client.sessions == 1
    assert tuple(log.finals()) == reference()
    assert " ".join(m["source"] for m in log.messages if m["type"] == "final") == TEXT
    seqs = [m["seq"] for m in log.messages]
    assert seqs == list(range(1, len(seqs) + 1))  # no gap, no repeat
    assert sum("resumed" in m for m in log.messages) == 3
    assert log.close_code == 1000 and not log.errors
