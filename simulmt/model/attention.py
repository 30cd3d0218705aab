"""Multi-head attention that takes precomputed keys/values, so callers can cache them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

# Batched attention pads every key row to the widest in the batch. CPU attention sums a row's
# scores in vector lanes with a remainder loop after them, so the same keys padded to another
# width were summed in another order: 1 in 1 to 69 keys came out bit-different under almost
# every padding, and none when both widths were multiples of 16 (AVX-512's float lanes; AVX2's
# 8 divide it; bench/RESULTS.md, session 45). Keys padded past a multiple of ALIGN only add
# exact zeros. So every attention width is a multiple of ALIGN, and each stream's keys lie at
# its own positions: a stream's attention is then the same alone and in any batch, and with
# int8 linears (exact whatever the batch) so are its captions.
# The same holds for the queries of one call: a query's result depended on how many queries
# the call had (1, 2, 3 and 5 gave other bits than 4), and never among multiples of 4
# (checked on AVX-512, AVX2 and ATen's default kernels). The packed encoder, which pads each
# stream's queries to the most new tokens of any stream, pads them to a multiple of Q_ALIGN.
# These are facts of torch 2.13's CPU kernels, guarded by tests
# (tests/test_model_incremental.py: a stream's encoding alone and packed, bit for bit).
ALIGN = 16
Q_ALIGN = 4
# Attention reads every key position up to the batch's width, and its time grows with it; in a
# packed encoder pass of a hundred streams most are far shorter than the longest. So a wide
# pass attends in groups of GROUP_ROWS streams ordered by length, each over its own width
# (aligned: the same bits; bench/RESULTS.md, session 46). The decoder step's rows are pool
# slots in slot order, not by length: grouping them measured no faster.
GROUP_ROWS = 16

Groups = tuple[tuple[int, int, int], ...]  # (first row, end row, key width) per group


def aligned(width: int, to: int = ALIGN) -> int:
    """`width` rounded up to a multiple of `to` (see above); 0 stays 0."""
    return -(-width // to) * to


def grouped_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, groups: Groups
) -> torch.Tensor:
    """Inference attention, q (B, H, T, dh) over k, v (B, H, S, dh) with mask (B, 1, T, S),
    per group of rows over the group's first `width` key positions (every key a row may see
    lies within its group's width); no groups: all rows at once. -> (B, H, T, dh)"""
    if not groups:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return torch.cat([
        F.scaled_dot_product_attention(q[lo:hi], k[lo:hi, :, :w], v[lo:hi, :, :w],
                                       attn_mask=mask[lo:hi, ..., :w])
        for lo, hi, w in groups
    ])  # fmt: skip


def row_groups(widths: Sequence[int], *, rows: int) -> Groups:
    """Groups of `rows` consecutive rows (see GROUP_ROWS), each as wide as the most key
    positions one of its rows needs (`widths`), aligned; () when one group would do."""
    n = len(widths)
    if rows <= 0 or n <= rows:
        return ()
    return tuple((lo, min(lo + rows, n), aligned(max(widths[lo : lo + rows])))
                 for lo in range(0, n, rows))  # fmt: skip


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool attention mask (True = may attend) as the additive one attention applies: 0 where
    True, -inf elsewhere. Attention converts a bool mask so at every call; a mask that several
    layers share is converted once instead (two small ops saved per layer)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
        mask.logical_not(), float("-inf")
    )


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        # q_proj and kv_proj as one layer (`fuse_qkv`): an int8 copy of a self-attention
        # makes one small matrix product where it made two
        self.qkv_proj: nn.Module | None = None

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, dh)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (B, S, D) -> keys, values: (B, H, S, dh) each."""
        kv = self.kv_proj(x)  # (B, S, 2D)
        k, v = kv.chunk(2, dim=-1)  # (B, S, D) each
        return self.split_heads(k), self.split_heads(v)

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention: x (..., D) -> queries, keys, values (..., D) each, unsplit; one
        product once fused."""
        if self.qkv_proj is not None:
            q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
            return q, k, v
        k, v = self.kv_proj(x).chunk(2, dim=-1)
        return self.q_proj(x), k, v

    def fuse_qkv(self) -> None:
        """Replace q_proj and kv_proj by one linear layer with both weights (inference copies
        only: the checkpoint keeps them apart). Its outputs are theirs, column by column."""
        q, kv = self.q_proj, self.kv_proj
        if not (isinstance(q, nn.Linear) and isinstance(kv, nn.Linear)):
            raise TypeError("fuse_qkv wants the float nn.Linear layers (fuse before quantizing)")
        d_in, d_out = q.in_features, q.out_features + kv.out_features
        fused = nn.Linear(d_in, d_out, bias=q.bias is not None, device=q.weight.device,
                          dtype=q.weight.dtype)  # fmt: skip
        with torch.no_grad():
            fused.weight.copy_(torch.cat([q.weight, kv.weight]))  # (3D, D)
            if fused.bias is not None and q.bias is not None and kv.bias is not None:
                fused.bias.copy_(torch.cat([q.bias, kv.bias]))
        self.qkv_proj = fused
        del self.q_proj, self.kv_proj

    def forward(
        self,
        x: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor,
        *,
        return_weights: bool = False,
        q: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (B, T, D) queries; k, v: (B, H, S, dh); mask: (B, 1, T, S) bool, True = may attend,
        or that mask made additive (`additive_mask`: 0 or -inf, in the activations' dtype);
        q: x's query projection (B, T, D) if the caller has it (`project_qkv`).

        Every query row must allow at least one key (callers guarantee it), so no NaNs appear.
        Returns (B, T, D) and, if asked, the head-averaged weights (B, T, S).
        """
        q = self.split_heads(self.q_proj(x) if q is None else q)  # (B, H, T, dh)
        if return_weights:
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, H, T, S)
            if mask.dtype is torch.bool:
                scores = scores.masked_fill(~mask, float("-inf"))
            else:
                scores = scores + mask
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
