"""`simulmt serve` as a process: startup line, /healthz, and a graceful SIGTERM."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from pathlib import Path

import pytest
from simulmt.server.config import PROTOCOL
from websockets.asyncio.client import connect

SERVING = re.compile(r"serving (\S+) on http://127\.0\.0\.1:(\d+)/ .*instance (\w+)")


async def spawn_server(*extra: str) -> tuple[asyncio.subprocess.Process, int, str]:
    """Start `simulmt serve --tiny --port 0`; return the process, its port and instance."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "simulmt.cli",
        "serve",
        "--tiny",
        "--port",
        "0",
        "--threads",
        "1",
        *extra,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    async with asyncio.timeout(180):  # the tiny model trains for a few seconds first
        while True:
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise AssertionError(f"simulmt serve exited ({await proc.wait()}) before serving")
            if match := SERVING.search(line):
                return proc, int(match.group(2)), match.group(3)


@pytest.mark.slow
async def test_sigterm_finishes_open_sentences_then_closes_1001() -> None:
    proc, port, instance = await spawn_server()
    try:
        async with connect(f"ws://127.0.0.1:{port}/ws") as ws:
            await ws.send(
                json.dumps({"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=2"})
            )
            session = json.loads(await ws.recv())
            assert session["type"] == "session" and instance not in session["session_id"]
            await ws.send(json.dumps({"type": "source", "text": "ich habe heute"}))  # left open
            # a non-fatal error proves the server has read the words before it
            await ws.send(json.dumps({"type": "source", "text": "x" * 101}))
            messages = []
            while not messages or messages[-1]["type"] != "error":
                messages.append(json.loads(await ws.recv()))
            assert messages[-1]["code"] == "word_too_long"
            proc.send_signal(signal.SIGTERM)
            messages += [json.loads(m) async for m in ws]
        finals = [m for m in messages if m["type"] == "final"]
        assert [f["source"] for f in finals] == ["ich habe heute"]
        assert ws.close_code == 1001
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_serve_refuses_bad_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from simulmt.cli import main

    for workers in ("1", "2"):  # before it listens or starts a worker
        assert main(["serve", "--model", str(tmp_path), "--workers", workers]) == 2
        err = capsys.readouterr().err
        assert f"no model at {tmp_path}: expected a folder with model.pt" in err
        assert "listening" not in err

    assert main(["serve", "--max-sessions", "0"]) == 2
    assert "max_sessions must be >= 1" in capsys.readouterr().err
    assert main(["serve", "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err
