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
from simulmt.model.state import BeamState, SourceState
from simulmt.model.transformer import SimulTransformer, prefill_kv
from simulmt.search.offline import NEVER


@dataclass(frozen=True)
class StepRequest:
    source: SourceState
    beam: BeamState
    visible: int  # source tokens the beam may attend to (>= 1)
    attention: bool = False  # also return cross-attention weights (coverage penalty)
    lookahead: int = 0  # if > 0: also the best hypothesis' distribution with this many visible


@dataclass(frozen=True)
class StepResult:
    log_probs: torch.Tensor  # (Bm, V)
    self_kv: torch.Tensor  # new position's K/V, all layers (stack_kv): (2L, Bm, H, 1, dh)
    state: torch.Tensor  # (Bm, D)
    attention: torch.Tensor | None  # (Bm, S)
    lookahead_log_probs: torch.Tensor | None  # (V,)
    # single-hypothesis beams: the most probable writable token (EOS included) and its
    # log-probability, picked for the whole batch at once (the greedy search's fast path)
    top: int | None = None
    top_log_prob: float = 0.0


@torch.no_grad()
def run_step(model: SimulTransformer, requests: Sequence[StepRequest]) -> list[StepResult]:
    rows: list[tuple[int, int]] = []  # (request index, hypothesis index) per batch row
    vis: list[int] = []
    for r, req in enumerate(requests):
        if req.beam.cached() != req.beam.length:  # a forced prefix (re-translation): prefill
            _prefill(model, req)
        for h in range(req.beam.size):
            rows.append((r, h))
            vis.append(req.visible)
        if req.lookahead:
            rows.append((r, 0))
            vis.append(req.lookahead)
    p_max = max(req.beam.cached() for req in requests)
    s_max = max(len(req.source.ids) for req in requests)
    last = torch.cat([_row_tokens(req) for req in requests])  # (N,)
    positions = torch.tensor([requests[r].beam.length for r, _ in rows])  # (N,)
    past: list[KV] | None = None
    past_valid = None
    if p_max > 0:
        past = unstack_kv(_gather_self(model, requests, p_max))  # (N, H, P+1, dh) each
        lens = torch.tensor([requests[r].beam.cached() for r, _ in rows])  # (N,)
        past_valid = torch.arange(p_max).unsqueeze(0) < lens.unsqueeze(1)  # (N, P)
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
        room=past is not None,
    )
    return _split(requests, rows, out.log_probs, out.self_kv, out.state, out.attention)


@functools.lru_cache(maxsize=4)
def _never_penalty(vocab: int) -> torch.Tensor:
    """(V,) -inf for the ids a decoder never writes, else 0."""
    pen = torch.zeros(vocab)
    pen[NEVER] = float("-inf")
    return pen


# Batch gathering works per request, not per row or per layer: a request's K/V of all layers
# are one (2L, rows, H, T, dh) block (see `stack_kv`), padded once, and the blocks concatenated.
# This keeps the number of tensor ops per step proportional to the number of streams.


def _rows(req: StepRequest) -> int:
    return req.beam.size + (1 if req.lookahead else 0)


def _row_tokens(req: StepRequest) -> torch.Tensor:
    last = req.beam.tokens[:, -1]  # (Bm,)
    return torch.cat([last, last[:1]]) if req.lookahead else last  # (rows,)


def _gather_self(
    model: SimulTransformer, requests: Sequence[StepRequest], p_max: int
) -> torch.Tensor:
    cfg = model.cfg
    blocks = []
    for req in requests:
        block = req.beam.self_kv  # (2L, Bm, H, P_r, dh)
        if block is None:  # a beam at its first step: nothing cached yet
            shape = (2 * cfg.dec_layers, _rows(req), cfg.n_heads, 0, cfg.head_dim)
            blocks.append(torch.zeros(shape, dtype=model.dtype))
            continue
        if req.lookahead:
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
    rows: list[tuple[int, int]],
    log_probs: torch.Tensor,
    self_kv: torch.Tensor,
    state: torch.Tensor,
    attention: torch.Tensor | None,
) -> list[StepResult]:
    best_lp, best = (log_probs + _never_penalty(log_probs.shape[1])).max(dim=1)  # (N,) each
    tops, top_lps = best.tolist(), best_lp.tolist()
    results = []
    start = 0
    for req in requests:
        n = req.beam.size
        sl = slice(start, start + n)
        look = log_probs[start + n] if req.lookahead else None  # (V,)
        attn = None
        if attention is not None and req.attention:
            attn = attention[sl, : len(req.source.ids)]  # (Bm, S)
        results.append(
            StepResult(
                log_probs=log_probs[sl],
                self_kv=self_kv[:, sl],
                state=state[sl],
                attention=attn,
                lookahead_log_probs=look,
                top=tops[start] if n == 1 else None,
                top_log_prob=top_lps[start],
            )
        )
        start += n + (1 if req.lookahead else 0)
    return results


def _prefill(model: SimulTransformer, req: StepRequest) -> None:
    """Cache the decoder states of a beam's forced tokens (all but the last) in one pass."""
    beam, cross = req.beam, req.source.cross_kv
    assert cross is not None
    if beam.cached() != 0:
        raise ValueError("a beam's cache can only be prefilled from empty")
    kv = prefill_kv(model, beam.tokens[:, :-1], unstack_kv(cross), req.visible)
    beam.self_kv = stack_kv(kv)  # (2L, Bm, H, T-1, dh)
