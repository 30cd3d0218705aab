"""End to end: a real server on 127.0.0.1 (port 0) with the tiny model, real websocket clients."""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from simulmt.server.app import CaptionServer
from simulmt.server.config import PROTOCOL, Limits, ServerConfig
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from simulmt.client.stream import StartOptions, StreamLog, paced, run_stream
from simulmt.engine import Engine
from simulmt.session import Session

SENTENCES = ["ich habe heute einen Brief geschrieben .", "das Wetter ist schön .", "wir gehen"]
TEXT = " ".join(SENTENCES)  # the last sentence has no final punctuation: `end` finishes it


@functools.cache
def engine() -> Engine:
    return Engine.tiny(0)  # trains on one thread whatever the caller's setting


@functools.cache
def reference_finals(policy: str, text: str = TEXT) -> tuple[str, ...]:
    """What a Session alone makes of `text`, word by word."""
    session = Session(engine(), policy=policy)  # never while a server is running
    updates = [u for w in text.split() for u in session.push(w)] + session.finish()
    finals: dict[int, str] = {}
    for u in updates:
        if u.final:
            finals.setdefault(u.sentence_id, u.text)  # the first final of a sentence counts
    return tuple(finals.values())


@asynccontextmanager
async def running(
    config: ServerConfig | None = None, load: Callable[[], Engine] = engine
) -> AsyncIterator[CaptionServer]:
    server = CaptionServer(
        config or ServerConfig(port=0, limits=Limits(idle_timeout_s=20)),
        load=load,
        model_name="tiny",
    )
    await server.start()
    try:
        await server.wait_ready()
        yield server
    finally:
        await server.stop()


def ws_url(server: CaptionServer, path: str = "/ws") -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


async def stream(
    server: CaptionServer, policy: str, text: str = TEXT, rate: float = 0
) -> StreamLog:
    return await run_stream(
        ws_url(server), paced(text.split(), rate), start=StartOptions(policy=policy)
    )


def check_stream(log: StreamLog) -> None:
    """The protocol's guarantees, on everything one connection received."""
    assert [m["seq"] for m in log.messages] == list(range(1, len(log.messages) + 1))
    assert log.messages[0]["type"] == "session" and log.messages[-1]["type"] == "end"
    committed: dict[int, str] = {}
    words: dict[int, int] = {}
    finished: list[int] = []
    for m in log.messages:
        if m["type"] == "partial":
            sid = m["sentence_id"]
            assert sid not in finished, "partial after the sentence's final"
            committed[sid] = committed.get(sid, "") + m["committed_delta"]
            assert (
                len(m["delays"]) == len(m["emitted_ms"]) == m["committed_len"] - words.get(sid, 0)
            )
            words[sid] = m["committed_len"]
            assert all(1 <= d for d in m["delays"])
        elif m["type"] == "final":
            # committed text is never retracted: the final is exactly the committed pieces joined
            assert m["text"] == committed.get(m["sentence_id"], "")
            finished.append(m["sentence_id"])
    assert finished == sorted(finished) == list(range(len(finished)))
    assert log.messages[-1]["sentences"] == len(finished)
    assert log.close_code == 1000


async def test_happy_path_matches_a_session_alone() -> None:
    async with running() as server:
        log = await stream(server, "wait-k:k=2")
    check_stream(log)
    assert log.session is not None
    assert log.session["model"] == "tiny-0"
    assert log.session["limits"]["live_max_sentence_words"] > 0
    assert [m["source"] for m in log.messages if m["type"] == "final"] == SENTENCES
    assert tuple(log.finals()) == reference_finals("wait-k:k=2")


@pytest.mark.parametrize(
    "policy",
    [
        "alignatt:f=2",
        "confidence:threshold=0.5",
        "adaptive-wait-k:rho=0.6,d=0.2",
        "wait-if-worse",
        "local-agreement",
    ],
)
async def test_adaptive_policies_through_the_server_match_a_session_alone(policy: str) -> None:
    """Policies that read the model's attention or distribution (and re-translation) decide the
    same through the server's batched worker as in a Session alone."""
    async with running() as server:
        log = await stream(server, policy)
    check_stream(log)
    assert tuple(log.finals()) == reference_finals(policy)


async def test_chunking_does_not_change_the_translation() -> None:
    """One message per word, everything in one message, or paced: the same finals."""
    async with running() as server:
        per_word = await stream(server, "wait-k:k=3")
        paced_log = await stream(server, "wait-k:k=3", rate=40)
        async with connect(ws_url(server, "/")) as ws:  # "/" takes websockets too
            await ws.send(
                json.dumps({"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=3"})
            )
            await ws.send(json.dumps({"type": "source", "text": TEXT}))
            await ws.send(json.dumps({"type": "end"}))
            at_once = [json.loads(m) async for m in ws]
    finals = [m["text"] for m in at_once if m["type"] == "final"]
    assert finals == per_word.finals() == paced_log.finals() == list(reference_finals("wait-k:k=3"))


