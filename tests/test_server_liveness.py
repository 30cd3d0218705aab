"""A dead or stuck model worker: /healthz turns 503, sessions end with `internal` (1011), and
`simulmt serve` exits non-zero so that a supervisor restarts it. Failed batches are retried
alone a bounded number of times. Faults are injected into a subclass of the tiny engine."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from simulmt.server.app import CaptionServer
from simulmt.server.config import PROTOCOL, ServerConfig
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from simulmt.engine import Engine
from tests._server_helpers import engine, free_ports
from tests._server_helpers import running as serving

START = json.dumps({"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=1"})
RELEASE = threading.Event()  # lets a stuck worker go at the end of a test


class WorkerKilled(BaseException):
    """Not an Exception: nothing in the worker catches it, so its thread ends."""


class FaultyEngine(Engine):
    """The tiny model; encoding the word TOT kills the worker thread, HÄNGT blocks it."""

    def encode_many(self, sources: Sequence[Any], words: Sequence[Sequence[str]]) -> float:
        if any("TOT" in ws for ws in words):
            raise WorkerKilled("injected")
        if any("HÄNGT" in ws for ws in words):
            RELEASE.wait(timeout=60)
        return super().encode_many(sources, words)


class BatchBugEngine(Engine):
    """Every batched turn fails and every retry alone succeeds (a batching bug)."""

    def step(self, requests: Sequence[Any]) -> Any:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_name != "_retry_alone":
            frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            raise RuntimeError("injected batch fault")
        return super().step(requests)


@functools.cache
def faulty(kind: type[Engine]) -> Engine:
    """The shared tiny model in a faulty subclass."""
    base = engine()
    return kind(base.model, base.tokenizer, base.info)


def running(
    config: ServerConfig, load: Callable[[], Engine]
) -> AbstractAsyncContextManager[CaptionServer]:
    return serving(config, load, before_stop=RELEASE.set)  # lets a stuck worker go first


def health(server: CaptionServer) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def until_closed(ws: ClientConnection) -> list[dict[str, Any]]:
    messages = []
    async with asyncio.timeout(30):
        try:
            while True:
                messages.append(json.loads(await ws.recv()))
        except ConnectionClosed:
            return messages


async def test_a_dead_worker_turns_healthz_503_and_ends_sessions() -> None:
    RELEASE.clear()
    async with running(ServerConfig(port=0), lambda: faulty(FaultyEngine)) as server:
        assert (await asyncio.to_thread(health, server))[0] == 200
        async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
            await ws.send(START)
            await ws.send(json.dumps({"type": "source", "text": "ich bin TOT"}))
            messages = await until_closed(ws)
        assert [(m["code"], m["fatal"]) for m in messages if m["type"] == "error"] == [
            ("internal", True)
        ]
        assert ws.close_code == 1011 and server.failed.is_set()
        status, body = await asyncio.to_thread(health, server)
        assert status == 503 and (body["status"], body["worker"]) == ("failed", "dead")
        assert "TOT" not in json.dumps(body) and "injected" not in json.dumps(body)
        assert server.instance not in json.dumps(body)  # the instance id is for the log only


async def test_a_stuck_worker_turns_healthz_503_and_ends_sessions() -> None:
    RELEASE.clear()
    config = ServerConfig(port=0, worker_stall_s=0.5)
    async with running(config, lambda: faulty(FaultyEngine)) as server:
        async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
            await ws.send(START)
            await ws.send(json.dumps({"type": "source", "text": "es HÄNGT"}))
            messages = await until_closed(ws)
        assert messages[-1]["code"] == "internal" and ws.close_code == 1011
        status, body = await asyncio.to_thread(health, server)
        assert status == 503 and body["worker"] == "stuck"
        assert server.worker_failure is not None and server.worker_failure.value == "stuck"


async def test_failed_batches_are_retried_alone_a_bounded_number_of_times() -> None:
    """Each sentence takes one failed batched turn and one retry alone; with two retries
    allowed in a row, the third sentence ends the session (without a bound it would go on)."""
    for retries, survives in ((2, False), (5, True)):
        config = ServerConfig(port=0, step_retries=retries)
        async with running(config, lambda: faulty(BatchBugEngine)) as server:
            async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
                await ws.send(START)
                finals, errors = 0, []
                for sentence in ("ja .", "nein .", "gut ."):
                    await ws.send(json.dumps({"type": "source", "text": sentence}))
                    async with asyncio.timeout(30):
                        while True:
                            m = json.loads(await ws.recv())
                            if m["type"] in ("final", "error"):
                                break
                    finals += m["type"] == "final"
                    errors += [m["code"]] if m["type"] == "error" else []
            assert (finals, errors) == ((3, []) if survives else (2, ["internal"]))
            assert server.worker.stats.failed_batches == 3
            assert (await asyncio.to_thread(health, server))[
                0
            ] == 200  # one session's failure is not the worker's


async def _serve_patched(patch: str, *serve_args: str) -> asyncio.subprocess.Process:
    """`simulmt serve --tiny` in a child process, after the Python lines `patch` ran there."""
    args = ["serve", "--tiny", "--port", "0", "--threads", "1", *serve_args]
    script = f"import sys\nfrom simulmt.cli import main\n{patch}sys.exit(main({args!r}))\n"
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", script,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


@pytest.mark.slow
async def test_serve_exits_non_zero_when_the_worker_dies() -> None:
    """`simulmt serve` in a child process, its engine patched to kill the worker on TOT."""
    proc = await _serve_patched(KILL_ON_TOT)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        async with asyncio.timeout(180):
            line = ""
            while "serving" not in line:
                line = (await proc.stdout.readline()).decode()
                assert line, "serve exited before serving"
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        async with connect(f"ws://127.0.0.1:{port}/ws") as ws:
            await ws.send(START)
            await ws.send(json.dumps({"type": "source", "text": "ich bin TOT"}))
            messages = await until_closed(ws)
        assert messages[-1]["code"] == "internal" and ws.close_code == 1011
        code = await asyncio.wait_for(proc.wait(), timeout=60)
        err = (await proc.stderr.read()).decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 3, err[-2000:]
    assert "the model worker is dead" in err and "the model worker died" in err


KILL_ON_TOT = """\
import simulmt.engine as E
original = E.Engine.encode_many
class Killed(BaseException): pass
def encode_many(self, sources, words):
    if any('TOT' in ws for ws in words): raise Killed('injected')
    return original(self, sources, words)
