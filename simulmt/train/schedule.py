"""What a step trains on and how fast: the learning-rate schedule, the epoch's batch order and
the wait-k draw, each a pure function of the config and the step so that a resumed run repeats
them exactly."""

from __future__ import annotations

import math

import torch

from simulmt.train.config import TrainConfig


def lr_factor(step: int, warmup: int, *, cooldown: int = 0, max_steps: int = 0) -> float:
    """Linear warm-up to 1, then inverse square root decay (Vaswani et al. 2017); with a
    cooldown, the last `cooldown` steps before `max_steps` also fall linearly to 0 (the decay
    phase of a warmup-stable-decay schedule: a run's end gets the low learning rate that
    checkpoint averaging otherwise approximates)."""
    step = max(step, 1)
    factor = min(step / max(warmup, 1), math.sqrt(max(warmup, 1) / step))
    if cooldown > 0:
        factor *= min(1.0, max(0.0, (max_steps - step) / cooldown))
    return factor


def epoch_order(n_batches: int, seed: int, epoch: int) -> list[int]:
    """The shuffled batch order of an epoch."""
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(n_batches, generator=g).tolist()


def sample_k(cfg: TrainConfig, step: int) -> int:
    """The wait-k lag of a step (multi-path wait-k: one k per batch)."""
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    return cfg.wait_k[int(torch.randint(len(cfg.wait_k), (1,), generator=g))]
