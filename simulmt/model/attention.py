"""Multi-head attention that takes precomputed keys/values, so callers can cache them."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, dh)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (B, S, D) -> keys, values: (B, H, S, dh) each."""
        kv = self.kv_proj(x)  # (B, S, 2D)
        k, v = kv.chunk(2, dim=-1)  # (B, S, D) each
        return self._split(k), self._split(v)

    def forward(
        self,
        x: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor,
        *,
        return_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (B, T, D) queries; k, v: (B, H, S, dh); mask: (B, 1, T, S) bool, True = may attend.

        Every query row must allow at least one key (callers guarantee it), so no NaNs appear.
        Returns (B, T, D) and, if asked, the head-averaged weights (B, T, S).
        """
        q = self._split(self.q_proj(x))  # (B, H, T, dh)
        if return_weights:
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, H, T, S)
            scores = scores.masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores, dim=-1)  # (B, H, T, S)
            out = self.dropout(weights) @ v  # (B, H, T, dh)
            avg: torch.Tensor | None = weights.mean(dim=1)  # (B, T, S)
        else:  # one fused kernel: same result, a fraction of the per-op overhead
            p = self.dropout.p if self.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            avg = None
        b, h, t, dh = out.shape
        out = out.transpose(1, 2).reshape(b, t, h * dh)  # (B, T, D)
        return self.out_proj(out), avg
