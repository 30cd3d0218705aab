"""Pre-LayerNorm Transformer layers whose attention keys/values are passed in and returned."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from simulmt.model.attention import (
    Q_ALIGN,
    Groups,
    MultiHeadAttention,
    additive_mask,
    aligned,
    grouped_attention,
    row_groups,
)
from simulmt.model.config import ModelConfig

KV = tuple[torch.Tensor, torch.Tensor]  # keys, values: (B, H, S, dh) each


def stack_kv(kv: list[KV]) -> torch.Tensor:
    """Per-layer K/V -> one block (2L, B, H, S, dh): layer i's keys at 2i, values at 2i+1.
    Caches live in this form, so growing, reordering or gathering them is one op, not 2L."""
    return torch.stack([t for pair in kv for t in pair])


class Scratch:
    """A buffer reused for a batch's padded caches, pass after pass (`pack_kv(into=)`).

    A packed encoder pass needs its streams' caches as one zero-padded block; a fresh block at
    every pass (tens of MB for hundreds of streams) cost more in page faults and zero-filling
    than its copies, a third of `simulmt eval`'s encoder time (bench/RESULTS.md, session 46).
    What a reused buffer holds past a row's positions is an earlier pass's K/V: finite, and
    masked out like the zeros it replaces (a masked key adds an exact zero to every sum), so
    the results are the same bits. Model work runs on one thread at a time (`Engine`)."""

    # a larger pass gets a buffer of its own, freed after it: a burst of very long streams
    # (hundreds of MB) does not stay resident
    KEEP_BYTES = 256 * 2**20

    def __init__(self) -> None:
        self._flat: torch.Tensor | None = None

    def take(self, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """A contiguous tensor of `shape` in `like`'s dtype and device over the buffer (grown,
        zero-filled, when too small); its contents are the last pass's."""
        numel = math.prod(shape)
        if numel * like.element_size() > self.KEEP_BYTES:
            return like.new_zeros(shape)
        flat = self._flat
        if flat is None or flat.numel() < numel or flat.dtype != like.dtype \
                or flat.device != like.device:  # fmt: skip
            room = min(numel + numel // 4, self.KEEP_BYTES // like.element_size())
            flat = self._flat = like.new_zeros(room)
        return flat[:numel].view(shape)


def pack_kv(
    blocks: Sequence[torch.Tensor], width: int, *, into: Scratch | None = None
) -> torch.Tensor:
    """Blocks (2L, rows_r, H, T_r, dh) -> one (2L, N, H, width, dh), N = sum of rows, each
    block's positions first and zeros after them (masked padding must be finite).

    `into`: the result lies in this reused buffer, and its padding holds an earlier pass's
    values instead of zeros (finite: see `Scratch`); it is valid until the next `take`.
    One copy per block and no fill where nothing is padded: equal-length blocks are one
    `torch.cat`; otherwise only each block's padding is zeroed, not the whole buffer."""
    first = blocks[0]
    if into is None and all(b.shape[3] == width for b in blocks):
        return first if len(blocks) == 1 else torch.cat(list(blocks), dim=1)  # no fill
    n = sum(b.shape[1] for b in blocks)
    shape = (first.shape[0], n, first.shape[2], width, first.shape[4])
    out = first.new_empty(shape) if into is None else into.take(shape, first)
    row = 0
    for b in blocks:
        rows, t = b.shape[1], b.shape[3]
        out[:, row : row + rows, :, :t] = b
        if into is None and t < width:
            out[:, row : row + rows, :, t:] = 0
        row += rows
    return out


def append_kv(cache: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
    """`torch.cat([cache, new], dim=3)` for an append-only cache block (2L, B, H, S, dh), in
    amortized O(new) time: the result is a prefix view of a buffer with spare capacity, and the
    next append writes into that spare room instead of copying everything before it.

    Only for caches that are never cut back and never shared: a shorter view of the same buffer
    would see its positions after S overwritten (source caches qualify; beam caches do not)."""
    if cache is not None:
        base_s = _spare_capacity(cache)
        s, n = cache.shape[3], new.shape[3]
        if base_s >= s + n:
            grown = cache.as_strided((*cache.shape[:3], s + n, cache.shape[4]), cache.stride())
            grown[:, :, :, s:] = new
            return grown
        new = torch.cat([cache, new], dim=3)
    l2, b, h, s, dh = new.shape
    buf = new.new_empty(l2, b, h, max(16, 2 * s), dh)
    buf[:, :, :, :s] = new
    return buf[:, :, :, :s]


def _spare_capacity(view: torch.Tensor) -> int:
    """Time positions of the buffer `view` is a prefix of (0 unless made by `append_kv`)."""
    l2, b, h, _, dh = view.shape
    if view.storage_offset() != 0 or view.stride(3) != dh or view.stride(4) != 1:
        return 0
    cap = view.stride(2) // dh
    if view.stride() != (b * h * cap * dh, h * cap * dh, cap * dh, dh, 1):
        return 0
    if view.untyped_storage().nbytes() != l2 * b * h * cap * dh * view.element_size():
        return 0
    return cap


def unstack_kv(block: torch.Tensor) -> list[KV]:
    """The inverse of `stack_kv`, as views: per layer (B, H, S, dh) keys and values."""
    return [(block[2 * i], block[2 * i + 1]) for i in range(block.shape[0] // 2)]


@dataclass(frozen=True)
class Packing:
    """How the new tokens of B streams lie in one (M, D) matrix for a packed encoder pass: stream
    by stream, in order, no padding. Attention runs for all streams at once (or per group,
    below), over their caches padded to W positions: the longest cache plus T, rounded up to
    a multiple of `ALIGN`; each stream's queries are padded to T, the most new tokens a stream
    brings rounded up to a multiple of `Q_ALIGN`. Tensors, so that a traced pass reads every
    size from them (`simulmt.model.graphs`): rows, slots (M,): each token's stream and its
    index among that stream's new tokens; mask (B, 1, T, W), additive: stream b's query slot s
    sees b's positions 0..len_b+s (a padded slot sees finite values; its output is dropped);
    positions (M,): each token's position in its stream, which is also where its K/V goes in
    the padded cache (right after its own stream's cached positions).

    Each stream's keys thus lie as they would alone (its own positions first, masked finite
    values after, an aligned width), whoever it is batched with
    (`simulmt.model.attention.ALIGN`).

    `groups`: attention runs per group of consecutive streams (lo, hi, width), each over the
    first `width` positions only (its longest cache plus T, aligned): attention time grows
    with the width it reads, and most streams are far shorter than the longest (with streams
    ordered by length, groups of 16 read half the positions: bench/RESULTS.md, session 46).
    Empty: one group of all streams at W (what a traced pass runs)."""

    rows: torch.Tensor
    slots: torch.Tensor
    mask: torch.Tensor
    positions: torch.Tensor
    groups: Groups = ()

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensor fields in order (`Packing(*packing.tensors())` is the packing as one
        group: what a traced pass takes)."""
        return self.rows, self.slots, self.mask, self.positions

    @property
    def width(self) -> int:
        """T: the queries' padded length (the most new tokens a stream brings, aligned)."""
        return self.mask.shape[2]

    @property
    def keys(self) -> int:
        """W: the padded caches' length (the longest cache plus T, aligned)."""
        return self.mask.shape[3]

    @classmethod
    def of(
        cls, counts: Sequence[int], past_lengths: Sequence[int], *,
        dtype: torch.dtype = torch.float32, group: int = 0,
    ) -> Packing:
        """`counts` new tokens and `past_lengths` cached positions per stream (each stream
        brings at least one); `dtype`: the activations' (the mask is added to attention
        scores in it); `group`: streams per attention group (0: one group; `row_groups`)."""
        # queries and keys padded to aligned sizes, so that batching moves no bit (ALIGN)
        p, t = max(past_lengths), aligned(max(counts), Q_ALIGN)
        w = aligned(p + t)
        groups = row_groups([past + t for past in past_lengths], rows=group)
        rows = torch.tensor([b for b, c in enumerate(counts) for _ in range(c)])  # (M,)
        slots = torch.tensor([j for c in counts for j in range(c)])  # (M,)
        lengths = torch.tensor(past_lengths)  # (B,)
        keys = torch.arange(w).view(1, 1, w)
        seen = lengths.view(-1, 1, 1) + torch.arange(t).view(1, t, 1)  # (B, T, 1): last key
        mask = additive_mask((keys <= seen).unsqueeze(1), dtype)  # (B, 1, T, W)
        return cls(rows, slots, mask, lengths[rows] + slots, groups)


class Dropout(nn.Dropout):
    """nn.Dropout with its mask drawn as `rand >= p`: on a CPU, `bernoulli_` made dropout a
    sixth of a training step and this is a third faster, forward and backward
    (bench/train_step.py). Same distribution, a different random stream."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = (torch.rand(x.shape, device=x.device) >= self.p) * (1.0 / (1.0 - self.p))
        return x * keep.to(x.dtype)


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff),
            nn.ReLU(),
            Dropout(cfg.dropout),
            nn.Linear(cfg.d_ff, cfg.d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            return self.net(x)  # (B, T, D)
        # inference: no Sequential/Dropout dispatch; the linears stay modules so that int8
        # inference can replace them (module calls measured as fast as F.linear)
        up: nn.Linear = self.net[0]  # type: ignore[assignment]
        down: nn.Linear = self.net[3]  # type: ignore[assignment]
        return down(F.relu(up(x)))


def _ln(norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def _drop(drop: Dropout, x: torch.Tensor) -> torch.Tensor:
    return drop(x) if drop.training else x


def _attach(
    past: KV | None,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    room: bool = False,
    write_at: torch.Tensor | None = None,
) -> KV:
    """Keys/values of past + new positions. With `room`, past (B, H, P+T, dh) already has the
    T new slots at its end: they are filled in place (no copy of the past); with `write_at`
    (B,), T is 1 and row b's new position goes to past[b, :, write_at[b]] (rows of different
    lengths in one buffer, e.g. a view of a cache pool); else concatenate."""
    if past is None:
        return k, v
    if write_at is not None:
        rows = torch.arange(k.shape[0])  # (B,)
        past[0][rows, :, write_at] = k[:, :, 0]  # (B, H, dh) into (B, H, W, dh)
        past[1][rows, :, write_at] = v[:, :, 0]
        return past
    if room:
        t = k.shape[2]
        past[0][:, :, -t:] = k
        past[1][:, :, -t:] = v
        return past
    return torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (B, H, P+T, dh)


class EncoderLayer(nn.Module):
    """Pre-LayerNorm self-attention + feed-forward; K/V passed in and returned (cacheable)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ln_ff = nn.LayerNorm(cfg.d_model)
        self.ff = FeedForward(cfg)
        self.drop = Dropout(cfg.dropout)

    def forward(
        self, x: torch.Tensor, past: KV | None, mask: torch.Tensor, *, room: bool = False
    ) -> tuple[torch.Tensor, KV]:
        """x: (B, T, D) new positions; past: cached (B, H, P, dh) (with `room`: (B, H, P+T, dh),
        the last T slots free); mask: (B, 1, T, P+T)."""
        h = _ln(self.ln_attn, x)
        q, k, v = self.attn.project_qkv(h)  # (B, T, D) each
        k, v = self.attn.split_heads(k), self.attn.split_heads(v)  # (B, H, T, dh)
        k, v = _attach(past, k, v, room=room)  # (B, H, P+T, dh)
        a, _ = self.attn(h, k, v, mask, q=q)
        x = x + _drop(self.drop, a)
        x = x + _drop(self.drop, self.ff(_ln(self.ln_ff, x)))
        return x, (k, v)

    def forward_packed(self, x: torch.Tensor, past: KV, packing: Packing) -> torch.Tensor:
        """Inference over the new tokens of many streams as one matrix x (M, D), laid out as
        `packing` says; past: (B, H, W, dh) caches zero-padded to W, into which the new
        K/V are written in place. Every linear layer runs on the M tokens at once, attention
        once for all streams (queries padded to T). -> (M, D)"""
        h = _ln(self.ln_attn, x)
        q, k, v = self.attn.project_qkv(h)  # (M, D) each
        keys, values = past
        m, (b, heads, _, dh) = x.shape[0], keys.shape
        rows, slots = packing.rows, packing.slots
        keys[rows, :, packing.positions] = k.view(m, heads, dh)  # (M, H, dh) into (B, H, W, dh)
        values[rows, :, packing.positions] = v.view(m, heads, dh)
        queries = q.new_zeros(b, packing.mask.shape[2], heads, dh)  # (B, T, H, dh)
        queries[rows, slots] = q.view(m, heads, dh)
        o = grouped_attention(
            queries.transpose(1, 2), keys, values, packing.mask, packing.groups
        )  # (B, H, T, dh)
        a = o.transpose(1, 2)[rows, slots].reshape(m, heads * dh)  # (M, D)
        x = x + self.attn.out_proj(a)
        return x + self.ff(_ln(self.ln_ff, x))


class DecoderLayer(nn.Module):
    """Pre-LayerNorm self-attention, cross-attention and feed-forward; the self-attention K/V
    are passed in and returned (the caller's cache), the cross-attention K/V precomputed."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln_self = nn.LayerNorm(cfg.d_model)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ln_cross = nn.LayerNorm(cfg.d_model)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.ln_ff = nn.LayerNorm(cfg.d_model)
        self.ff = FeedForward(cfg)
        self.drop = Dropout(cfg.dropout)

    def forward(
        self,
        x: torch.Tensor,
        past: KV | None,
        self_mask: torch.Tensor,
        cross: KV,
        cross_mask: torch.Tensor,
        *,
        return_weights: bool = False,
        write_at: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, KV, torch.Tensor | None]:
        """x: (N, T, D); past: (N, H, P, dh) (with `write_at` (N,): T = 1 and row n's new slot
        is past[n, :, write_at[n]]); self_mask: (N, 1, T, P+T) (with `write_at`: (N, 1, 1, P));
        cross: (N, H, S, dh) each; cross_mask: (N, 1, T, S).
        Returns new x, the new positions' self K/V (N, H, T, dh) each, weights."""
        h = _ln(self.ln_self, x)
        q, k, v = self.self_attn.project_qkv(h)  # (N, T, D) each
        k, v = self.self_attn.split_heads(k), self.self_attn.split_heads(v)  # (N, H, T, dh)
        keys, values = _attach(past, k, v, write_at=write_at)  # (N, H, P+T, dh)
        a, _ = self.self_attn(h, keys, values, self_mask, q=q)
        x = x + _drop(self.drop, a)
        c, weights = self.cross_attn(
            _ln(self.ln_cross, x), cross[0], cross[1], cross_mask, return_weights=return_weights
        )
        x = x + _drop(self.drop, c)
        x = x + _drop(self.drop, self.ff(_ln(self.ln_ff, x)))
        return x, (k, v), weights
