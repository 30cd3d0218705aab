"""One batched decoder step for the beams of many streams (cross-stream batching).

Each request names a beam, the source it decodes against and how many source tokens it may
see. All hypotheses of all requests go through the decoder as one batch: self-attention caches
of different lengths and sources of different lengths are padded and masked.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from simulmt.model.layers import KV, pack_kv, stack_kv, unstack_kv
from simulmt.model.pool import KVPool
from simulmt.model.state import BeamState, SourceState
from simulmt.model.transformer import SimulTransformer, prefill_kv
from simulmt.vocab import BOS_ID, NEVER

_FILLER_TOKEN = torch.tensor([BOS_ID])  # (1,) what a filler row feeds (its output is dropped)


@dataclass(frozen=True)
class StepRequest:
    source: SourceState
    beam: BeamState
    visible: int  # source tokens the beam may attend to (>= 1)
    attention: bool = False  # also return cross-attention weights (coverage penalty)
    lookahead: int = 0  # if > 0: also the best hypothesis' distribution with this many visible


@dataclass(frozen=True)
class StepBatch:
    """A decoder step's outputs for all its rows (the `StepResult`s are slices of it)."""

    log_probs: torch.Tensor  # (N, V)
    self_kv: torch.Tensor  # new positions' K/V, all layers (stack_kv): (2L, N, H, 1, dh)
    state: torch.Tensor  # (N, D)
    attention: torch.Tensor | None  # (N, S)


class StepResult:
    """One request's rows of a step: rows start..start+size-1 of the batch, then its lookahead
    row if it asked for one. The tensors are sliced when read (views): a greedy search reads
    only `top` and `top_log_prob`, and a homed beam's new K/V is in its slot already."""

    def __init__(
        self,
        batch: StepBatch,
        start: int,
        size: int,
        *,
        lookahead: bool = False,
        source_len: int | None = None,
        top: int | None = None,
        top_log_prob: float = 0.0,
        homed: bool = False,
    ) -> None:
        self.batch = batch
        self.start = start
        self.size = size
        self.lookahead = lookahead
        self.source_len = source_len  # None: no attention asked for
        # single-hypothesis beams: the most probable writable token (EOS included) and its
        # log-probability, picked for the whole batch at once (the greedy search's fast path)
        self.top = top
        self.top_log_prob = top_log_prob
        self.homed = homed  # self_kv is already in the beam's home slot, at position cached()

    @classmethod
    def of(
        cls,
        *,
        log_probs: torch.Tensor,
        self_kv: torch.Tensor,
        state: torch.Tensor,
        attention: torch.Tensor | None = None,
        lookahead_log_probs: torch.Tensor | None = None,
    ) -> StepResult:
        """A result from tensors of its own (Bm rows): (Bm, V), (2L, Bm, H, 1, dh), (Bm, D),
        (Bm, S) or None, (V,) or None."""
        lp = log_probs
        if lookahead_log_probs is not None:
            lp = torch.cat([log_probs, lookahead_log_probs.unsqueeze(0)])  # (Bm+1, V)
        n = int(log_probs.shape[0])
        src = None if attention is None else int(attention.shape[1])
        batch = StepBatch(lp, self_kv, state, attention)
        return cls(batch, 0, n, lookahead=lookahead_log_probs is not None, source_len=src)

    @property
    def log_probs(self) -> torch.Tensor:
        return self.batch.log_probs[self.start : self.start + self.size]  # (Bm, V)

    @property
    def self_kv(self) -> torch.Tensor:
        return self.batch.self_kv[:, self.start : self.start + self.size]  # (2L, Bm, H, 1, dh)

    @property
    def state(self) -> torch.Tensor:
        return self.batch.state[self.start : self.start + self.size]  # (Bm, D)

    @property
    def attention(self) -> torch.Tensor | None:
        """(Bm, S) head-averaged cross-attention of the last layer, if the request asked."""
        attn = self.batch.attention
        if attn is None or self.source_len is None:
            return None
        return attn[self.start : self.start + self.size, : self.source_len]

    @property
    def lookahead_log_probs(self) -> torch.Tensor | None:
        """(V,) the best hypothesis' distribution with one more word visible, if asked."""
        return self.batch.log_probs[self.start + self.size] if self.lookahead else None