async def test_concurrent_sessions_equal_each_alone() -> None:
    policies = ["wait-k:k=1", "wait-k:k=3", "full", "wait-k:k=2", "wait-k:k=1"]
    texts = [TEXT, " ".join(reversed(SENTENCES[:2])), TEXT, SENTENCES[1], TEXT]
    async with running() as server:
        logs = await asyncio.gather(
            *(stream(server, p, t, rate=25) for p, t in zip(policies, texts, strict=True))
        )
        stats = server.worker.stats
    for log, policy, text in zip(logs, policies, texts, strict=True):
        check_stream(log)
        assert tuple(log.finals()) == reference_finals(policy, text), policy
    assert stats.max_batch > 1  # the sessions really were advanced together


async def test_batching_window_and_steps_per_turn_keep_outputs() -> None:
    """A batching window gathers sessions into fuller batches; several decoder steps per
    turn send updates less often; neither changes what any session outputs."""
    policies = ["wait-k:k=1", "wait-k:k=3", "full", "wait-k:k=2"]
    texts = [TEXT, SENTENCES[1], TEXT, " ".join(reversed(SENTENCES[:2]))]
    config = ServerConfig(
        port=0, limits=Limits(idle_timeout_s=20), batch_window_ms=30, steps_per_turn=2
    )
    async with running(config) as server:
        logs = await asyncio.gather(
            *(stream(server, p, t, rate=40) for p, t in zip(policies, texts, strict=True))
        )
    for log, policy, text in zip(logs, policies, texts, strict=True):
        check_stream(log)
        assert tuple(log.finals()) == reference_finals(policy, text), policy
    with pytest.raises(ValueError, match="batch_window_ms must be >= 0"):
        ServerConfig(batch_window_ms=-1)
    with pytest.raises(ValueError, match="steps_per_turn must be >= 1"):
        ServerConfig(steps_per_turn=0)


@pytest.mark.parametrize(("window_s", "expected_max_batch"), [(0.0, 1), (1.0, 2)])
async def test_batching_window_gathers_staggered_arrivals(
    window_s: float, expected_max_batch: int
) -> None:
    """Two streams whose words arrive 200 ms apart: without a window the idle worker starts on
    the first at once; with one, both words go through the same turn."""
    from simulmt.server.ops import Op, OpKind
    from simulmt.server.worker import Stream, Worker

    worker = Worker(engine, max_batch=8, batch_window_s=window_s)
    worker.start(asyncio.get_running_loop())
    eng = await worker.wait_loaded()
    got: list[object] = []
    streams = [Stream(Session(eng, policy="wait-k:k=1"), got.append) for _ in range(2)]
    try:
        worker.submit(streams[0], Op(OpKind.FEED, ("Hallo",)))
        await asyncio.sleep(0.2)
        worker.submit(streams[1], Op(OpKind.FEED, ("Hallo",)))
        for _ in range(100):
            if len(got) >= 2 and worker.pending_count() == 0:
                break
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
    assert worker.stats.max_batch == expected_max_batch


async def test_resuming_a_stream_given_back_mid_work_wakes_the_worker() -> None:
    """A turn gives a stream with unfinished work back without ops; if its reader then pauses
    and resumes it while nothing else is runnable, the sleeping worker must wake for it (it did
    not: the connection waited for the model, the model for a wake-up, until the idle timeout)."""
    from simulmt.server.worker import Stream, Worker

    worker = Worker(engine, max_batch=8)
    worker.start(asyncio.get_running_loop())
    eng = await worker.wait_loaded()
    got: list[object] = []
    stream = Stream(Session(eng, policy="wait-k:k=1"), got.append)
    try:
        await worker.call(lambda _: stream.session.feed("Ich habe heute ein Buch gelesen ."))
        with worker._cond:  # the state such a turn leaves: pending, no ops, paused meanwhile
            stream.paused = True
            worker._pending[id(stream)] = stream
        await asyncio.sleep(0.1)
        assert not got  # paused: no compute
        worker.set_paused(stream, False)
        for _ in range(250):
            if got:
                break
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
    assert got, "the worker slept through the resume"


