"""What the small networks share: a checked config that round-trips through their weight file,
the hashed word embedding, and the weight file itself.

Each file is a dict {format, config, model, meta}. The weights are float16, except those named
`exact` (kept as they are, e.g. tuned thresholds) and those named `int8` (one int8 value per
weight and one float16 scale per row, for large embedding tables); loading gives float32.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

import torch
from torch import nn

from simulmt.model.torchfile import load_checked, save_atomic
from simulmt.smallnet.features import N_FLAGS, N_IDS

__all__ = ["HashedWordNet", "NetConfig", "load_net", "save_net"]

ROW_SCALE = ".row_scale"  # suffix of the per-row scales of a weight stored as int8
Net = TypeVar("Net", bound=nn.Module)


@dataclass(frozen=True)
class NetConfig:
    """Base of a small network's frozen config: the sizes named in `SIZES` must be >= 1 and
    `max_lookahead` (the last head) >= 0; enum fields are stored as their values."""

    SIZES: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in self.SIZES:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        lookahead = getattr(self, "max_lookahead", 0)  # the last head's lookahead
        if lookahead < 0:
            raise ValueError(f"max_lookahead must be >= 0, got {lookahead}")

    def to_dict(self) -> dict[str, Any]:
        return {k: v.value if isinstance(v, enum.Enum) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The config `to_dict` gave; a missing field takes its default."""
        kinds = {f.name: type(f.default) for f in fields(cls) if isinstance(f.default, enum.Enum)}
        return cls(**{k: kinds[k](v) if k in kinds else v for k, v in data.items()})


class HashedWordNet(nn.Module):
    """Base of the small networks: a word's vector is the sum of its hashed ids' embeddings
    and its projected surface flags (`simulmt.smallnet.features`), squashed by tanh."""

    def __init__(self, *, buckets: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(buckets, dim, mode="sum")
        self.flags = nn.Linear(N_FLAGS, dim)

    def embed_words(self, ids: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
        """ids (B, T, N_IDS), flags (B, T, N_FLAGS) -> (B, T, dim)."""
        b, t, _ = ids.shape
        e = self.embed(ids.reshape(b * t, N_IDS)).reshape(b, t, -1)  # (B, T, dim)
        return torch.tanh(e + self.flags(flags))  # (B, T, dim)


def save_net(
    path: Path,
    net: nn.Module,
    *,
    fmt: str,
    config: Mapping[str, Any],
    meta: Mapping[str, Any],
    int8: Collection[str] = (),
    exact: Collection[str] = (),
) -> None:
    """Write `net` atomically as a file of format `fmt` (the module docstring says how its
    weights are stored: small enough to ship beside the model)."""
    state: dict[str, torch.Tensor] = {}
    for k, v in net.state_dict().items():
        if k in int8:
            scale = v.abs().amax(dim=1).clamp(min=1e-8) / 127  # (rows,)
            state[k] = torch.round(v / scale[:, None]).to(torch.int8)  # (rows, cols)
            state[k + ROW_SCALE] = scale.half()
        elif v.is_floating_point() and k not in exact:
            state[k] = v.half()
        else:
            state[k] = v
    payload = {"format": fmt, "config": dict(config), "model": state, "meta": dict(meta)}
    save_atomic(path, payload)


def load_net(
    path: Path,
    *,
    fmt: str,
    build: Callable[[dict[str, Any]], Net],
    error: type[Exception],
    kind: str,
    hint: str,
) -> tuple[Net, dict[str, Any]]:
    """The network `build` makes from the file's config, with the file's weights (float32,
    eval mode), and the metadata saved with it. Raises `error` for a file that is missing,
    corrupt, of another format, or that does not fit its config (`kind` names the file)."""
    data = load_checked(
        path, fmt=fmt, keys=("config", "model"), error=error, what=kind, kind=kind, hint=hint
    )
    try:
        net = build(dict(data["config"]))
        net.load_state_dict(_dequantized(dict(data["model"])))
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
        raise error(f"{kind} {path} does not fit its config: {e}") from e
    return net.eval(), dict(data.get("meta") or {})


def _dequantized(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every weight as float32, int8 ones times their row scales."""
    out = {}
    for k, v in state.items():
        if k.endswith(ROW_SCALE):
            continue
        scale = state.get(k + ROW_SCALE)
        out[k] = v.float() * scale.float()[:, None] if scale is not None else v.float()
    return out
