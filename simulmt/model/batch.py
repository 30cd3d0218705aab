"""One batched decoder step for the beams of many streams (cross-stream batching).

Each request names a beam, the source it decodes against and how many source tokens it may
see. All hypotheses of all requests go through the decoder as one batch: self-attention caches
of different lengths and sources of different lengths are padded and masked. When every
request is one hypothesis over a source in one cache pool, the batch is a view of the pool's
slots instead (no gathering), and each new position is written into the pool in place.

The step leaves its new K/V staged in every request's `DecoderCache`; the search then only
says which hypotheses go on (`DecoderCache.extend(parents)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from simulmt.data.vocab import BOS_ID
from simulmt.model import graphs
from simulmt.model.attention import aligned
from simulmt.model.cache import StepKV
from simulmt.model.layers import pack_kv, stack_kv, unstack_kv
from simulmt.model.pool import KVPool
from simulmt.model.state import DecoderBeam, SourceState
from simulmt.model.transformer import SimulTransformer, StepOutput, prefill_kv

_FILLER_TOKEN = torch.tensor([BOS_ID])  # (1,) what a filler row feeds (its output is dropped)
MAX_FILLER_SHARE = 0.25  # filler rows (wasted compute) a pooled batch may carry, as a share


@dataclass(frozen=True)
class StepRequest:
    """One stream's part of a batched decoder step: its beam's hypotheses, the source they
    attend to and how much of it they may see."""

    source: SourceState
    beam: DecoderBeam
    visible: int  # source tokens the beam may attend to (>= 1)
    attention: bool = False  # also return cross-attention weights (coverage penalty)
    peek: int = 0  # if > 0: also the best hypothesis' distribution with this many visible
    # added to the log-probabilities of these tokens in every hypothesis' row (the pieces of
    # the visible source's names: simulmt.search.names)
    boost: tuple[int, ...] = ()
    boost_by: float = 0.0


@torch.no_grad()
def decode_batch(
    model: SimulTransformer, requests: Sequence[StepRequest]
) -> tuple[StepOutput, list[int]]:
    """The decoder step of every hypothesis of `requests`, as one forward pass. Returns the
    outputs of all rows and each request's first row; its hypotheses follow it, then its
    peek row if it asked for one. Each beam's cache holds the new K/V staged."""
    for req in requests:
        if req.beam.cache.length != req.beam.length:  # a forced prefix (re-translation)
            _prefill(model, req)
    span = _pool_span(requests)
    # the batch, one entry per decoder row group: a request, or None for a filler row that
    # keeps pooled sources in slot order (its output is dropped)
    layout: Sequence[StepRequest | None] = requests if span is None else span.layout
    writes = None if span is None else _place(span)  # each row's new position in the pool
    step_kv = StepKV()
    rows: list[tuple[int, int]] = []  # (layout index, hypothesis index) per batch row
    vis: list[int] = []
    starts: dict[int, int] = {}  # id(request) -> its first batch row
    for e, entry in enumerate(layout):
        if entry is None:
            rows.append((e, 0))
            vis.append(1)
            continue
        size = entry.beam.size
        starts[id(entry)] = len(rows)
        entry.beam.cache.stage(step_kv, len(rows), size, written=writes is not None)
        rows += [(e, h) for h in range(size)]
        vis += [entry.visible] * size
        if entry.peek:
            rows.append((e, 0))
            vis.append(entry.peek)
    p_max = max(req.beam.cache.length for req in requests)
    # every attention width aligned, each row's keys at its own positions: a row's attention
    # is then the same in any batch (simulmt.model.attention.ALIGN)
    s_max = aligned(max(len(req.source.ids) for req in requests))
    last = torch.cat([_row_tokens(req) for req in layout])  # (N,)
    lengths = [_length(layout[e]) for e, _ in rows]
    positions = torch.tensor(lengths)  # (N,)
    past: torch.Tensor  # (2L, N, H, W, dh)
    if span is not None and writes is not None:  # the caches are the pool's target rows
        write_at = torch.tensor(writes)  # (N,) each row's new position
        width = aligned(max(writes) + 1)
        past = span.pool.target_rows(span.lo, span.lo + len(layout), width)
        past_valid = torch.arange(width).unsqueeze(0) <= write_at.unsqueeze(1)  # (N, W)
    else:  # gathered and zero-padded; each row's new K/V right after its own cache
        width = aligned(p_max + 1)
        past = _gather_self(model, layout, width)  # (2L, N, H, W, dh)
        write_at = torch.tensor([_cached(layout[e]) for e, _ in rows])  # (N,)
        past_valid = torch.arange(width).unsqueeze(0) <= write_at.unsqueeze(1)  # (N, W)
    if span is not None:  # consecutive slots of one pool: the batch is a view
        cross = span.pool.rows(span.lo, span.lo + len(layout), s_max)  # (2L, N, H, S, dh)
    else:
        cross = _gather_cross(requests, s_max)
    cross_valid = torch.arange(s_max).unsqueeze(0) < torch.tensor(vis).unsqueeze(1)  # (N, S)
    out = graphs.decode_step(
        model,
        last,
        positions,
        past,
        past_valid,
        cross,
        cross_valid,
        top=max(lengths),
        return_attention=any(req.attention for req in requests),
        write_at=write_at,
    )
    step_kv.kv = out.self_kv
    return out, [starts[id(req)] for req in requests]


