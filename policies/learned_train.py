"""Training the learned policy's network on oracle states (class-balanced BCE), with resume."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from simulmt.policies.learned_net import PolicyNet
from simulmt.policies.oracle import OracleData
from torch import nn

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitConfig:
    epochs: int = 12  # the net is tiny and the data a few 100k rows: a dozen passes converge
    batch_size: int = 256  # small batches: many updates per epoch on a few thousand pairs
    lr: float = 2e-3  # Adam on a 2-layer MLP over standardized inputs
    weight_decay: float = 1e-4  # mild: the decoder state has hundreds of inputs
    seed: int = 0  # shuffling and initialization

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError(f"epochs and batch_size must be >= 1 (got {self.epochs}, "
                             f"{self.batch_size})")
        if not self.lr > 0 or self.weight_decay < 0:
            raise ValueError(f"lr must be > 0 and weight_decay >= 0 (got {self.lr}, "
                             f"{self.weight_decay})")


@dataclass(frozen=True)
class EpochStats:
    epoch: int  # 1-based
    train_loss: float  # mean class-balanced BCE over the epoch's batches
    dev_loss: float  # class-balanced BCE on the dev states (train's class weights)
    dev_accuracy: float  # share of dev states whose action P(WRITE) >= 0.5 predicts
    dev_balanced: float  # mean of the READ and WRITE recalls (robust to class imbalance)


@dataclass
class FitState:
    """What a resumed run continues from (saved in the checkpoint after every epoch)."""

    epoch: int  # epochs done
    history: list[EpochStats]
    best: dict[str, torch.Tensor] | None  # weights with the lowest dev loss so far
    optimizer: dict[str, Any] | None

    def to_dict(self, net: PolicyNet) -> dict[str, Any]:
        return {"epoch": self.epoch, "history": [asdict(h) for h in self.history],
                "best": self.best, "optimizer": self.optimizer, "net": net.state_dict(),
                "rng": torch.get_rng_state()}

    @classmethod
    def from_dict(cls, data: dict[str, Any], net: PolicyNet) -> FitState:
        net.load_state_dict(data["net"])
        torch.set_rng_state(data["rng"])
        history = [EpochStats(**h) for h in data["history"]]
        return cls(int(data["epoch"]), history, data["best"], data["optimizer"])


def pos_weight(labels: torch.Tensor) -> torch.Tensor:
    """READs per WRITE: weighs the classes equally in BCEWithLogits (1.0 if a class is absent)."""
    writes = float(labels.sum())
    reads = float(labels.numel()) - writes
    return torch.tensor(reads / writes if writes and reads else 1.0)


@torch.no_grad()
def evaluate(net: PolicyNet, data: OracleData, weight: torch.Tensor) -> tuple[float, float, float]:
    """(class-balanced BCE, accuracy, balanced accuracy) of the net on `data`, in eval mode."""
    was = net.training
    net.eval()
    logits = net(data.features)  # (N,)
    net.train(was)
    loss = float(nn.functional.binary_cross_entropy_with_logits(
        logits, data.labels, pos_weight=weight))
    pred = logits >= 0  # P(WRITE) >= 0.5
    gold = data.labels > 0.5
    acc = float((pred == gold).float().mean())
    recalls = [float((pred[gold == c] == c).float().mean()) for c in (True, False)
               if bool((gold == c).any())]
    return loss, acc, sum(recalls) / len(recalls)


def fit(
    net: PolicyNet,
    train: OracleData,
    dev: OracleData,
    cfg: FitConfig,
    *,
    state: FitState | None = None,
    on_epoch: Callable[[FitState], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> FitState:
    """Train `net` (whose normalization is already set) for the remaining epochs; at the end it
    holds the weights of the epoch with the lowest dev loss. `on_epoch` (e.g. a checkpoint
    save) runs after every epoch; `progress(n)` after every batch of n rows."""
    if len(train) == 0:
        raise ValueError("no oracle states to train on (are the pairs all one word long?)")
    state = state or FitState(0, [], None, None)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if state.optimizer is not None:
        opt.load_state_dict(state.optimizer)
    weight = pos_weight(train.labels)
    gen = torch.Generator().manual_seed(cfg.seed)
    for _ in range(state.epoch):
        torch.randperm(len(train), generator=gen)  # replay the shuffles of the epochs done
    for epoch in range(state.epoch + 1, cfg.epochs + 1):
        order = torch.randperm(len(train), generator=gen)  # (N,)
        train_loss = _epoch(net, train, opt, weight, order.split(cfg.batch_size), progress)
        dev_loss, acc, balanced = evaluate(net, dev, weight) if len(dev) else (0.0, 0.0, 0.0)
        stats = EpochStats(epoch, train_loss, dev_loss, acc, balanced)
        if state.best is None or not state.history or dev_loss <= min(
                h.dev_loss for h in state.history):
            state.best = {k: v.clone() for k, v in net.state_dict().items()}
        state.history.append(stats)
        state.epoch = epoch
        state.optimizer = opt.state_dict()
        log.debug("epoch %d: train loss %.4f, dev loss %.4f, dev accuracy %.3f (balanced %.3f)",
                 epoch, stats.train_loss, dev_loss, acc, balanced)
        if on_epoch is not None:
            on_epoch(state)
    if state.best is not None:
        net.load_state_dict(state.best)
    return state


def _epoch(net: PolicyNet, train: OracleData, opt: torch.optim.Optimizer, weight: torch.Tensor,
           batches: tuple[torch.Tensor, ...], progress: Callable[[int], None] | None) -> float:
    """One pass over `batches` of row indices; returns the mean batch loss."""
    net.train()
    total = 0.0
    for rows in batches:
        logits = net(train.features[rows])  # (b,)
        loss = nn.functional.binary_cross_entropy_with_logits(
            logits, train.labels[rows], pos_weight=weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
        if progress is not None:
            progress(len(rows))
    return total / len(batches)
