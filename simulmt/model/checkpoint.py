"""Checkpoint files: plain dicts of tensors and primitives, loadable with weights_only=True."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.nn import init

from simulmt.model.config import ModelConfig
from simulmt.model.torchfile import load_checked, save_atomic
from simulmt.model.transformer import SimulTransformer

log = logging.getLogger(__name__)
FORMAT = "simulmt-checkpoint-v1"


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt, truncated or does not fit the model."""


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write atomically, so a crash never leaves a half-written checkpoint."""
    save_atomic(path, {"format": FORMAT, **payload})


def load_checkpoint(path: Path) -> dict[str, Any]:
    return load_checked(path, fmt=FORMAT, keys=("model_config", "model"), error=CheckpointError,
                        what="checkpoint", kind="simulmt checkpoint")


def model_from_checkpoint(path: Path, data: dict[str, Any] | None = None) -> SimulTransformer:
    """Build the model described by a checkpoint and load its weights (as float32)."""
    data = data if data is not None else load_checkpoint(path)
    try:
        cfg = ModelConfig.from_dict(dict(data["model_config"]))
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path} has a bad model_config: {e}") from e
    with _no_random_init():  # every weight is loaded below (strictly)
        model = SimulTransformer(cfg)
    state = {k: v.float() if v.is_floating_point() else v for k, v in data["model"].items()}
    if cfg.tie_embeddings and "out_proj.weight" not in state and "embed.weight" in state:
        state["out_proj.weight"] = state["embed.weight"]  # exports store a tied matrix once
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise CheckpointError(f"checkpoint {path} does not match its model_config: {e}") from e
    return model.eval()


# the initialisers torch's layers and SimulTransformer call while they are built
_RANDOM_INITS = ("uniform_", "normal_", "kaiming_uniform_")


@contextlib.contextmanager
def _no_random_init() -> Iterator[None]:
    """Building a model whose every weight is loaded next: its random initialisation was 0.7 s
    of the bundled model's 1.7-s load, all of it overwritten. The initialisers leave the tensors
    as they are (uninitialised memory) while the model is built; a strict `load_state_dict`
    then fills every parameter, or the model is refused. (The meta device skips the draws too,
    but its first use imports sympy: 2.8 s.) Not for threads that build modules meanwhile:
    nothing in simulmt does."""
    saved = {name: getattr(init, name) for name in _RANDOM_INITS}
    try:
        for name in _RANDOM_INITS:
            setattr(init, name, _unchanged)
        yield
    finally:
        for name, fn in saved.items():
            setattr(init, name, fn)


def _unchanged(tensor: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
    return tensor


def average_state_dicts(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the model weights of several checkpoints (checkpoint averaging)."""
    if not paths:
        raise ValueError("average_state_dicts needs at least one checkpoint")
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        for k, v in load_checkpoint(p)["model"].items():
            total[k] = total[k] + v.double() if k in total else v.double()
    return {k: (v / len(paths)).float() for k, v in total.items()}