async def test_healthz_and_pages() -> None:
    async with running() as server:
        base = f"http://127.0.0.1:{server.port}"
        health = await asyncio.to_thread(_get, base + "/healthz")
        page = await asyncio.to_thread(_get, base + "/")
        script = await asyncio.to_thread(_get, base + "/static/captions.js")
        missing = await asyncio.to_thread(_get, base + "/nope")
        plain_ws = await asyncio.to_thread(_get, base + "/ws")
    assert health[0] == 200 and json.loads(health[2])["status"] == "ok"
    assert page[0] == 200 and page[1]["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in page[1]["Content-Security-Policy"]
    assert b"captions.js" in page[2]
    assert script[0] == 200 and b"textContent" in script[2] and b"innerHTML" not in script[2]
    assert missing[0] == 404 and plain_ws[0] == 426


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


async def test_healthz_is_503_until_the_model_loads() -> None:
    release = threading.Event()

    def slow_load() -> Engine:
        release.wait(timeout=30)
        return engine()

    server = CaptionServer(ServerConfig(port=0), load=slow_load, model_name="tiny")
    await server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/healthz"
        status, _, body = await asyncio.to_thread(_get, url)
        assert (status, json.loads(body)["status"]) == (503, "loading")
        with pytest.raises(InvalidStatus) as info:
            async with connect(ws_url(server)):
                pass
        assert info.value.response.status_code == 503
        release.set()
        await server.wait_ready()
        assert (await asyncio.to_thread(_get, url))[0] == 200
    finally:
        release.set()
        await server.stop()


async def test_a_model_that_never_loads_fails_the_server_after_the_load_timeout() -> None:
    release = threading.Event()

    def hung() -> Engine:
        release.wait(timeout=60)  # a hung disk or device
        return engine()

    server = CaptionServer(ServerConfig(port=0, load_timeout_s=0.3), load=hung, model_name="x")
    await server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/healthz"
        with pytest.raises(TimeoutError, match="did not load within 0.3 s"):
            async with asyncio.timeout(20):
                await server.wait_ready()
        assert server.failed.is_set()  # `simulmt serve` exits for its supervisor to restart
        status, _, body = await asyncio.to_thread(_get, url)
        assert (status, json.loads(body)["worker"]) == (503, "load_hung")
    finally:
        release.set()
        await server.stop()


async def test_a_model_that_fails_to_load_is_reported() -> None:
    def broken() -> Engine:
        raise FileNotFoundError("no model at /nowhere")

    server = CaptionServer(ServerConfig(port=0), load=broken, model_name="x")
    await server.start()
    try:
        with pytest.raises(FileNotFoundError):
            await server.wait_ready()
        status, _, body = await asyncio.to_thread(_get, f"http://127.0.0.1:{server.port}/healthz")
        assert status == 503  # status and counts; the path and the error text go to the log
        health = json.loads(body)
        assert (health["status"], health["worker"]) == ("failed", "load_failed")
        assert "/nowhere" not in body.decode() and "error" not in health
    finally:
        await server.stop()


async def test_graceful_stop_sends_finals_then_shutting_down_and_1001() -> None:
    async with running() as server:
        opened = []
        for text in ("ich habe heute", "das Wetter"):  # sentences left open
            ws = await connect(ws_url(server))
            await ws.send(
                json.dumps({"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=2"})
            )
            await ws.send(json.dumps({"type": "source", "text": text}))
            assert json.loads(await ws.recv())["type"] == "session"
            opened.append(ws)
        idle = await connect(ws_url(server))  # connected, never started
        while sorted(c.machine.words_in for c in server.connections) != [0, 2, 3]:
            await asyncio.sleep(0.01)  # the server has read the words
        await server.stop()
        for ws, text in zip(opened, ("ich habe heute", "das Wetter"), strict=True):
            messages = [json.loads(m) async for m in ws]
            finals = [m for m in messages if m["type"] == "final"]
            assert [f["source"] for f in finals] == [text]
            assert messages[-1]["type"] == "error" and messages[-1]["code"] == "shutting_down"
            assert messages[-1]["fatal"] is True
            assert ws.close_code == 1001
        told = json.loads(await idle.recv())  # not started: told at once
        assert (told["code"], told["fatal"]) == ("shutting_down", True)
        with pytest.raises(ConnectionClosed):
            await idle.recv()
        assert idle.close_code == 1001
        with pytest.raises(OSError):
            async with connect(ws_url(server), open_timeout=2):
                pass


def test_a_message_with_a_word_over_the_token_limit_is_dropped_whole() -> None:
    """The worker checks a FEED op with the session's own check before feeding its first slice:
    the bad message is dropped whole and reported, the next one is fed in budget-sized slices."""
    from simulmt.server.ops import Op, OpKind
    from simulmt.server.protocol import ErrorCode
    from simulmt.server.worker import Stream, Turn

    from simulmt.search.options import SearchOptions

    eng = engine()
    opts = SearchOptions(max_len_ratio=20.0)  # 25 source tokens a sentence
    session = Session(eng, policy="wait-k:k=1", options=opts)
    word = "Hundbuchlesenstraßeschnellgarten" * 2
    assert len(eng.tokenizer.encode_word(word, first=False)) > session.max_tokens == 25
    turn = Turn()
    ops = [Op(OpKind.FEED, ("heute", word), feed=1), Op(OpKind.FEED, ("ein", "Buch"), feed=2)]
    rest = turn.play(eng, Stream(session, lambda _: None), ops, budget=1)
    [error] = turn.rejected
    assert error.code is ErrorCode.WORD_TOO_LONG
    assert "subword tokens" in error.message and "whole message was dropped" in error.message
    assert turn.words_taken == 3  # the dropped two and the fed one
    assert turn.dropped == [(1, 0, 2)]  # message 1, words 0..1: the metrics forget them
    assert rest == [Op(OpKind.FEED, ("Buch",), checked=True, feed=2, offset=1)]
    assert [w for s in session.sentences for w in s.words] == ["ein"]
