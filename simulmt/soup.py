"""Average the weights of model folders fine-tuned from one model (`simulmt soup`).

Fine-tunes that start from the same weights stay in one basin, so their weighted mean (a "model
soup", Wortsman et al. 2022) is a model too, and often better than each ingredient: here it
keeps what one fine-tune learnt (copying names) and another (news words) without what each lost.
The folders must share the architecture and the tokenizer; a mismatch is refused, not averaged.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import torch

from simulmt.export import write_model_folder
from simulmt.model.checkpoint import CheckpointError, load_checkpoint

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        type=Path,
        action="append",
        required=True,
        help="a model folder (model.pt + spm.model); give it twice or more",
    )
    parser.add_argument(
        "--weights",
        default="",
        help="comma-separated weights, one per --model (default: equal); normalised to sum 1",
    )
    parser.add_argument("--out", type=Path, required=True, help="model folder to write")
    parser.add_argument("--name", default="", help="model name (default: the folder name)")
    parser.add_argument(
        "--fp32", action="store_true", help="keep float32 weights (default: float16, half the size)"
    )


def parse_weights(text: str, n: int) -> list[float]:
    """Weights for n models, normalised; equal when text is empty."""
    if not text:
        return [1.0 / n] * n
    try:
        raw = [float(x) for x in text.split(",")]
    except ValueError as e:
        raise ValueError(f"--weights {text!r}: expected numbers separated by commas") from e
    if len(raw) != n:
        raise ValueError(f"--weights has {len(raw)} values for {n} models: give one per --model")
    if any(w < 0 for w in raw) or sum(raw) <= 0:
        raise ValueError(f"--weights {text!r}: weights must be >= 0 and not all 0")
    return [w / sum(raw) for w in raw]


def soup(
    folders: list[Path],
    out: Path,
    *,
    weights: list[float] | None = None,
    name: str = "",
    fp16: bool = True,
) -> Path:
    """Write the weighted mean of the folders' weights as a model folder; returns its model.pt."""
    if len(folders) < 2:
        raise ValueError("a soup needs at least two model folders")
    ws = weights if weights is not None else [1.0 / len(folders)] * len(folders)
    if len(ws) != len(folders) or abs(sum(ws) - 1.0) > 1e-6:
        raise ValueError(
            f"{len(ws)} weights (sum {sum(ws)}) for {len(folders)} models: "
            "give one per model, summing to 1 (parse_weights normalises)"
        )
    payloads = [load_checkpoint(f / "model.pt") for f in folders]
    first = payloads[0]
    for folder, p in zip(folders[1:], payloads[1:], strict=True):
        if p["model_config"] != first["model_config"]:
            raise CheckpointError(
                f"{folder} has another architecture than {folders[0]} "
                f"({p['model_config']} vs {first['model_config']}): only fine-tunes of one "
                "model can be averaged"
            )
        if p.get("tokenizer") != first.get("tokenizer"):
            raise CheckpointError(
                f"{folder} has another tokenizer than {folders[0]}: only fine-tunes of one "
                "model can be averaged"
            )
        if set(p["model"]) != set(first["model"]):
            raise CheckpointError(f"{folder} and {folders[0]} hold different weight names")
    mean: dict[str, torch.Tensor] = {}
    for key, value in first["model"].items():
        if not value.is_floating_point():
            mean[key] = value
            continue
        total = sum(w * p["model"][key].double() for w, p in zip(ws, payloads, strict=True))
        assert isinstance(total, torch.Tensor)
        mean[key] = total.half() if fp16 else total.float()
    metas = [dict(p.get("meta", {})) for p in payloads]
    meta: dict[str, Any] = {
        "name": name or out.name,
        "src": metas[0].get("src", "de"),
        "tgt": metas[0].get("tgt", "en"),
        "steps": max(int(m.get("steps", 0)) for m in metas),
        # each fine-tune's hours are its own run's, so the sum is the compute of the whole soup
        "train_hours": round(sum(float(m.get("train_hours", 0.0)) for m in metas), 2),
        "soup": [
            {
                "model": str(m.get("name", f.name)),
                "weight": round(w, 6),
                "steps": m.get("steps", 0),
                "train_hours": m.get("train_hours", 0.0),
            }
            for f, m, w in zip(folders, metas, ws, strict=True)
        ],
    }
    payload = {
        "model_config": first["model_config"],
        "model": mean,
        "tokenizer": first["tokenizer"],
        "meta": meta,
        "train_config": first.get("train_config", {}),
    }
    path = write_model_folder(out, payload)
    extras = sorted(p.name for p in folders[0].glob("*.pt") if p.name != "model.pt")
    if extras:
        # a learned policy is trained on one model's states; the detector is model-free but
        # copying either silently would hide that choice
        log.info("not copied from %s: %s (copy them if they fit the soup)", folders[0], extras)
    return path


def run(args: argparse.Namespace) -> int:
    try:
        weights = parse_weights(args.weights, len(args.model))
        path = soup(args.model, args.out, weights=weights, name=args.name, fp16=not args.fp32)
    except (CheckpointError, ValueError, KeyError, OSError) as e:
        print(f"simulmt soup: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, weights {weights})")
    return 0
