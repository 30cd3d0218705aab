"""`simulmt plot`: quality–latency curves from eval output directories."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from simulmt.eval import plot_cli
from simulmt.eval.plot import CurvePoint, points_from_scores

# synthetic results shaped like the HMT paper's curve (REFERENCES.md), not real measurements
SYNTHETIC = [
    ("wait-k:k=1", 2.2, 20.1), ("wait-k:k=3", 3.5, 24.3), ("wait-k:k=5", 4.7, 26.0),
    ("wait-k:k=7", 6.4, 27.1), ("wait-k:k=9", 8.0, 27.6),
    ("confidence:threshold=0.3", 2.8, 23.5), ("confidence:threshold=0.6", 4.1, 26.2),
    ("confidence:threshold=0.9", 6.0, 27.5), ("full", 21.0, 28.9),
]  # fmt: skip


def write_synthetic(root: Path) -> None:
    for policy, al, bleu in SYNTHETIC:
        d = root / policy.replace(":", "_").replace("=", "")
        d.mkdir(parents=True)
        (d / "scores.json").write_text(json.dumps({"policy": policy, "al": al, "bleu": bleu}))


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    plot_cli.add_arguments(parser)
    return plot_cli.run(parser.parse_args(argv))


def test_plot_writes_png(tmp_path: Path) -> None:
    write_synthetic(tmp_path / "runs")
    out = tmp_path / "curve.png"
    assert _run([str(tmp_path / "runs"), "-o", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_points_group_by_family() -> None:
    records = [{"policy": p, "al": a, "bleu": b} for p, a, b in SYNTHETIC]
    points = points_from_scores(records)
    assert points[1] == CurvePoint("wait-k", "k=3", 3.5, 24.3)
    assert {p.family for p in points} == {"wait-k", "confidence", "full"}
    band = points_from_scores([{"policy": "learned:threshold=0.5,k_max=2", "al": 3, "bleu": 17}])
    assert band == [CurvePoint("learned k_max=2", "threshold=0.5", 3.0, 17.0)]
    units = points_from_scores([{"policy": "wait-k:k=3", "al": 3, "bleu": 20, "unit": u}
                                for u in ("token", "word")])
    assert [p.family for p in units] == ["wait-k (token-level)", "wait-k"]


def test_plot_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run([str(tmp_path), "-o", str(tmp_path / "x.png")]) == 2
    assert "simulmt plot: no scores.json" in capsys.readouterr().err
    with pytest.raises(ValueError, match="needs policy, al and bleu"):
        points_from_scores([{"policy": "wait-k:k=1", "bleu": 3.0}])


def test_zoomed_plot_and_bad_ranges(tmp_path: Path) -> None:
    write_synthetic(tmp_path / "runs")
    out = tmp_path / "zoom.png"
    assert _run([str(tmp_path / "runs"), "-o", str(out), "--xlim", "2,5", "--ylim", "19,27"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit):
        _run([str(tmp_path / "runs"), "-o", str(out), "--xlim", "2"])
    assert _run([str(tmp_path / "runs"), "-o", str(out), "--xlim", "5,2"]) == 2
