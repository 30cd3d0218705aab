"""README's quick start, run as a new user types it (the server on the tiny model, for speed).

The commands are read from README's `sh` blocks under "## Quick start", so a README edit that
breaks a command breaks this test. Two adaptations: `simulmt serve` gets `--tiny` and a free
port, and `simulmt client` is pointed at that port and sends as fast as it can.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def quickstart_commands() -> list[str]:
    """Every line of the `sh` blocks between '## Quick start' and the next '## ' heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "README has no '## Quick start' section"
    blocks = re.findall(r"^```sh\n(.*?)^```", section.group(1), re.S | re.M)
    lines = [ln.strip() for block in blocks for ln in block.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """README's serve command, on the tiny model and a free port."""
    (serve,) = [c for c in quickstart_commands() if c.startswith("simulmt serve")]
    port = _free_port()
    argv = shlex.split(serve)
    if "--port" in argv:
        i = argv.index("--port")
        del argv[i:i + 2]
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*argv, "--tiny", "--port", str(port), "--threads", "1"],
                                env=_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "serve did not come up: " + log.read_text()
            time.sleep(0.3)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_readme_has_the_quickstart_commands() -> None:
    commands = quickstart_commands()
    for head in ("simulmt serve", "simulmt client", "simulmt translate"):
        assert any(head in c for c in commands), f"quick start lacks `{head}`"


@pytest.mark.slow
def test_quickstart_commands_run(server: int, tmp_path: Path) -> None:
    """Every quick-start line runs and does what README says (files written, text shown)."""
    outputs: dict[str, str] = {}
    for command in quickstart_commands():
        if command.startswith("simulmt serve"):
            continue  # the fixture runs it
        if command.startswith("simulmt client"):
            command += f" --url ws://127.0.0.1:{server}/ws --rate 0"
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=_env(),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{command!r} failed:\n{done.stdout}\n{done.stderr}"
        outputs[command] = done.stdout
    # what the quick start promises: subtitles from the client, English from translate
    for name in re.findall(r"--(?:vtt|srt) (\S+)", " ".join(outputs)):
        assert (tmp_path / name).is_file() and (tmp_path / name).stat().st_size > 0, name
    (translated,) = [out for c, out in outputs.items() if "simulmt translate" in c]
    assert re.search(r"[A-Za-z]{2,}", translated), translated
    listed = [out for c, out in outputs.items() if c.strip() == "simulmt policies"]
    assert not listed or "wait-k" in listed[0]
