"""The training loop of the small helper networks (segmenter, restorer): Adam with a linear
decay to 0, gradient clipping at 1, and the mean of the last 100 losses as the result. One
loop, so both are trained the same way and a fix reaches both."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
from torch import nn

__all__ = ["fit_steps"]

log = logging.getLogger(__name__)


def fit_steps(
    net: nn.Module,
    *,
    steps: int,
    lr: float,
    loss_at: Callable[[int], torch.Tensor],
    progress: Callable[[int, float], None] | None = None,
) -> float:
    """Train `net` in place for `steps` steps, step i minimising `loss_at(i)`; returns the
    mean loss of the last 100 steps. `net` is left in eval mode."""
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 - step / steps)
    net.train()
    recent: list[float] = []
    t0 = time.perf_counter()
    for step in range(steps):
        loss = loss_at(step)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        recent = (recent + [loss.item()])[-100:]
        if progress is not None:
            progress(step + 1, loss.item())
    net.eval()
    log.info("trained %d steps in %.0f s", steps, time.perf_counter() - t0)
    return sum(recent) / len(recent)
