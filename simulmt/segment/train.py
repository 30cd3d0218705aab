"""Training and scoring of the boundary network (pure functions over `Stream`s, no I/O).

Training samples windows of `length` words from random positions of the styled streams (so a
window rarely starts at a sentence start), and sums one BCE loss per lookahead head: head l at
word j is trained on the label of word j-l. Scoring runs the network over a whole stream at
once, exactly as the streaming `Segmenter` would, and tunes each head's threshold for F1.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from simulmt.segment.data import Stream
from simulmt.segment.model import SegmenterNet
from simulmt.segment.views import SourceStyle
from simulmt.smallnet.fitting import fit_steps

__all__ = ["BoundaryScore", "FitConfig", "boundary_probs", "fit", "score", "tune_thresholds"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitConfig:
    steps: int = 2000  # minutes on one CPU thread
    batch: int = 32  # windows per step
    length: int = 96  # words per window: a few sentences
    lr: float = 3e-3  # Adam; decays linearly to 0
    seed: int = 0
    # how often each view is drawn; the recognizer view is what live captions send
    styles: tuple[tuple[SourceStyle, float], ...] = (
        (SourceStyle.TEXT, 0.35),
        (SourceStyle.ASR, 0.45),
        (SourceStyle.LOWER, 0.1),
        (SourceStyle.NO_PUNCT, 0.1),
    )

    def __post_init__(self) -> None:
        for name in ("steps", "batch", "length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class BoundaryScore:
    lookahead: int
    precision: float
    recall: float
    f1: float
    boundaries: int  # true boundaries scored

    def as_dict(self) -> dict[str, float | int]:
        return {
            "lookahead": self.lookahead,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "boundaries": self.boundaries,
        }


def _batch(
    streams: Sequence[Stream], weights: Sequence[float], cfg: FitConfig, rng: random.Random
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids, flags, ends = [], [], []
    for _ in range(cfg.batch):
        s = rng.choices(streams, weights)[0]
        start = rng.randrange(max(1, len(s) - cfg.length))
        ids.append(s.ids[start : start + cfg.length])
        flags.append(s.flags[start : start + cfg.length])
        ends.append(s.ends[start : start + cfg.length])
    n = min(len(x) for x in ends)
    return (
        torch.stack([x[:n] for x in ids]),  # (B, T, N_IDS)
        torch.stack([x[:n] for x in flags]),  # (B, T, N_FLAGS)
        torch.stack([x[:n] for x in ends]),
    )  # (B, T)


def _loss(logits: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """logits (B, T, L+1), ends (B, T): head l at word j predicts ends[j-l]."""
    t = ends.shape[1]
    losses = [
        F.binary_cross_entropy_with_logits(logits[:, lk:, lk], ends[:, : t - lk])
        for lk in range(min(logits.shape[2], t))
    ]
    return torch.stack(losses).sum()


def fit(
    net: SegmenterNet,
    streams: Mapping[SourceStyle, Stream],
    cfg: FitConfig,
    *,
    progress: Callable[[int, float], None] | None = None,
) -> float:
    """Train `net` in place; returns the mean loss of the last 100 steps."""
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    pool = [(streams[style], w) for style, w in cfg.styles if style in streams and w > 0]
    if not pool or all(len(s) < 2 for s, _ in pool):
        raise ValueError("no training words: give documents with at least two words")
    pooled, weights = [s for s, _ in pool], [w for _, w in pool]

    def loss_at(step: int) -> torch.Tensor:
        ids, flags, ends = _batch(pooled, weights, cfg, rng)
        logits, _ = net(ids, flags)
        return _loss(logits, ends)

    return fit_steps(net, steps=cfg.steps, lr=cfg.lr, loss_at=loss_at, progress=progress)


@torch.no_grad()
def boundary_probs(net: SegmenterNet, stream: Stream) -> torch.Tensor:
    """(N, L+1): [i, l] = P(boundary after word i) from head l, read at word i+l; NaN where
    the stream ends before i+l (that lookahead never exists)."""
    logits, _ = net(stream.ids[None], stream.flags[None])  # (1, N, L+1)
    p = torch.sigmoid(logits[0])  # (N, L+1)
    out = torch.full_like(p, math.nan)
    n = p.shape[0]
    for lk in range(p.shape[1]):
        out[: max(0, n - lk), lk] = p[lk:, lk]
    return out


def _prf(predicted: torch.Tensor, gold: torch.Tensor) -> tuple[float, float, float]:
    tp = float((predicted & gold).sum())
    p = tp / max(1.0, float(predicted.sum()))
    r = tp / max(1.0, float(gold.sum()))
    return p, r, (2 * p * r / (p + r) if p + r > 0 else 0.0)


def score(net: SegmenterNet, stream: Stream, lookaheads: Sequence[int]) -> list[BoundaryScore]:
    """Boundary precision/recall/F1 of each lookahead's head at its stored threshold. The
    stream's last word is left out (its boundary is given by the end of the stream)."""
    probs = boundary_probs(net, stream)[:-1]  # (N-1, L+1)
    gold = stream.ends[:-1].bool()
    out = []
    for lk in lookaheads:
        if not 0 <= lk < probs.shape[1]:
            raise ValueError(f"lookahead {lk} not in 0..{probs.shape[1] - 1}")
        valid = ~probs[:, lk].isnan()
        pred = probs[:, lk] >= float(net.thresholds[lk])
        p, r, f = _prf(pred[valid], gold[valid])
        out.append(BoundaryScore(lk, p, r, f, int(gold[valid].sum())))
    return out


def tune_thresholds(net: SegmenterNet, streams: Sequence[Stream]) -> list[float]:
    """Set each head's threshold to the one with the best F1 over `streams` (pooled)."""
    probs = torch.cat([boundary_probs(net, s)[:-1] for s in streams])  # (M, L+1)
    gold = torch.cat([s.ends[:-1] for s in streams]).bool()  # (M,)
    grid = [x / 100 for x in range(5, 96)]
    best = []
    for lk in range(probs.shape[1]):
        valid = ~probs[:, lk].isnan()
        p, g = probs[valid, lk], gold[valid]
        f1s = [_prf(p >= th, g)[2] for th in grid]
        best.append(grid[max(range(len(grid)), key=f1s.__getitem__)])
    net.thresholds.copy_(torch.tensor(best))
    return best
