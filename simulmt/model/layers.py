"""Pre-LayerNorm Transformer layers whose attention keys/values are passed in and returned."""

from __future__ import annotations

import torch
from torch import nn

from simulmt.model.attention import MultiHeadAttention
from simulmt.model.config import ModelConfig

KV = tuple[torch.Tensor, torch.Tensor]  # keys, values: (B, H, S, dh) each


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff),
            nn.ReLU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.d_ff, cfg.d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # (B, T, D)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ln_ff = nn.LayerNorm(cfg.d_model)
        self.ff = FeedForward(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(
        self, x: torch.Tensor, past: KV | None, mask: torch.Tensor
    ) -> tuple[torch.Tensor, KV]:
        """x: (B, T, D) new positions; past: cached (B, H, P, dh); mask: (B, 1, T, P+T)."""
        h = self.ln_attn(x)
        k, v = self.attn.project_kv(h)  # (B, H, T, dh)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)  # (B, H, P+T, dh)
            v = torch.cat([past[1], v], dim=2)
        a, _ = self.attn(h, k, v, mask)
        x = x + self.drop(a)
        x = x + self.drop(self.ff(self.ln_ff(x)))
        return x, (k, v)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln_self = nn.LayerNorm(cfg.d_model)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ln_cross = nn.LayerNorm(cfg.d_model)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ln_ff = nn.LayerNorm(cfg.d_model)
        self.ff = FeedForward(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: torch.Tensor,
        past: KV | None,
        self_mask: torch.Tensor,
        cross: KV,
        cross_mask: torch.Tensor,
        *,
        return_weights: bool = False,
    ) -> tuple[torch.Tensor, KV, torch.Tensor | None]:
        """x: (N, T, D); past: (N, H, P, dh); self_mask: (N, 1, T, P+T);
        cross: (N, H, S, dh) each; cross_mask: (N, 1, T, S). Returns new x, self K/V, weights."""
        h = self.ln_self(x)
        k, v = self.self_attn.project_kv(h)  # (N, H, T, dh)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)  # (N, H, P+T, dh)
            v = torch.cat([past[1], v], dim=2)
        a, _ = self.self_attn(h, k, v, self_mask)
        x = x + self.drop(a)
        c, weights = self.cross_attn(
            self.ln_cross(x), cross[0], cross[1], cross_mask, return_weights=return_weights
        )
        x = x + self.drop(c)
        x = x + self.drop(self.ff(self.ln_ff(x)))
        return x, (k, v), weights