@dataclass(frozen=True)
class _PoolSpan:
    pool: KVPool
    lo: int  # first slot
    layout: list[StepRequest | None]  # slot lo + e -> its request, or None (a filler row)


def _pool_span(requests: Sequence[StepRequest]) -> _PoolSpan | None:
    """When every request is one hypothesis (no peek row) whose source sits in the same
    pool, and their slots leave few gaps: the requests in slot order, gaps as fillers."""
    first = requests[0].source.slot
    if first is None:
        return None
    pool = first.pool
    by_slot: dict[int, StepRequest] = {}
    for req in requests:
        slot = req.source.slot
        if slot is None or slot.pool is not pool or req.beam.size != 1 or req.peek:
            return None
        by_slot[slot.index] = req
    if len(by_slot) != len(requests):  # two requests over one source: rows must be distinct
        return None
    if _gaps(by_slot) > MAX_FILLER_SHARE * len(requests):
        # released slots among the requested ones: move streams down (once), then look again
        if not pool.compact():
            return None
        by_slot = {req.source.slot.index: req for req in requests if req.source.slot}
        if _gaps(by_slot) > MAX_FILLER_SHARE * len(requests):
            return None
    lo, hi = min(by_slot), max(by_slot) + 1
    return _PoolSpan(pool, lo, [by_slot.get(i) for i in range(lo, hi)])


def _place(span: _PoolSpan) -> list[int] | None:
    """Place every cache of a pooled batch in its slot's target plane (each is one
    hypothesis: `_pool_span` checked) and return each row's write position: the cache's
    length, or for a filler row its slot's target length (past whatever the slot's tenant
    has, so nothing reads it). None if a cache would outgrow the pool's width (then the
    batch gathers)."""
    pool = span.pool
    writes = [
        pool.target_lengths[span.lo + e] if req is None else req.beam.cache.length
        for e, req in enumerate(span.layout)
    ]
    if not pool.fits(aligned(max(writes) + 1)):
        return None
    for req in span.layout:
        if req is not None and req.source.slot is not None:
            req.beam.cache.place_in(req.source.slot)
    return writes


def _gaps(by_slot: dict[int, StepRequest]) -> int:
    return max(by_slot) - min(by_slot) + 1 - len(by_slot)


def _length(req: StepRequest | None) -> int:
    return 0 if req is None else req.beam.length


def _cached(req: StepRequest | None) -> int:
    return 0 if req is None else req.beam.cache.length


# Batch gathering works per request, not per row or per layer: a request's K/V of all layers
# are one (2L, rows, H, T, dh) block (see `stack_kv`), padded once, and the blocks concatenated.
# This keeps the number of tensor ops per step proportional to the number of streams.


def _rows(req: StepRequest | None) -> int:
    return 1 if req is None else req.beam.size + (1 if req.peek else 0)


def _row_tokens(req: StepRequest | None) -> torch.Tensor:
    if req is None:
        return _FILLER_TOKEN
    last = req.beam.tokens[:, -1]  # (Bm,)
    return torch.cat([last, last[:1]]) if req.peek else last  # (rows,)


def _gather_self(
    model: SimulTransformer, layout: Sequence[StepRequest | None], width: int
) -> torch.Tensor:
    """The layout's self-attention caches as one block (2L, N, H, width, dh), zero-padded
    (every row's new position included: the step writes it in place)."""
    cfg = model.cfg
    blocks = []
    for req in layout:
        block = None if req is None else req.beam.cache.view()  # (2L, Bm, H, P_r, dh)
        if block is None:  # a filler, or a beam at its first step: nothing cached
            shape = (2 * cfg.dec_layers, _rows(req), cfg.n_heads, 0, cfg.head_dim)
            blocks.append(torch.zeros(shape, dtype=model.dtype))
            continue
        if req is not None and req.peek:
            block = torch.cat([block, block[:, :1]], dim=1)  # (2L, Bm+1, H, P_r, dh)
        blocks.append(block)
    return pack_kv(blocks, width)  # (2L, N, H, W, dh): a new tensor (each block is shorter)


def _gather_cross(requests: Sequence[StepRequest], s_max: int) -> torch.Tensor:
    """The requests' cross-attention K/V as one block (2L, N, H, S, dh), zero-padded to S
    (aligned: a lone stream is padded as in a batch)."""
    blocks = []
    for req in requests:
        block = req.source.cross_kv  # (2L, 1, H, S_r, dh)
        assert block is not None
        blocks.append(block.expand(-1, _rows(req), -1, -1, -1))
    return pack_kv(blocks, s_max)


def _prefill(model: SimulTransformer, req: StepRequest) -> None:
    """Cache the decoder states of a beam's forced tokens (all but the last) in one pass."""
    beam, cross = req.beam, req.source.cross_kv
    assert cross is not None
    if beam.cache.length != 0:
        raise ValueError("a beam's cache can only be prefilled from empty")
    kv = prefill_kv(model, beam.tokens[:, :-1], unstack_kv(cross), req.visible)
    beam.cache.append(stack_kv(kv))  # (2L, Bm, H, T-1, dh)
