"""Two `simulmt serve` processes behind a real nginx using deploy/nginx.conf, on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest
from simulmt.server.config import PROTOCOL
from websockets.asyncio.client import connect

from tests._server_helpers import free_ports

NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
CONF = Path(__file__).resolve().parents[1] / "deploy" / "nginx.conf"
SERVING = re.compile(r"serving (\S+) on http://127\.0\.0\.1:(\d+)/ .*instance (\w+)")
pytestmark = [
    pytest.mark.nginx,
    pytest.mark.slow,
    pytest.mark.skipif(
        NGINX is None, reason="Debian's nginx is not installed (`apt-get install nginx`)"
    ),
]


def _children(pid: int) -> list[int]:
    """The direct child processes of `pid` (Linux /proc)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        out += [int(c) for c in task.read_text().split()]
    return out


async def spawn_workers(port: int) -> tuple[asyncio.subprocess.Process, dict[int, str]]:
    """`simulmt serve --workers 2`: the processes' ports and instances, from their output.

    If the workers do not come up, the failure shows what they printed on both streams and,
    from faulthandler, where every thread of each worker stood (this once hung unexplained)."""
    errors = tempfile.TemporaryFile()  # a file, not a pipe: nobody has to drain it
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "simulmt.cli", "serve", "--tiny", "--workers", "2",
        "--port", str(port), "--threads", "1",
        stdout=asyncio.subprocess.PIPE, stderr=errors,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )  # fmt: skip
    assert proc.stdout is not None
    instances: dict[int, str] = {}
    seen: list[str] = []

    def printed() -> str:
        errors.seek(0)
        tail = errors.read().decode(errors="replace")[-12000:]
        return f"stdout {seen}; stderr (last 12000 characters):\n{tail}"

    try:
        async with asyncio.timeout(180):
            while len(instances) < 2:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    raise AssertionError(f"simulmt serve exited ({await proc.wait()}) before "
                                         f"serving; {printed()}")
                seen.append(line.rstrip())
                if match := SERVING.search(line):
                    instances[int(match.group(2))] = match.group(3)
    except TimeoutError:
        for child in _children(proc.pid):  # faulthandler prints each thread's stack on SIGABRT
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGABRT)
        await asyncio.sleep(2)
        raise AssertionError(f"both workers did not report serving in 180 s: {printed()}") from None
    finally:
        if len(instances) < 2:  # no test owns the processes yet: stop them, not leak them
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), timeout=30)
        errors.close()
    return proc, instances


def nginx_conf(tmp: Path, listen: int, backends: list[int]) -> Path:
    """deploy/nginx.conf with this test's ports and private temp folders."""
    text = CONF.read_text()
    assert "127.0.0.1:8701" in text and "127.0.0.1:8702" in text and "listen 8080;" in text
    text = text.replace("8701 127.0.0.1:8701", f"{backends[0]} 127.0.0.1:8701")  # routes
    text = text.replace("8702 127.0.0.1:8702", f"{backends[1]} 127.0.0.1:8702")
    text = text.replace("127.0.0.1:8701", f"127.0.0.1:{backends[0]}")
    text = text.replace("127.0.0.1:8702", f"127.0.0.1:{backends[1]}")
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{listen};")
    temps = "".join(
        f"    {kind}_temp_path {tmp / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    text = text.replace("http {\n", "http {\n" + temps + f"    access_log {tmp}/access.log;\n", 1)
    (tmp / "logs").mkdir()
    path = tmp / "nginx.conf"
    path.write_text(text)
    return path


async def session_through(url: str, text: str) -> tuple[str, list[dict[str, object]], int | None]:
    async with connect(url) as ws:
        await ws.send(json.dumps({"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=2"}))
        session = json.loads(await ws.recv())
        await asyncio.sleep(0.5)  # hold the session open while the others connect
        await ws.send(json.dumps({"type": "source", "text": text}))
        await ws.send(json.dumps({"type": "end"}))
        messages = [json.loads(m) async for m in ws]
    return str(session["resume"]["route"]), messages, ws.close_code  # route: the process's port


async def resume_through(url: str, instances: dict[int, str]) -> None:
    start = {"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=2"}
    ws = await connect(url)
    await ws.send(json.dumps(start))
    hello = json.loads(await ws.recv())
    route = hello["resume"]["route"]
    assert int(route) in instances  # route = its process's port; the resume below proves it
    ws.transport.abort()
    await asyncio.sleep(0.2)  # the drop reaches the server through nginx
    resume = {"session_id": hello["session_id"], "token": hello["resume"]["token"],
              "last_seq": 1}  # fmt: skip
    async with connect(f"{url}?route={route}") as again:
        await again.send(json.dumps({**start, "resume": resume}))
        assert json.loads(await again.recv())["resumed"]["received"] == 0
        await again.send(json.dumps({"type": "source", "text": "ja ."}))
        await again.send(json.dumps({"type": "end"}))
        messages = [json.loads(m) async for m in again]
    assert [m["source"] for m in messages if m["type"] == "final"] == ["ja ."]


async def test_sessions_spread_over_two_processes_behind_nginx(tmp_path: Path) -> None:
    assert NGINX is not None
    base = free_ports(2)
    workers, instances = await spawn_workers(base)  # the documented recipe
    assert sorted(instances) == [base, base + 1]
    listen = free_ports(1)
    conf = nginx_conf(tmp_path, listen, [base, base + 1])
    nginx = await asyncio.create_subprocess_exec(
        NGINX,
        "-p",
        str(tmp_path),
        "-c",
        str(conf),
        "-g",
        f"daemon off; pid {tmp_path / 'nginx.pid'}; error_log {tmp_path / 'error.log'};",
    )
    try:
        async with asyncio.timeout(20):
            while True:
                try:
                    await asyncio.open_connection("127.0.0.1", listen)
                    break
                except OSError:
                    await asyncio.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{listen}/healthz", timeout=10) as r:
            assert r.status == 200 and json.loads(r.read())["status"] == "ok"
        texts = [
            "ich habe heute einen Brief geschrieben .",
            "das Wetter ist schön .",
            "wir gehen nach Hause .",
            "ich habe heute",
        ]
        results = await asyncio.gather(
            *(session_through(f"ws://127.0.0.1:{listen}/ws", t) for t in texts)
        )
        served_by = {int(route) for route, _, _ in results}
        assert served_by == set(instances)  # sessions landed on both processes
        for (_, messages, close), text in zip(results, texts, strict=True):
            assert close == 1000
            assert [m["source"] for m in messages if m["type"] == "final"] == [text]
            assert [m["seq"] for m in messages] == list(range(2, len(messages) + 2))
        for _ in range(3):  # a resume through nginx reaches the process holding the session
            await resume_through(f"ws://127.0.0.1:{listen}/ws", instances)
    finally:
        nginx.send_signal(signal.SIGQUIT)
        await asyncio.wait_for(nginx.wait(), timeout=10)
        workers.send_signal(signal.SIGTERM)  # the supervisor passes it on to both
        assert await asyncio.wait_for(workers.wait(), timeout=30) == 0
