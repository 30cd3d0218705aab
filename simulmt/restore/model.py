"""The restorer network: hashed word features -> GRU -> one head per lookahead.

Head `l` decides word j once word j+l is read: it sees the GRU state after word j+l and word
j's own embedding, and gives the case of word j and the punctuation after it. More lookahead
is more accurate and costs latency (each restored word waits for `l` more words), so one
network serves every lookahead 0..max_lookahead and the session chooses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from simulmt.restore.labels import Case, Punct
from simulmt.smallnet.net import HashedWordNet, NetConfig, load_net, save_net

__all__ = [
    "N_CLASSES",
    "RestorerConfig",
    "RestorerError",
    "RestorerNet",
    "load_restorer",
    "save_restorer",
]

FORMAT = "simulmt-restorer-v1"
N_CLASSES = len(Case) + len(Punct)  # one head's logits: case classes, then punctuation classes


class RestorerError(ValueError):
    """A restorer file that is missing, corrupt, or not a restorer."""


@dataclass(frozen=True)
class RestorerConfig(NetConfig):
    # hashed feature rows: 64k x 64 = 4.2M weights, 8 MB as fp16 (the bundle stays < 60 MB);
    # a word is several hashes (core, raw form, prefix, suffix), so collisions rarely hurt
    buckets: int = 1 << 16
    dim: int = 64  # word embedding size
    hidden: int = 256  # GRU state size
    head: int = 256  # hidden layer of each head
    max_lookahead: int = 2  # heads 0..max_lookahead

    SIZES = ("buckets", "dim", "hidden", "head")


class RestorerNet(HashedWordNet):
    def __init__(self, cfg: RestorerConfig) -> None:
        super().__init__(buckets=cfg.buckets, dim=cfg.dim)
        self.cfg = cfg
        self.rnn = nn.GRU(cfg.dim, cfg.hidden, batch_first=True)
        self.heads = nn.ModuleList(
            nn.Sequential(
                nn.Linear(cfg.hidden + cfg.dim, cfg.head), nn.ReLU(), nn.Linear(cfg.head, N_CLASSES)
            )
            for _ in range(cfg.max_lookahead + 1)
        )

    def encode(
        self, x: torch.Tensor, state: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Word embeddings (B, T, dim) -> GRU states (B, T, hidden) and the state to continue
        from (1, B, hidden); `None` starts a stream."""
        h, new_state = self.rnn(x, state)
        return h, new_state

    def decide(self, lookahead: int, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Logits (..., N_CLASSES) of words `x` (..., dim) from the states `h` (..., hidden)
        read `lookahead` words after each."""
        return self.heads[lookahead](torch.cat([h, x], dim=-1))

    def forward(self, ids: torch.Tensor, flags: torch.Tensor) -> list[torch.Tensor]:
        """Whole streams: per lookahead l, logits (B, T-l, N_CLASSES) of words 0..T-l-1."""
        x = self.embed_words(ids, flags)  # (B, T, dim)
        h, _ = self.encode(x)  # (B, T, hidden)
        t = x.shape[1]
        return [
            self.decide(lk, h[:, lk:], x[:, : t - lk]) for lk in range(self.cfg.max_lookahead + 1)
        ]


def save_restorer(path: Path, net: RestorerNet, *, meta: dict[str, Any]) -> None:
    """Write atomically. The hashed embedding table (most of the weights) is stored as int8
    with one scale per row, the rest as float16: the file stays small enough to ship."""
    save_net(path, net, fmt=FORMAT, config=net.cfg.to_dict(), meta=meta, int8=("embed.weight",))


def load_restorer(path: Path) -> tuple[RestorerNet, dict[str, Any]]:
    """The network (float32, eval mode) and the metadata saved with it."""
    return load_net(
        path,
        fmt=FORMAT,
        build=lambda config: RestorerNet(RestorerConfig.from_dict(config)),
        error=RestorerError,
        kind="restorer file",
        hint="train one with `simulmt train-restorer`",
    )
