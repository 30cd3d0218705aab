"""Bad input never crashes the server or disturbs a neighbour session.

Each case runs on a real server with the tiny model while a neighbour session streams
concurrently; the bad session gets its `error` (and, if fatal, the right close code) and the
neighbour's translation equals what a session alone makes of its text.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
from simulmt.server.app import CaptionServer
from simulmt.server.config import PROTOCOL, Limits, ServerConfig
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from simulmt.client.stream import StartOptions, paced, run_stream
from simulmt.engine import Engine
from simulmt.session import Session

TEXT = "ich habe heute einen Brief geschrieben . das Wetter ist schön ."
START = json.dumps({"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=2"})
END = json.dumps({"type": "end"})


def source(text: str) -> str:
    return json.dumps({"type": "source", "text": text})


@functools.cache
def engine() -> Engine:
    return Engine.tiny(0)  # trains on one thread whatever the caller's setting


@functools.cache
def reference(text: str, policy: str = "wait-k:k=2") -> tuple[str, ...]:
    session = Session(engine(), policy=policy)
    updates = [u for w in text.split() for u in session.push(w)] + session.finish()
    finals: dict[int, str] = {}
    for u in updates:
        if u.final:
            finals.setdefault(u.sentence_id, u.text)
    return tuple(finals.values())


@asynccontextmanager
async def running(config: ServerConfig, load: Callable[[], Engine] = engine) -> AsyncIterator[str]:
    server = CaptionServer(config, load=load, model_name="tiny")
    await server.start()
    try:
        await server.wait_ready()
        yield f"ws://127.0.0.1:{server.port}/ws"
    finally:
        await server.stop()


async def exchange(
    url: str, frames: Sequence[str | bytes], **connect_args: Any
) -> tuple[list[dict[str, Any]], int | None]:
    """Send frames, then read everything until the server closes (or 10 s of silence)."""
    async with connect(url, **connect_args) as ws:
        for frame in frames:
            try:
                await ws.send(frame)
            except ConnectionClosed:
                break
        messages = []
        try:
            async with asyncio.timeout(10):
                async for raw in ws:
                    messages.append(json.loads(raw))
        except (TimeoutError, ConnectionClosed):
            pass
    return messages, ws.close_code


async def beside_neighbour(url: str, bad: Callable[[], Awaitable[None]]) -> None:
    """Run `bad()` while a neighbour streams; the neighbour must come out as if alone."""
    expected = reference(TEXT)
    neighbour = asyncio.create_task(
        run_stream(url, paced(TEXT.split(), 30), start=StartOptions(policy="wait-k:k=2"))
    )
    await bad()
    log = await neighbour
    assert log.close_code == 1000 and not log.errors
    assert tuple(log.finals()) == expected


def errors(messages: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    return [(m["code"], m["fatal"]) for m in messages if m["type"] == "error"]


FATAL_CASES = [  # before `start` every bad frame ends the connection; so does a bad start
    ("non-JSON first", ["this is not json"], "bad_json", 1008),
    ("binary frame first", [b"\x00\x01binary"], "binary_frame", 1008),
    ("unknown type first", ['{"type":"shout"}'], "unknown_type", 1008),
    ("before start", [source("hallo")], "not_started", 1008),
    ("unknown policy", [START.replace("wait-k:k=2", "no-such-policy")], "bad_policy", 1008),
    ("bad policy arg", [START.replace("k=2", "k=zero")], "bad_policy", 1008),
    ("wrong protocol", [START.replace(PROTOCOL, "simulmt.v0")], "bad_start", 1008),
    ("unknown start field", [START[:-1] + ',"colour":"red"}'], "unknown_field", 1008),
    ("wrong language", [START[:-1] + ',"src_lang":"fr"}'], "bad_start", 1008),
    ("too big first", [source("wort " * 20_000)], "message_too_big", 1009),
]


@pytest.mark.parametrize(
    ("frames", "code", "close"), [c[1:] for c in FATAL_CASES], ids=[c[0] for c in FATAL_CASES]
)
async def test_fatal_bad_input(frames: list[str | bytes], code: str, close: int) -> None:
    async with running(ServerConfig(port=0)) as url:

        async def bad() -> None:
            messages, close_code = await exchange(url, frames)
            assert errors(messages) == [(code, True)]
            assert messages[-1]["type"] == "error" and messages[-1]["message"]
            assert close_code == close

        await beside_neighbour(url, bad)


async def test_bad_frames_mid_session_are_not_fatal() -> None:
    """After `start`, every bad frame gets its `error` and the session goes on: the sentence
    in flight is translated and its final arrives."""
    async with running(ServerConfig(port=0)) as url:

        async def bad() -> None:
            frames: list[str | bytes] = [
                START,
                source("ich habe heute"),
                "this is not json",
                b"\x00\x01binary",
                '{"type":"shout","loud":true}',  # a newer client's message type
                source("einen Brief")[:-1] + ',"lang":"de"}',  # an unknown field: still taken
                START,
                source("wort " * 20_000),
                source("geschrieben ."),
                END,
            ]
            messages, close_code = await exchange(url, frames)
            assert errors(messages) == [
                ("bad_json", False),
                ("binary_frame", False),
                ("unknown_type", False),
                ("unknown_field", False),
                ("already_started", False),
                ("message_too_big", False),
            ]
            shout = next(m for m in messages if m.get("code") == "unknown_type")
            assert "accepted: start, source, flush, end, ping" in shout["message"]
            finals = [m for m in messages if m["type"] == "final"]
            assert [f["source"] for f in finals] == ["ich habe heute einen Brief geschrieben ."]
            assert [f["text"] for f in finals] == list(
                reference("ich habe heute einen Brief geschrieben .")
            )
            assert messages[-1] == {"type": "end", "sentences": 1, "seq": len(messages)}
            assert close_code == 1000

        await beside_neighbour(url, bad)


async def test_frame_over_the_transport_cap_is_cut_with_1009() -> None:
    config = ServerConfig(port=0, hard_max_bytes=100_000)
    async with running(config) as url:

        async def bad() -> None:
            messages, close_code = await exchange(url, [START, source("x" * 200_000)])
            assert close_code == 1009

        await beside_neighbour(url, bad)


async def test_long_words_are_refused_and_long_sentences_cut() -> None:
    limits = Limits(max_word_chars=20, live_max_sentence_words=7)  # the neighbour's fit
    async with running(ServerConfig(port=0, limits=limits)) as url:

        async def bad() -> None:
            frames = [
                START,
                source("eins zwei drei vier"),
                source("fünf " + "x" * 21),  # word too long: the whole message is dropped
                source("fünf sechs sieben acht"),  # the session cuts the sentence at 7 words
                source("ende ."),
                END,
            ]
            messages, close_code = await exchange(url, frames)
            assert errors(messages) == [("word_too_long", False)]
            finals = [m for m in messages if m["type"] == "final"]
            assert [f["source"] for f in finals] == [
                "eins zwei drei vier fünf sechs sieben",
                "acht ende .",
            ]
            assert messages[-1] == {"type": "end", "sentences": 2, "seq": len(messages)}
            assert close_code == 1000

        await beside_neighbour(url, bad)


async def test_messages_after_end_are_refused_without_closing_early() -> None:
    async with running(ServerConfig(port=0)) as url:

        async def bad() -> None:
            long = " ".join(["wort"] * 40)  # keeps the session busy finishing after `end`
            frames = [START.replace("wait-k:k=2", "full"), source(long), END, source("mehr"), "x"]
            messages, close_code = await exchange(url, frames)
            assert errors(messages) == [("after_end", False), ("bad_json", False)]
            assert [m["type"] for m in messages][-2:] == ["final", "end"]
            assert close_code == 1000

        await beside_neighbour(url, bad)


async def test_idle_session_is_closed() -> None:
    async with running(ServerConfig(port=0, limits=Limits(idle_timeout_s=0.5))) as url:
        messages, close_code = await exchange(url, [START])
        assert errors(messages) == [("idle_timeout", True)]
        assert close_code == 1008


async def test_max_sessions_answers_1013() -> None:
    async with running(ServerConfig(port=0, max_sessions=2)) as url:

        async def bad() -> None:
            async with connect(url) as holder:  # the neighbour plus this one fill the server
                await holder.send(START)
                await holder.recv()
                messages, close_code = await exchange(url, [START])
                assert errors(messages) == [("overloaded", True)]
                assert close_code == 1013

        await beside_neighbour(url, bad)


async def test_allowed_origins() -> None:
    config = ServerConfig(port=0, allowed_origins=("https://captions.example",))
    async with running(config) as url:
        with pytest.raises(InvalidStatus) as info:
            async with connect(url, origin="https://evil.example"):  # type: ignore[arg-type]
                pass
        assert info.value.response.status_code == 403
        for origin in ("https://captions.example", None):  # listed, or not a browser
            messages, close_code = await exchange(url, [START, END], origin=origin)
            assert close_code == 1000 and messages[0]["type"] == "session"


class FaultyEngine(Engine):
    """The tiny model with one injected fault: encoding the word KAPUTT raises, alone or in a
    batch with other sessions' words (`encode_many` is the sessions' one encode path)."""

    def encode_many(self, sources: Sequence[Any], words: Sequence[Sequence[str]]) -> float:
        if any("KAPUTT" in ws for ws in words):
            raise RuntimeError("injected fault")
        return super().encode_many(sources, words)


@functools.cache
def faulty_engine() -> Engine:
    base = engine()
    return FaultyEngine(base.model, base.tokenizer, base.info)


async def test_internal_failure_closes_1011_and_spares_the_neighbour() -> None:
    first, second = "das Wetter ist schön .", "wir gehen nach Hause ."
    async with running(ServerConfig(port=0), load=faulty_engine) as url:
        async with connect(url) as neighbour:
            await neighbour.send(START)
            await neighbour.send(source(first))
            got = [json.loads(await neighbour.recv())]
            while got[-1]["type"] != "final":
                got.append(json.loads(await neighbour.recv()))
            messages, close_code = await exchange(url, [START, source("ein KAPUTT Satz .")])
            assert errors(messages) == [("internal", True)]
            assert close_code == 1011
            await neighbour.send(source(second))
            await neighbour.send(END)
            got += [json.loads(m) async for m in neighbour]
        assert neighbour.close_code == 1000
    assert tuple(m["text"] for m in got if m["type"] == "final") == reference(f"{first} {second}")
