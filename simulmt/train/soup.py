"""Average the weights of model folders fine-tuned from one model (`simulmt soup`).

Fine-tunes that start from the same weights stay in one basin, so their weighted mean (a "model
soup", Wortsman et al. 2022) is a model too, and often better than each ingredient: here it
keeps what one fine-tune learnt (copying names) and another (news words) without what each lost.
The folders must share the architecture and the tokenizer; a mismatch is refused, not averaged.

With `--base` (the model they were all fine-tuned from) and `--scale S`, the soup of the
fine-tunes is moved S times as far from that base: base + S * (soup - base), task arithmetic
(Ilharco et al. 2023). S = 1 is the plain soup of the fine-tunes; an equal soup that counts the
base as one of n + 1 ingredients is S = n / (n + 1); S > 1 extrapolates (measured in
notes/model-notes.md, "Moving the soup further from the base").
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import torch

from simulmt.model.checkpoint import CheckpointError, load_checkpoint
from simulmt.train.export import write_model_folder

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
    parser.add_argument(
        "--base",
        type=Path,
        default=None,
        help="the folder every --model was fine-tuned from: write base + scale * (soup - base)",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=None,
        help="with --base: how far from the base, in units of the soup's distance (default 1)",
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
    base: Path | None = None,
    scale: float = 1.0,
) -> Path:
    """Write the weighted mean of the folders' weights as a model folder (with `base`: that
    mean moved `scale` times as far from the base); returns its model.pt."""
    if len(folders) < (1 if base is not None else 2):
        raise ValueError("a soup needs at least two model folders (or one and --base)")
    if not 0 < scale <= 4:
        raise ValueError(f"scale {scale}: expected a number in (0, 4]")
    if scale != 1.0 and base is None:
        raise ValueError("a scale needs the base model the folders were fine-tuned from (--base)")
    ws = weights if weights is not None else [1.0 / len(folders)] * len(folders)
    if len(ws) != len(folders) or abs(sum(ws) - 1.0) > 1e-6:
        raise ValueError(
            f"{len(ws)} weights (sum {sum(ws)}) for {len(folders)} models: "
            "give one per model, summing to 1 (parse_weights normalises)"
        )
    payloads = [load_checkpoint(f / "model.pt") for f in folders]
    first = payloads[0]
    others = list(zip(folders[1:], payloads[1:], strict=True))
    start = None  # the base's payload, checked like an ingredient's
    if base is not None:
        start = load_checkpoint(base / "model.pt")
        others.append((base, start))
    for folder, p in others:
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
        if start is not None:
            origin = start["model"][key].double()
            total = origin + scale * (total - origin)
        mean[key] = total.half() if fp16 else total.float()
    metas = [dict(p.get("meta", {})) for p in payloads]
    # the base's run is part of the compute of what is written
    counted = metas + ([dict(start.get("meta", {}))] if start is not None else [])
    meta: dict[str, Any] = {
        "name": name or out.name,
        "src": metas[0].get("src", "de"),
        "tgt": metas[0].get("tgt", "en"),
        "steps": max(int(m.get("steps", 0)) for m in counted),
        # each fine-tune's hours are its own run's, so the sum is the compute of the whole soup
        "train_hours": round(sum(float(m.get("train_hours", 0.0)) for m in counted), 2),
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
    if start is not None and base is not None:
        meta["base"] = str(start.get("meta", {}).get("name", base.name))
        meta["scale"] = scale
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
        if args.scale is not None and args.base is None:
            raise ValueError("--scale needs --base (the model the folders were fine-tuned from)")
        path = soup(args.model, args.out, weights=weights, name=args.name, fp16=not args.fp32,
                    base=args.base, scale=1.0 if args.scale is None else args.scale)
    except (CheckpointError, ValueError, KeyError, OSError) as e:
        print(f"simulmt soup: {e}", file=sys.stderr)
        return 2
    moved = f", {args.scale or 1.0}x as far from {args.base}" if args.base is not None else ""
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, weights {weights}{moved})")
    return 0
