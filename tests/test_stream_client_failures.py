"""StreamClient against a server that fails its sessions: it starts over after an `internal`
error, but not forever when every new session fails again before a final."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from simulmt.client.stream import MAX_FAILED_SESSIONS, StreamClient, paced


def _fake_server(sessions: list[dict[str, Any]], *, heal_after: int | None = None) -> Any:
    """A handler that answers every `start` with a session, then fails it with `internal`
    (fatal, close 1011); from session `heal_after` on it gives each source a final and ends."""

    async def handler(ws: ServerConnection) -> None:
        start = json.loads(await ws.recv())
        n = len(sessions)
        sessions.append(start)
        await ws.send(json.dumps({"type": "session", "seq": 1, "session_id": f"s{n}",
                                  "resume": {"token": "t", "window_s": 0}}))  # fmt: skip
        if heal_after is None or n < heal_after:
            await ws.send(json.dumps({"type": "error", "seq": 2, "code": "internal",
                                      "message": "boom", "fatal": True}))  # fmt: skip
            await ws.close(1011)
            return
        seq = 1
        async for frame in ws:
            msg = json.loads(frame)
            seq += 1
            if msg["type"] == "source":
                final = {"type": "final", "seq": seq, "sentence_id": seq, "source": msg["text"],
                         "text": msg["text"].upper()}  # fmt: skip
                await ws.send(json.dumps(final))
            elif msg["type"] == "end":
                await ws.send(json.dumps({"type": "end", "seq": seq + 1}))
                await ws.close(1000)
                return

    return handler


async def _words() -> AsyncIterator[str]:
    async for text in paced(["eins zwei drei"], rate=0):
        yield text


async def test_a_stream_whose_every_session_fails_stops_after_a_bounded_number() -> None:
    sessions: list[dict[str, Any]] = []
    async with serve(_fake_server(sessions), "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        client = StreamClient(f"ws://127.0.0.1:{port}/ws")
        with pytest.raises(ConnectionError, match="internal error"):
            await client.run(_words())
    assert len(sessions) == MAX_FAILED_SESSIONS  # not one more: the words would fail again
    assert all(s["type"] == "start" for s in sessions)


async def test_one_failed_session_is_started_over_and_the_words_sent_again() -> None:
    sessions: list[dict[str, Any]] = []
    async with serve(_fake_server(sessions, heal_after=1), "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        client = StreamClient(f"ws://127.0.0.1:{port}/ws")
        log = await client.run(_words())
    assert len(sessions) == 2 and client.confirmed == 3
    assert log.close_code == 1000
