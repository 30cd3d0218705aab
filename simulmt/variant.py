"""Store a second set of weights beside a model as a low-rank delta (`simulmt variant`).

`simulmt variant --base DIR --target DIR2 --name recognizer --rank 64` writes
DIR/recognizer.pt: DIR2's weights as DIR's plus the truncated SVD of each matrix's difference
(simulmt.model.delta). Sessions that ask for the variant (`input: recognizer`, or `simulmt
eval --source-style asr`) get DIR's weights with the delta added; the rest get DIR's own. DIR2
must be a fine-tune (or soup) of DIR: same architecture and tokenizer.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from simulmt.model.checkpoint import CheckpointError, load_checkpoint
from simulmt.model.delta import (
    DeltaError,
    apply_delta,
    check_variant_name,
    make_delta,
    save_delta,
    variant_file,
)

__all__ = ["write_variant"]

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", type=Path, required=True, help="the model folder it extends")
    parser.add_argument(
        "--target", type=Path, required=True, help="a fine-tune (or soup) of --base: the weights"
    )
    parser.add_argument(
        "--name", default="recognizer", help="the variant's name (default: %(default)s)"
    )
    parser.add_argument(
        "--rank", type=int, default=64, help="rank kept of each matrix's delta (default: 64)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="file to write (default: BASE/NAME.pt)"
    )


def write_variant(base: Path, target: Path, *, name: str, rank: int, out: Path | None) -> Path:
    """Write the delta and return its path; says how much of the move the rank kept."""
    path = out if out is not None else variant_file(base, name)
    check_variant_name(name)
    b, t = load_checkpoint(base / "model.pt"), load_checkpoint(target / "model.pt")
    if b["model_config"] != t["model_config"]:
        raise CheckpointError(f"{target} has another architecture than {base}")
    if b.get("tokenizer") != t.get("tokenizer"):
        raise CheckpointError(f"{target} has another tokenizer than {base}")
    delta = make_delta(b["model"], t["model"], rank=rank, name=name)
    rebuilt = apply_delta(b["model"], delta)
    moved = kept = 0.0
    for key, value in t["model"].items():
        if value.is_floating_point():
            full = value.double() - b["model"][key].double()
            moved += float(full.pow(2).sum())
            kept += float((rebuilt[key].double() - value.double()).pow(2).sum())
    save_delta(path, delta)
    share = 1.0 - (kept / moved) ** 0.5 if moved else 1.0
    log.info("rank %d keeps %.1f%% of the move (Frobenius norm of what is left)", rank, 100 * share)
    return path


def run(args: argparse.Namespace) -> int:
    try:
        path = write_variant(args.base, args.target, name=args.name, rank=args.rank, out=args.out)
    except (CheckpointError, DeltaError, ValueError, OSError) as e:
        print(f"simulmt variant: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0

