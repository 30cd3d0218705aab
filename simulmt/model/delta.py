"""Weight deltas: a second set of weights for one kind of input, shipped small.

Recognizer output (lowercase, no punctuation) reads best with weights moved towards a fine-tune
on that view, while written text reads best with the release's own weights (docs/model-notes.md,
"Weights for recognizer input"). A second model folder would double the bundle, but a short
fine-tune moves each matrix in few directions, so the move is stored as each matrix's truncated
SVD, two float16 factors A (out, r) and B (r, in), and 1-D weights (biases, norms) whole.
`apply_delta` rebuilds the variant's weights from the base's at load time.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from simulmt.torchfile import load_checked, save_atomic

__all__ = [
    "RECOGNIZER",
    "DeltaError",
    "WeightDelta",
    "apply_delta",
    "check_variant_name",
    "load_delta",
    "make_delta",
    "save_delta",
    "variant_file",
    "variant_names",
]

FORMAT = "simulmt-delta-v1"
VARIANT_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
RECOGNIZER = "recognizer"  # the variant for a speech recognizer's output (lowercase, no punct.)
RESERVED = frozenset({"model", "policy", "segmenter"})  # the model folder's other files


class DeltaError(ValueError):
    """A delta file that is missing, corrupt, or made for other weights."""


def check_variant_name(name: str) -> None:
    if not VARIANT_NAME.match(name) or name in RESERVED:
        raise ValueError(
            f"variant name {name!r}: expected lowercase letters, digits and '-' (at most 32, "
            f"starting with a letter), not one of {sorted(RESERVED)}"
        )


def variant_file(folder: Path, name: str) -> Path:
    """Where variant `name` of the model in `folder` lives: FOLDER/NAME.pt."""
    check_variant_name(name)
    return folder / f"{name}.pt"


def variant_names(folder: Path) -> list[str]:
    """The variants stored beside the model in `folder` (their files are not opened)."""
    names = (p.stem for p in folder.glob("*.pt") if p.stem not in RESERVED)
    return sorted(n for n in names if VARIANT_NAME.match(n))


@dataclass(frozen=True)
class WeightDelta:
    """base + delta = the variant's weights, for the base whose weights hash to `base_digest`."""

    name: str  # the variant it makes, e.g. "spoken"
    base_digest: str  # `weights_digest` of the base state dict it was made against
    rank: int  # the largest rank kept (a matrix with fewer rows or columns keeps fewer)
    factors: dict[str, tuple[torch.Tensor, torch.Tensor]]  # key -> A (out, r), B (r, in)
    whole: dict[str, torch.Tensor]  # key -> the delta of a 1-D weight, as is

    def keys(self) -> set[str]:
        return set(self.factors) | set(self.whole)


def weights_digest(state: dict[str, torch.Tensor]) -> str:
    """A hash of the float weights as float16 (what a model folder stores), so a delta is
    refused against any other base: a delta only means something against its own base."""
    h = hashlib.sha256()
    for key in sorted(state):
        value = state[key]
        if not value.is_floating_point():
            continue
        h.update(key.encode())
        h.update(value.detach().to(torch.float16).contiguous().numpy().tobytes())
    return h.hexdigest()


def make_delta(
    base: dict[str, torch.Tensor],
    target: dict[str, torch.Tensor],
    *,
    rank: int,
    name: str,
) -> WeightDelta:
    """The rank-`rank` delta that takes `base` towards `target` (same keys and shapes)."""
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    if set(base) != set(target):
        only = sorted(set(base) ^ set(target))[:5]
        raise DeltaError(f"base and target weights differ in their entries, e.g. {only}")
    factors: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    whole: dict[str, torch.Tensor] = {}
    for key in sorted(base):
        b, t = base[key], target[key]
        if b.shape != t.shape:
            raise DeltaError(f"{key}: base is {tuple(b.shape)}, target {tuple(t.shape)}")
        if not b.is_floating_point():
            continue
        d = t.double() - b.double()
        if not bool(d.abs().max() > 0):
            continue
        if d.dim() != 2:
            whole[key] = d.to(torch.float16)
            continue
        u, s, vh = torch.linalg.svd(d, full_matrices=False)  # (out, k), (k,), (k, in)
        r = min(rank, s.numel())
        root = s[:r].sqrt()
        factors[key] = (
            (u[:, :r] * root).to(torch.float16),  # (out, r)
            (root[:, None] * vh[:r]).to(torch.float16),  # (r, in)
        )
    return WeightDelta(name, weights_digest(base), rank, factors, whole)


def apply_delta(base: dict[str, torch.Tensor], delta: WeightDelta) -> dict[str, torch.Tensor]:
    """A new state dict: base + delta (base is not changed)."""
    digest = weights_digest(base)
    if digest != delta.base_digest:
        raise DeltaError(
            f"the {delta.name!r} delta was made for other weights (base {delta.base_digest[:12]}, "
            f"these {digest[:12]}); make it again against this model (simulmt variant)"
        )
    missing = sorted(delta.keys() - set(base))
    if missing:
        raise DeltaError(
            f"the {delta.name!r} delta has entries the model lacks, e.g. {missing[:3]}"
        )
    out = dict(base)
    for key, (a, b) in delta.factors.items():
        move = a.float() @ b.float()  # (out, r) @ (r, in) -> (out, in)
        _check_shape(key, move, base[key])
        out[key] = (base[key].float() + move).to(base[key].dtype)
    for key, d in delta.whole.items():
        _check_shape(key, d, base[key])
        out[key] = (base[key].float() + d.float()).to(base[key].dtype)
    return out


def _check_shape(key: str, move: torch.Tensor, weight: torch.Tensor) -> None:
    if move.shape != weight.shape:
        raise DeltaError(
            f"{key}: the delta is {tuple(move.shape)}, the model {tuple(weight.shape)}"
        )


def save_delta(path: Path, delta: WeightDelta) -> None:
    payload: dict[str, Any] = {
        "format": FORMAT,
        "name": delta.name,
        "base_digest": delta.base_digest,
        "rank": delta.rank,
        "factors": {k: {"a": a, "b": b} for k, (a, b) in delta.factors.items()},
        "whole": dict(delta.whole),
    }
    save_atomic(path, payload)


def load_delta(path: Path) -> WeightDelta:
    data = load_checked(
        path,
        fmt=FORMAT,
        keys=("name", "base_digest", "rank", "factors", "whole"),
        error=DeltaError,
        what="weight delta",
        kind="simulmt weight delta",
        hint="make one with `simulmt variant`",
    )
    try:
        factors = {k: (v["a"], v["b"]) for k, v in dict(data["factors"]).items()}
        whole = dict(data["whole"])
        return WeightDelta(
            str(data["name"]), str(data["base_digest"]), int(data["rank"]), factors, whole
        )
    except (KeyError, TypeError, ValueError) as e:
        raise DeltaError(f"weight delta {path} is malformed ({e})") from e
