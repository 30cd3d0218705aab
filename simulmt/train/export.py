"""Export a training run as a model folder (`simulmt export`): averaged, fp16, self-contained."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import torch

from simulmt.model.checkpoint import (
    CheckpointError,
    average_state_dicts,
    load_checkpoint,
    save_checkpoint,
)

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run", type=Path, required=True, help="training run folder (with step-*.pt, last.pt)"
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="model folder to write (model.pt + spm.model)"
    )
    parser.add_argument(
        "--average",
        type=int,
        default=1,
        help="average the last N step checkpoints (checkpoint averaging)",
    )
    parser.add_argument(
        "--name", default="", help="model name shown to clients (default: the folder name)"
    )
    parser.add_argument(
        "--fp32", action="store_true", help="keep float32 weights (default: float16, half the size)"
    )


def export(run: Path, out: Path, *, average: int = 1, name: str = "", fp16: bool = True) -> Path:
    steps = sorted(run.glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    chosen = steps[-average:] if steps else [run / "last.pt"]
    base = load_checkpoint(chosen[-1])
    weights = average_state_dicts(chosen) if len(chosen) > 1 else base["model"]
    if fp16:
        weights = {k: v.half() if v.is_floating_point() else v for k, v in weights.items()}
    if base["model_config"].get("tie_embeddings", True):
        # tied: out_proj.weight is embed.weight; the loader re-ties it (a copy would add 12 MB)
        weights = {k: v for k, v in weights.items() if k != "out_proj.weight"}
    train_cfg = dict(base.get("train_config", {}))
    warm = dict(base.get("warm_start", {}))
    run_steps = int(base.get("progress", {}).get("step", 0))
    meta = {
        "name": name or out.name,
        "src": train_cfg.get("src", "de"),
        "tgt": train_cfg.get("tgt", "en"),
        "steps": int(warm.get("steps", 0)) + run_steps,  # updates in all, earlier runs included
        # wall hours of this run's training loop (0: its checkpoints predate the count)
        "train_hours": round(float(base.get("progress", {}).get("seconds", 0.0)) / 3600, 2),
        "averaged": [p.name for p in chosen],
    }
    if warm:
        meta["warm_start"] = {**warm, "run_steps": run_steps}
    payload = {
        "model_config": base["model_config"],
        "model": weights,
        "tokenizer": base["tokenizer"],
        "meta": meta,
        "train_config": train_cfg,
    }
    return write_model_folder(out, payload)


def write_model_folder(out: Path, payload: dict[str, Any]) -> Path:
    """A loadable model folder: model.pt, the tokenizer beside it, and a readable config.json."""
    out.mkdir(parents=True, exist_ok=True)
    save_checkpoint(out / "model.pt", payload)
    (out / "spm.model").write_bytes(payload["tokenizer"])
    (out / "config.json").write_text(
        json.dumps({"meta": payload["meta"], "model": payload["model_config"]}, indent=2) + "\n"
    )
    return out / "model.pt"


def run(args: argparse.Namespace) -> int:
    try:
        path = export(args.run, args.out, average=args.average, name=args.name, fp16=not args.fp32)
    except (CheckpointError, KeyError, OSError) as e:
        print(f"simulmt export: {e}", file=sys.stderr)
        return 2
    size = path.stat().st_size / 1e6
    print(f"wrote {path} ({size:.1f} MB, {torch.__version__})")
    return 0
