"""`serve --model-worker process`: the model and every session live in a child process.

The same protocol and captions as the thread worker (a session's finals equal a Session's
alone), a session factory's error reaches the client across the pipe, a model that fails to
load is reported, and a killed child ends every session with `internal` (1011) and turns
/healthz 503, as a dead worker thread does."""

from __future__ import annotations

import asyncio
import functools
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from simulmt.server.app import CaptionServer
from simulmt.server.config import PROTOCOL, Limits, ModelWorkerKind, ServerConfig
from simulmt.server.worker_process import ProcessWorker
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from simulmt.client.stream import StartOptions, paced, run_stream
from simulmt.engine import Engine
from simulmt.session import Session
from tests._server_helpers import engine, running

TEXT = "ich habe heute einen Brief geschrieben . das Wetter ist schön . wir gehen"
PROCESS = ServerConfig(port=0, model_worker=ModelWorkerKind.PROCESS,
                       limits=Limits(idle_timeout_s=20))
TINY = functools.partial(Engine.tiny, 0)  # picklable: the child builds the same tiny model


def health(server: CaptionServer) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def finals_alone(policy: str) -> list[str]:
    session = Session(engine(), policy=policy)
    updates = [u for w in TEXT.split() for u in session.push(w)] + session.finish()
    finals: dict[int, str] = {}
    for u in updates:
        if u.final:
            finals.setdefault(u.sentence_id, u.text)
    return list(finals.values())


async def test_sessions_in_the_child_caption_as_a_session_alone() -> None:
    async with running(PROCESS, TINY) as server:
        assert isinstance(server.worker, ProcessWorker)
        url = f"ws://127.0.0.1:{server.port}/ws"
        logs = await asyncio.gather(*(
            run_stream(url, paced(TEXT.split(), 0), start=StartOptions(policy="wait-k:k=2"))
            for _ in range(3)
        ))
        status, body = await asyncio.to_thread(health, server)
    for log in logs:
        assert log.close_code == 1000 and log.session is not None
        assert log.session["model"] == "tiny-0"
        assert [m["seq"] for m in log.messages] == list(range(1, len(log.messages) + 1))
        assert list(log.finals()) == finals_alone("wait-k:k=2")
    assert status == 200 and body["worker"] == "ok" and body["precision"] == "float32"
    assert body["batches"] > 0 and body["sessions_advanced"] >= body["batches"]


async def test_a_session_factory_error_crosses_the_pipe() -> None:
    start = {"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=2", "src_lang": "fr"}
    async with running(PROCESS, TINY) as server:
        async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
            await ws.send(json.dumps(start))
            message = json.loads(await ws.recv())
            with pytest.raises(ConnectionClosed):
                await ws.recv()
        # the server goes on: a good session after the bad one
        log = await run_stream(f"ws://127.0.0.1:{server.port}/ws", paced(TEXT.split(), 0),
                               start=StartOptions(policy="wait-k:k=2"))
    assert (message["type"], message["code"]) == ("error", "bad_start")
    assert "src_lang" in message["message"] and ws.close_code == 1008
    assert list(log.finals()) == finals_alone("wait-k:k=2")


async def test_a_model_that_fails_to_load_in_the_child_is_reported(tmp_path: Path) -> None:
    missing = tmp_path / "no-model"
    server = CaptionServer(PROCESS, load=functools.partial(Engine.load, missing),
                           model_name="x")
    await server.start()
    try:
        with pytest.raises(Exception, match="no-model"):
            await server.wait_ready()
        status, body = await asyncio.to_thread(health, server)
        assert status == 503 and (body["status"], body["worker"]) == ("failed", "load_failed")
    finally:
        await server.stop()


async def test_a_killed_model_process_ends_sessions_and_turns_healthz_503() -> None:
    start = {"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=1"}
    async with running(PROCESS, TINY) as server:
        assert isinstance(server.worker, ProcessWorker) and server.worker.alive
        async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
            await ws.send(json.dumps(start))
            assert json.loads(await ws.recv())["type"] == "session"
            process = server.worker._process
            assert process is not None
            process.kill()  # what the kernel's OOM killer would do
            messages = []
            async with asyncio.timeout(30):
                try:
                    while True:
                        messages.append(json.loads(await ws.recv()))
                except ConnectionClosed:
                    pass
        assert [(m["code"], m["fatal"]) for m in messages if m["type"] == "error"] == [
            ("internal", True)
        ]
        assert ws.close_code == 1011 and server.failed.is_set()
        status, body = await asyncio.to_thread(health, server)
        assert status == 503 and (body["status"], body["worker"]) == ("failed", "dead")