E.Engine.encode_many = encode_many
"""


@pytest.mark.slow
async def test_workers_restart_a_process_whose_worker_died(tmp_path: Path) -> None:
    """`serve --workers 2`: the process whose worker died exits 3 and is started again on its
    port; the other one never stops. The fault comes from a sitecustomize on PYTHONPATH,
    which every child process imports."""
    (tmp_path / "sitecustomize.py").write_text(KILL_ON_TOT, encoding="utf-8")
    base = free_ports(2)  # the workers take base and base + 1
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "simulmt.cli", "serve", "--tiny", "--workers", "2",
        "--port", str(base), "--threads", "1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env,
    )  # fmt: skip
    assert proc.stdout is not None

    async def serving(ports: set[int]) -> None:
        async with asyncio.timeout(240):
            while ports:
                line = (await proc.stdout.readline()).decode()  # type: ignore[union-attr]
                assert line, "serve --workers exited"
                ports -= {p for p in ports if f"127.0.0.1:{p}/" in line and "serving" in line}

    try:
        await serving({base, base + 1})
        async with connect(f"ws://127.0.0.1:{base}/ws") as ws:
            await ws.send(START)
            await ws.send(json.dumps({"type": "source", "text": "ich bin TOT"}))
            assert (await until_closed(ws))[-1]["code"] == "internal"
        await serving({base})  # started again on its port
        for port in (base, base + 1):
            async with connect(f"ws://127.0.0.1:{port}/ws") as ws:
                await ws.send(START)
                await ws.send(json.dumps({"type": "source", "text": "ja ."}))
                await ws.send(json.dumps({"type": "end"}))
                messages = await until_closed(ws)
            assert ws.close_code == 1000 and messages[-1]["type"] == "end"
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=60) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.mark.slow
async def test_serve_exits_for_a_restart_when_the_model_never_loads() -> None:
    """`simulmt serve` in a child process whose model load hangs: after --load-timeout-s it
    exits with the status a supervisor restarts on, its hung loading thread no obstacle."""
    hang = (
        "import threading, simulmt.engine as E\n"
        "E.Engine.tiny = classmethod(lambda cls, seed=0: threading.Event().wait())\n"
    )
    proc = await _serve_patched(hang, "--load-timeout-s", "1")
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 3, err.decode()[-2000:]
    assert b"did not load within 1 s" in err and b"serving" not in out