@torch.no_grad()
def run_step(model: SimulTransformer, requests: Sequence[StepRequest]) -> list[StepResult]:
    for req in requests:
        if req.beam.cached() != req.beam.length:  # a forced prefix (re-translation): prefill
            _prefill(model, req)
    span = _pool_span(requests)
    # the batch, one entry per decoder row group: a request, or None for a filler row that
    # keeps pooled sources in slot order (its output is dropped)
    layout: Sequence[StepRequest | None] = requests if span is None else span.layout
    rows: list[tuple[int, int]] = []  # (layout index, hypothesis index) per batch row
    vis: list[int] = []
    starts: dict[int, int] = {}  # id(request) -> its first batch row
    for e, entry in enumerate(layout):
        if entry is None:
            rows.append((e, 0))
            vis.append(1)
            continue
        starts[id(entry)] = len(rows)
        rows += [(e, h) for h in range(entry.beam.size)]
        vis += [entry.visible] * entry.beam.size
        if entry.lookahead:
            rows.append((e, 0))
            vis.append(entry.lookahead)
    homes = None if span is None else _home_span(span)
    p_max = max(req.beam.cached() for req in requests)
    s_max = max(len(req.source.ids) for req in requests)
    last = torch.cat([_row_tokens(req) for req in layout])  # (N,)
    positions = torch.tensor([_length(layout[e]) for e, _ in rows])  # (N,)
    past: list[KV] | None = None
    past_valid = None
    write_at = None
    if span is not None and homes is not None:  # the beams' caches are the pool's target rows
        write_at = torch.tensor(homes)  # (N,) each row's new position
        width = max(homes) + 1
        past = unstack_kv(span.pool.target_rows(span.lo, span.lo + len(layout), width))
        past_valid = torch.arange(width).unsqueeze(0) <= write_at.unsqueeze(1)  # (N, W)
    elif p_max > 0:
        past = unstack_kv(_gather_self(model, layout, p_max))  # (N, H, P+1, dh) each
        lens = torch.tensor([_cached(layout[e]) for e, _ in rows])  # (N,)
        past_valid = torch.arange(p_max).unsqueeze(0) < lens.unsqueeze(1)  # (N, P)
    if span is not None:  # consecutive slots of one pool: the batch is a view
        cross = unstack_kv(span.pool.rows(span.lo, span.lo + len(layout), s_max))
    else:
        cross = _gather_cross(requests, s_max)
    cross_valid = torch.arange(s_max).unsqueeze(0) < torch.tensor(vis).unsqueeze(1)  # (N, S)
    want_attn = any(req.attention for req in requests)
    out = model.decode_step(
        last,
        positions,
        past,
        past_valid,
        cross,
        cross_valid,
        return_attention=want_attn,
        room=past is not None and write_at is None,
        write_at=write_at,
    )
    firsts = [starts[id(req)] for req in requests]
    batch = StepBatch(out.log_probs, out.self_kv, out.state, out.attention)
    return _split(requests, firsts, batch, homed=write_at is not None)


MAX_FILLER_SHARE = 0.25  # filler rows (wasted compute) a pooled batch may carry, as a share


@dataclass(frozen=True)
class _PoolSpan:
    pool: KVPool
    lo: int  # first slot
    layout: list[StepRequest | None]  # slot lo + e -> its request, or None (a filler row)


def _pool_span(requests: Sequence[StepRequest]) -> _PoolSpan | None:
    """When every request is one hypothesis (no lookahead row) whose source sits in the same
    pool, and their slots leave few gaps: the requests in slot order, gaps as fillers."""
    first = requests[0].source.cross
    if first is None:
        return None
    pool = first.pool
    by_slot: dict[int, StepRequest] = {}
    for req in requests:
        slot = req.source.cross
        if slot is None or slot.pool is not pool or req.beam.size != 1 or req.lookahead:
            return None
        by_slot[slot.index] = req
    if len(by_slot) != len(requests):  # two requests over one source: rows must be distinct
        return None
    if _gaps(by_slot) > MAX_FILLER_SHARE * len(requests):
        # released slots among the requested ones: move streams down (once), then look again
        if not pool.compact():
            return None
        by_slot = {req.source.cross.index: req for req in requests if req.source.cross}
        if _gaps(by_slot) > MAX_FILLER_SHARE * len(requests):
            return None
    lo, hi = min(by_slot), max(by_slot) + 1
    return _PoolSpan(pool, lo, [by_slot.get(i) for i in range(lo, hi)])


def _home_span(span: _PoolSpan) -> list[int] | None:
    """Home every beam of a pooled batch in its slot's target plane (each is one hypothesis:
    `_pool_span` checked) and return each row's write position: the beam's cached length, or
    for a filler row its slot's cached length (past whatever the slot's owner has, so nothing
    reads it). None if a cache would outgrow the pool's width (then the batch gathers)."""
    pool = span.pool
    writes = [
        pool.target_lengths[span.lo + e] if req is None else req.beam.cached()
        for e, req in enumerate(span.layout)
    ]
    if not pool.fits(max(writes) + 1):
        return None
    for req in span.layout:
        if req is not None and req.source.cross is not None:
            req.beam.home_in(req.source.cross)
    return writes


