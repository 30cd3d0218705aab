"""bench/soak.py in its short form: 4 sessions for 30 s on the tiny model, two processes behind
nginx, with every kind of fault the seed draws, one hostile client of each kind beside them
(flood, oversize frame, silent, non-reader) and a SIGTERM to one process near the end."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[1] / "bench" / "soak.py"
pytestmark = [
    pytest.mark.nginx,
    pytest.mark.slow,
    pytest.mark.skipif(
        (shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")) is None,
        reason="Debian's nginx is not installed (`apt-get install nginx`)",
    ),
]


def test_short_soak_loses_and_repeats_nothing(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    argv = ["--tiny", "--sessions", "4", "--minutes", "0.5", "--faults", "12", "--seed", "3"]
    run = subprocess.run(
        [sys.executable, str(SOAK), *argv, "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.exists(), run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["words"] > 500
    assert (report["lost_words"], report["duplicated_words"], report["seq_gaps"]) == (0, 0, 0)
    assert report["ended_in_error"] == 0
    assert report["resumes"] >= 1  # drops were resumed...
    assert report["new_sessions"] >= 1  # ...and the SIGTERM moved sessions to the other process
    assert report["errors_received"].get("shutting_down", 0) >= 1
    assert len(report["faults"]) >= 4
    # the hostile clients beside them (#52): each ended by the server, the way it should be
    hostile = report["hostile"]
    assert set(hostile["flood_0"]["closes"]) == {"1008"}
    assert hostile["flood_0"]["errors"]["rate_limited"] == hostile["flood_0"]["attempts"] >= 1
    assert set(hostile["oversize_frame_0"]["closes"]) == {"1009"}
    assert set(hostile["silent_0"]["closes"]) == {"1008"}
    assert hostile["silent_0"]["errors"]["idle_timeout"] == hostile["silent_0"]["attempts"]
    assert "not closed" not in hostile["non_reader_0"]["closes"]
    assert run.returncode == 0
