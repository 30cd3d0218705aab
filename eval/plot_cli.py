"""Plot quality–latency curves (BLEU vs AL) from `simulmt eval --output` directories."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulmt.eval.instances import SCORES_JSON, read_scores
from simulmt.eval.plot import PlotConfig, plot_curves, points_from_scores


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dirs", nargs="+", type=Path, metavar="DIR",
        help="an eval output directory (its policy subfolders are read) or one policy's folder",
    )  # fmt: skip
    parser.add_argument(
        "-o", "--output", type=Path, required=True, help="image file, e.g. curve.png"
    )
    parser.add_argument("--title", default=PlotConfig.title, help="figure title")
    parser.add_argument("--xlim", type=_range, help="AL range to show, e.g. 2.5,4.5 (a zoom)")
    parser.add_argument("--ylim", type=_range, help="BLEU range to show, e.g. 18,23")


def _range(text: str) -> tuple[float, float]:
    try:
        low, high = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH numbers, got {text!r}") from None
    return low, high


def find_runs(dirs: list[Path]) -> list[Path]:
    """Directories holding a scores.json: each DIR itself, or its immediate subfolders."""
    runs: list[Path] = []
    for d in dirs:
        if not d.is_dir():
            raise FileNotFoundError(f"{d} is not a directory")
        if (d / SCORES_JSON).is_file():
            runs.append(d)
            continue
        found = sorted(p.parent for p in d.glob(f"*/{SCORES_JSON}"))
        if not found:
            raise FileNotFoundError(
                f"no {SCORES_JSON} in {d} or its subfolders: pass directories written by "
                "`simulmt eval --output`"
            )
        runs.extend(found)
    return runs


def run(args: argparse.Namespace) -> int:
    try:
        records = [read_scores(d) for d in find_runs(args.dirs)]
        points = points_from_scores(records)
        config = PlotConfig(title=args.title, xlim=args.xlim, ylim=args.ylim)
        plot_curves(points, args.output, config=config)
    except (FileNotFoundError, ValueError) as e:
        print(f"simulmt plot: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.output} ({len(points)} points)")
    return 0