def _gaps(by_slot: dict[int, StepRequest]) -> int:
    return max(by_slot) - min(by_slot) + 1 - len(by_slot)


def _length(req: StepRequest | None) -> int:
    return 0 if req is None else req.beam.length


def _cached(req: StepRequest | None) -> int:
    return 0 if req is None else req.beam.cached()


@functools.lru_cache(maxsize=4)
def _never_penalty(vocab: int) -> torch.Tensor:
    """(V,) -inf for the ids a decoder never writes, else 0."""
    pen = torch.zeros(vocab)
    pen[NEVER] = float("-inf")
    return pen


# Batch gathering works per request, not per row or per layer: a request's K/V of all layers
# are one (2L, rows, H, T, dh) block (see `stack_kv`), padded once, and the blocks concatenated.
# This keeps the number of tensor ops per step proportional to the number of streams.


def _rows(req: StepRequest | None) -> int:
    return 1 if req is None else req.beam.size + (1 if req.lookahead else 0)


def _row_tokens(req: StepRequest | None) -> torch.Tensor:
    if req is None:
        return _FILLER_TOKEN
    last = req.beam.tokens[:, -1]  # (Bm,)
    return torch.cat([last, last[:1]]) if req.lookahead else last  # (rows,)


def _gather_self(
    model: SimulTransformer, layout: Sequence[StepRequest | None], p_max: int
) -> torch.Tensor:
    cfg = model.cfg
    blocks = []
    for req in layout:
        block = None if req is None else req.beam.cache()  # (2L, Bm, H, P_r, dh)
        if block is None:  # a filler, or a beam at its first step: nothing cached
            shape = (2 * cfg.dec_layers, _rows(req), cfg.n_heads, 0, cfg.head_dim)
            blocks.append(torch.zeros(shape, dtype=model.dtype))
            continue
        if req is not None and req.lookahead:
            block = torch.cat([block, block[:, :1]], dim=1)  # (2L, Bm+1, H, P_r, dh)
        blocks.append(block)
    return pack_kv(blocks, p_max + 1, room=1)  # (2L, N, H, P+1, dh), last slot free


def _gather_cross(requests: Sequence[StepRequest], s_max: int) -> list[KV]:
    if len(requests) == 1:  # one stream: broadcast its K/V over the beam, no copies
        block = requests[0].source.cross_kv
        assert block is not None
        return unstack_kv(block.expand(-1, _rows(requests[0]), -1, -1, -1))
    blocks = []
    for req in requests:
        block = req.source.cross_kv  # (2L, 1, H, S_r, dh)
        assert block is not None
        blocks.append(block.expand(-1, _rows(req), -1, -1, -1))
    return unstack_kv(pack_kv(blocks, s_max))  # (N, H, S, dh) each


def _split(
    requests: Sequence[StepRequest],
    firsts: list[int],
    batch: StepBatch,
    *,
    homed: bool = False,
) -> list[StepResult]:
    """Per request its rows of the batch outputs; `firsts[r]` is request r's first row."""
    log_probs = batch.log_probs
    best_lp, best = (log_probs + _never_penalty(log_probs.shape[1])).max(dim=1)  # (N,) each
    tops, top_lps = best.tolist(), best_lp.tolist()
    has_attention = batch.attention is not None
    return [
        StepResult(
            batch,
            start,
            req.beam.size,
            lookahead=req.lookahead > 0,
            source_len=len(req.source.ids) if has_attention and req.attention else None,
            top=tops[start] if req.beam.size == 1 else None,
            top_log_prob=top_lps[start],
            homed=homed,
        )
        for req, start in zip(requests, firsts, strict=True)
    ]


def _prefill(model: SimulTransformer, req: StepRequest) -> None:
    """Cache the decoder states of a beam's forced tokens (all but the last) in one pass."""
    beam, cross = req.beam, req.source.cross_kv
    assert cross is not None
    if beam.cached() != 0:
        raise ValueError("a beam's cache can only be prefilled from empty")
    beam.unhome()
    kv = prefill_kv(model, beam.tokens[:, :-1], unstack_kv(cross), req.visible)
    beam.self_kv = stack_kv(kv)  # (2L, Bm, H, T-1, dh)
