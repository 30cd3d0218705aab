"""The boundary network: hashed word features -> causal encoder -> one head per lookahead.

Head `l` at word `j` gives P(a sentence ends after word j-l): it has read `l` words past the
candidate boundary. One network serves every lookahead 0..max_lookahead; the decision
threshold of each head is tuned on dev data and stored with the weights.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from simulmt.smallnet.net import HashedWordNet, NetConfig, load_net, save_net

__all__ = [
    "Encoder",
    "SegmenterConfig",
    "SegmenterError",
    "SegmenterNet",
    "load_segmenter",
    "save_segmenter",
]

FORMAT = "simulmt-segmenter-v1"


class SegmenterError(ValueError):
    """A segmenter file that is missing, corrupt, or not a segmenter."""


class Encoder(enum.Enum):
    GRU = "gru"  # recurrent: unbounded left context, O(1) state per stream
    WINDOW = "window"  # causal convolution over the last `window` words: a log-linear-like model


@dataclass(frozen=True)
class SegmenterConfig(NetConfig):
    encoder: Encoder = Encoder.GRU  # chosen by dev F1 and cost (README)
    buckets: int = 1 << 14  # hashed feature rows: 16k x 64 floats = 4 MB, 2 MB saved as fp16
    dim: int = 64  # word embedding size
    hidden: int = 128  # encoder state size
    window: int = 8  # words a WINDOW encoder sees (current one included)
    max_lookahead: int = 4  # heads 0..max_lookahead

    SIZES = ("buckets", "dim", "hidden", "window")


class SegmenterNet(HashedWordNet):
    thresholds: torch.Tensor  # (max_lookahead+1,) buffer

    def __init__(self, cfg: SegmenterConfig) -> None:
        super().__init__(buckets=cfg.buckets, dim=cfg.dim)
        self.cfg = cfg
        if cfg.encoder is Encoder.GRU:
            self.rnn: nn.GRU | None = nn.GRU(cfg.dim, cfg.hidden, batch_first=True)
            self.conv: nn.Conv1d | None = None
        else:
            self.rnn = None
            self.conv = nn.Conv1d(cfg.dim, cfg.hidden, kernel_size=cfg.window)
        self.heads = nn.Linear(cfg.hidden, cfg.max_lookahead + 1)
        # per-head decision thresholds on P(boundary), tuned on dev data by training
        self.register_buffer("thresholds", torch.full((cfg.max_lookahead + 1,), 0.5))

    def forward(
        self, ids: torch.Tensor, flags: torch.Tensor, state: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Boundary logits (B, T, max_lookahead+1) and the encoder state to continue from.

        The state is the GRU's hidden (1, B, hidden), or for WINDOW the last window-1 word
        embeddings (B, window-1, dim); `None` starts a stream."""
        x = self.embed_words(ids, flags)  # (B, T, dim)
        if self.rnn is not None:
            h, new_state = self.rnn(x, state)  # (B, T, hidden), (1, B, hidden)
        else:
            assert self.conv is not None
            b, _, d = x.shape
            past = state if state is not None else x.new_zeros(b, self.cfg.window - 1, d)
            full = torch.cat([past, x], dim=1)  # (B, window-1+T, dim)
            h = torch.relu(self.conv(full.transpose(1, 2))).transpose(1, 2)  # (B, T, hidden)
            new_state = full[:, full.shape[1] - (self.cfg.window - 1) :]  # (B, window-1, dim)
        return self.heads(h), new_state  # (B, T, L+1)


def save_segmenter(path: Path, net: SegmenterNet, *, meta: dict[str, Any]) -> None:
    """Write atomically; weights as float16 (the file stays small), thresholds exact."""
    save_net(path, net, fmt=FORMAT, config=net.cfg.to_dict(), meta=meta, exact=("thresholds",))


def load_segmenter(path: Path) -> tuple[SegmenterNet, dict[str, Any]]:
    """The network (float32, eval mode) and the metadata saved with it."""
    return load_net(
        path,
        fmt=FORMAT,
        build=lambda config: SegmenterNet(SegmenterConfig.from_dict(config)),
        error=SegmenterError,
        kind="segmenter file",
        hint="train one with `simulmt train-segmenter`",
    )
