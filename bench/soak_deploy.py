"""The soak's deployment: two `simulmt serve` processes behind deploy/nginx.conf on loopback.

Each process listens on its own port and is named by it (`--route`), and the config's route
map and upstream block are rewritten to those ports, as an operator would.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import socket
import sys
import tempfile
from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "deploy" / "nginx.conf"
SERVING = re.compile(r"serving (\S+) on http://127\.0\.0\.1:(\d+)/")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def nginx_conf(tmp: Path, listen: int, ports: list[int]) -> Path:
    text = CONF.read_text()
    routes = "".join(f"        {p} 127.0.0.1:{p};\n" for p in ports)
    text = re.sub(r"(        \d+ 127\.0\.0\.1:\d+;\n)+", routes, text, count=1)
    servers = "".join(
        f"        server 127.0.0.1:{p} max_fails=2 fail_timeout=10s;\n" for p in ports
    )
    text = re.sub(r"(        server 127\.0\.0\.1:\d+ [^\n]*\n)+", servers, text, count=1)
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{listen};")
    # every soak client comes from 127.0.0.1: lift the per-address limits (an operator's load
    # test would too); the hostile clients meet simulmt's per-connection limits instead
    text = re.sub(r"limit_conn simulmt_conn \d+;", "limit_conn simulmt_conn 60000;", text)
    text = re.sub(r"burst=\d+ nodelay", "burst=100000 nodelay", text)
    temps = "".join(f"    {k}_temp_path {tmp / k};\n" for k in
                    ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))  # fmt: skip
    text = text.replace("http {\n", "http {\n" + temps + "    access_log off;\n", 1)
    (tmp / "logs").mkdir(exist_ok=True)
    conf = tmp / "nginx.conf"
    conf.write_text(text)
    return conf


class Deployment:
    def __init__(self, args: argparse.Namespace, *, processes: int = 2) -> None:
        self.args = args
        self.n = processes
        self.processes: list[asyncio.subprocess.Process] = []
        self.ports: list[int] = []
        self.url = ""
        self._nginx: asyncio.subprocess.Process | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    async def __aenter__(self) -> Deployment:
        nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
        if nginx is None:
            raise SystemExit("the soak needs Debian's nginx (`apt-get install nginx`)")
        self.ports = [free_port() for _ in range(self.n)]
        await asyncio.gather(*(self._serve(port) for port in self.ports))
        self._tmp = tempfile.TemporaryDirectory(prefix="simulmt-soak-")
        tmp, listen = Path(self._tmp.name), free_port()
        conf = nginx_conf(tmp, listen, self.ports)
        self._nginx = await asyncio.create_subprocess_exec(
            nginx, "-p", str(tmp), "-c", str(conf),
            "-g", f"daemon off; pid {tmp / 'nginx.pid'}; error_log {tmp / 'error.log'};",
        )  # fmt: skip
        async with asyncio.timeout(20):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", listen)
                    writer.close()
                    break
                except OSError:
                    await asyncio.sleep(0.1)
        self.url = f"ws://127.0.0.1:{listen}/ws"
        return self

    async def _serve(self, port: int) -> None:
        a = self.args
        model = ["--tiny"] if a.tiny else (["--model", str(a.model)] if a.model else [])
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "simulmt.cli", "serve", "--port", str(port),
            "--route", str(port), "--threads", str(a.threads), "--max-sessions", "2000", *model,
            "--trusted-proxies", "127.0.0.1", "--max-connections-per-ip", "100000",
            "--max-sessions-per-ip", "100000", "--drain-timeout-s", str(a.drain_timeout_s),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        self.processes.append(proc)
        assert proc.stdout is not None
        async with asyncio.timeout(600):
            while line := (await proc.stdout.readline()).decode():
                if SERVING.search(line):
                    return
        raise RuntimeError(f"simulmt serve on port {port} did not start")

    def rss_mb(self) -> float:
        """Resident memory of the server processes still running, summed."""
        total = 0
        for proc in self.processes:
            if proc.returncode is None:
                status = Path(f"/proc/{proc.pid}/status").read_text()
                fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
                total += int(fields["VmRSS"].split()[0])
        return total / 1024

    async def __aexit__(self, *exc: object) -> None:
        if self._nginx is not None:
            self._nginx.terminate()
            await self._nginx.wait()
        for proc in self.processes:
            if proc.returncode is None:
                proc.terminate()
        await asyncio.gather(*(proc.wait() for proc in self.processes))
        if self._tmp is not None:
            self._tmp.cleanup()
