"""One batched decoder step for the beams of many streams (cross-stream batching).

Each request names a beam, the source it decodes against and how many source tokens it may
see. All hypotheses of all requests go through the decoder as one batch: self-attention caches
of different lengths and sources of different lengths are padded and masked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from simulmt.model.layers import KV
from simulmt.model.state import BeamState, SourceState
from simulmt.model.transformer import SimulTransformer, prefill_kv


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
    self_kv: list[KV]  # per decoder layer: (Bm, H, 1, dh)
    state: torch.Tensor  # (Bm, D)
    attention: torch.Tensor | None  # (Bm, S)
    lookahead_log_probs: torch.Tensor | None  # (V,)


def _pad_time(x: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad dim 2 of (B, H, T, dh) to width."""
    if x.shape[2] == width:
        return x
    pad = x.new_zeros(x.shape[0], x.shape[1], width - x.shape[2], x.shape[3])
    return torch.cat([x, pad], dim=2)  # (B, H, width, dh)


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
    n_layers = len(model.decoder)
    p_max = max(req.beam.cached() for req in requests)
    s_max = max(len(req.source.ids) for req in requests)
    last = torch.stack([requests[r].beam.tokens[h, -1] for r, h in rows])  # (N,)
    positions = torch.tensor([requests[r].beam.length for r, _ in rows])  # (N,)
    past: list[KV] | None = None
    past_valid = None
    if p_max > 0:
        past = []
        cfg = model.cfg
        zeros = torch.zeros(1, cfg.n_heads, p_max, cfg.head_dim)  # (1, H, P, dh)
        for layer in range(n_layers):
            ks, vs = [], []
            for r, h in rows:
                kv = requests[r].beam.self_kv
                if kv is None:  # a beam at its first step: nothing cached yet
                    ks.append(zeros)
                    vs.append(zeros)
                    continue
                ks.append(_pad_time(kv[layer][0][h : h + 1], p_max))  # (1, H, P, dh)
                vs.append(_pad_time(kv[layer][1][h : h + 1], p_max))
            past.append((torch.cat(ks), torch.cat(vs)))  # (N, H, P, dh)
        lens = torch.tensor([requests[r].beam.cached() for r, _ in rows])  # (N,)
        past_valid = torch.arange(p_max).unsqueeze(0) < lens.unsqueeze(1)  # (N, P)
    cross = _gather_cross(requests, rows, s_max, n_layers)
    cross_valid = torch.arange(s_max).unsqueeze(0) < torch.tensor(vis).unsqueeze(1)  # (N, S)
    want_attn = any(req.attention for req in requests)
    out = model.decode_step(
        last, positions, past, past_valid, cross, cross_valid, return_attention=want_attn
    )
    return _split(requests, rows, out.log_probs, out.self_kv, out.state, out.attention)


def _gather_cross(
    requests: Sequence[StepRequest], rows: list[tuple[int, int]], s_max: int, n_layers: int
) -> list[KV]:
    if len(requests) == 1:  # one stream: broadcast its K/V over the beam, no copies
        kv = requests[0].source.cross_kv
        assert kv is not None
        n = len(rows)
        return [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in kv]
    per_req = []
    for req in requests:
        kv = req.source.cross_kv
        assert kv is not None
        per_req.append([(_pad_time(k, s_max), _pad_time(v, s_max)) for k, v in kv])
    index = torch.tensor([r for r, _ in rows])  # (N,)
    out: list[KV] = []
    for layer in range(n_layers):
        k_all = torch.cat([p[layer][0] for p in per_req])  # (R, H, S, dh)
        v_all = torch.cat([p[layer][1] for p in per_req])
        out.append((k_all.index_select(0, index), v_all.index_select(0, index)))  # (N, H, S, dh)
    return out


def _split(
    requests: Sequence[StepRequest],
    rows: list[tuple[int, int]],
    log_probs: torch.Tensor,
    self_kv: list[KV],
    state: torch.Tensor,
    attention: torch.Tensor | None,
) -> list[StepResult]:
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
                self_kv=[(k[sl], v[sl]) for k, v in self_kv],
                state=state[sl],
                attention=attn,
                lookahead_log_probs=look,
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
    beam.self_kv = prefill_kv(model, beam.tokens[:, :-1], cross, req.visible)  # (Bm, H, T-1, dh)
