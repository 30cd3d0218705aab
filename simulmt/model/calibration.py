"""Calibrated input ranges for int8 inference: measured once per model, stored beside it.

fbgemm's int8 kernel quantizes its input on one grid given by a scale. Finding each row's own
scale at every call (`FbgemmInt8Linear`) costs five small tensor ops around the kernel, about
half of a call at a server's few rows. A model folder can instead carry the range of every
linear layer's input, measured on real text (`simulmt calibrate`): the quantile `quantile` of
the per-token absolute maxima seen while the float model translated it. `Engine.load` then
builds those layers as `StaticInt8Linear`s. Names are the module names of the inference copy
(after `SimulTransformer.fuse_projections`), so a file fits the architecture it was made for.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import nn

from simulmt.model.checkpoint import CheckpointError
from simulmt.model.transformer import SimulTransformer

__all__ = [
    "DEFAULT_QUANTILE", "RANGES_FILE", "collect_ranges", "inference_copy", "load_ranges",
    "save_ranges",
]

RANGES_FILE = "int8_ranges.json"  # beside model.pt; optional
FORMAT = 1
# a range covers the largest input seen: on newstest2015 (wait-3) that scored 13.37 BLEU, the
# 99.9% quantile 13.34, per-row scales 13.38 and float32 13.31 (bench/RESULTS.md)
DEFAULT_QUANTILE = 1.0


def inference_copy(model: SimulTransformer) -> SimulTransformer:
    """A float copy of `model` laid out as int8 inference lays it out (fused projections)."""
    twin = copy.deepcopy(model).float().eval()
    twin.fuse_projections()
    return twin


def collect_ranges(
    model: SimulTransformer,
    run: Callable[[SimulTransformer], None],
    *,
    quantile: float = DEFAULT_QUANTILE,
) -> dict[str, float]:
    """Per linear layer of `model`'s inference copy, the `quantile` of its inputs' per-token
    absolute maxima while `run(copy)` translates with it (the caller's text and policy)."""
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"quantile must be in (0, 1], got {quantile}")
    twin = inference_copy(model)
    seen: dict[str, list[torch.Tensor]] = {}

    def record(name: str) -> Callable[[nn.Module, tuple[torch.Tensor, ...]], None]:
        def hook(_: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            x = inputs[0].detach().float()
            seen.setdefault(name, []).append(x.reshape(-1, x.shape[-1]).abs().amax(dim=1))

        return hook

    handles = [
        m.register_forward_pre_hook(record(name))
        for name, m in twin.named_modules()
        if isinstance(m, nn.Linear)
    ]
    try:
        with torch.no_grad():
            run(twin)
    finally:
        for h in handles:
            h.remove()
    missing = [n for n, m in twin.named_modules() if isinstance(m, nn.Linear) and n not in seen]
    if missing:
        raise ValueError(f"the calibration run never used {', '.join(missing)}: give it text")
    out = {}
    for name, maxima in seen.items():
        values = torch.cat(maxima)  # (tokens,)
        top = float(values.max()) if quantile >= 1.0 else _quantile(values, quantile)
        out[name] = max(top, 1e-6)
    return out


def _quantile(values: torch.Tensor, q: float) -> float:
    """`torch.quantile` without its input-size limit (16M elements)."""
    ordered = values.sort().values
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))


def save_ranges(path: Path, ranges: Mapping[str, float], *, about: Mapping[str, object]) -> None:
    """Write `ranges` (name -> absmax) and what they were measured on (`about`)."""
    body = {"format": FORMAT, **about, "ranges": {k: float(v) for k, v in sorted(ranges.items())}}
    path.write_text(json.dumps(body, indent=1) + "\n")


def load_ranges(path: Path) -> dict[str, float]:
    """The ranges in `path` (layer name -> absmax); a file that is not one is refused. Whether
    its names fit the model is checked where the layers are built (`quantize_linears`)."""
    what = f"{path}: not an int8 range file (made by `simulmt calibrate`)"
    try:
        body = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{what}: {e}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise CheckpointError(f"{what}: expected a JSON object with \"format\": {FORMAT}")
    ranges = body.get("ranges")
    if not isinstance(ranges, dict) or not ranges:
        raise CheckpointError(f"{what}: expected \"ranges\": {{layer name: number > 0}}")
    out: dict[str, float] = {}
    for name, value in ranges.items():
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value <= 0:
            raise CheckpointError(f"{what}: the range of {name!r} must be a number > 0, "
                                  f"got {value!r}")
        out[str(name)] = float(value)
    return out
