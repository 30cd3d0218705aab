"""The search's view of a batched decoder step: requests in, one `StepResult` per request out.

The model layer runs the step (`simulmt.model.batch.decode_batch`) and keeps each beam's new
K/V in its cache; this module cuts the outputs into per-request results and picks, for all
one-hypothesis beams at once, the most probable writable token (the greedy search's fast path).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from simulmt.data.vocab import NEVER
from simulmt.model.batch import StepRequest, decode_batch
from simulmt.model.transformer import SimulTransformer, StepOutput

__all__ = ["StepRequest", "StepResult", "run_step"]


class StepResult:
    """One request's rows of a step: rows start..start+size-1 of the batch, then its peek
    row if it asked for one. The tensors are sliced when read (views): a greedy search reads
    only `top` and `top_log_prob`."""

    def __init__(
        self,
        batch: StepOutput,
        start: int,
        size: int,
        *,
        peek: bool = False,
        source_len: int | None = None,
        top: int | None = None,
        top_log_prob: float = 0.0,
    ) -> None:
        self.batch = batch
        self.start = start
        self.size = size
        self.peek = peek
        self.source_len = source_len  # None: no attention asked for
        # single-hypothesis beams: the most probable writable token (EOS included) and its
        # log-probability, picked for the whole batch at once (the greedy search's fast path)
        self.top = top
        self.top_log_prob = top_log_prob

    @classmethod
    def of(
        cls,
        *,
        log_probs: torch.Tensor,
        self_kv: torch.Tensor,
        state: torch.Tensor,
        attention: torch.Tensor | None = None,
        peek_log_probs: torch.Tensor | None = None,
    ) -> StepResult:
        """A result from tensors of its own (Bm rows): (Bm, V), (2L, Bm, H, 1, dh), (Bm, D),
        (Bm, S) or None, (V,) or None."""
        lp = log_probs
        if peek_log_probs is not None:
            lp = torch.cat([log_probs, peek_log_probs.unsqueeze(0)])  # (Bm+1, V)
        n = int(log_probs.shape[0])
        src = None if attention is None else int(attention.shape[1])
        batch = StepOutput(log_probs=lp, self_kv=self_kv, state=state, attention=attention)
        return cls(batch, 0, n, peek=peek_log_probs is not None, source_len=src)

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
    def peek_log_probs(self) -> torch.Tensor | None:
        """(V,) the best hypothesis' distribution with one more word visible, if asked."""
        return self.batch.log_probs[self.start + self.size] if self.peek else None


@torch.no_grad()
def run_step(model: SimulTransformer, requests: Sequence[StepRequest]) -> list[StepResult]:
    """One decoder step for every hypothesis of every request, as one forward pass (the
    sessions of a server or an evaluation are batched here). The new K/V of each beam waits
    in its `DecoderCache` until the search extends the beam (`expand`); a result the search
    drops (a READ decided on its signals) leaves the cache as it was."""
    out, firsts = decode_batch(model, requests)
    log_probs = out.log_probs
    _boost(log_probs, requests, firsts)
    tops, top_lps = _best_writable(log_probs)
    has_attention = out.attention is not None
    return [
        StepResult(
            out,
            start,
            req.beam.size,
            peek=req.peek > 0,
            source_len=len(req.source.ids) if has_attention and req.attention else None,
            top=tops[start] if req.beam.size == 1 else None,
            top_log_prob=top_lps[start],
        )
        for req, start in zip(requests, firsts, strict=True)
    ]


def _boost(log_probs: torch.Tensor, requests: Sequence[StepRequest], firsts: list[int]) -> None:
    """Add each request's `boost_by` to its `boost` tokens in its hypotheses' rows of
    log_probs (N, V), in place: one indexed add for the batch, a row's own tokens only (so a
    row's result does not depend on its batch)."""
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    for req, first in zip(requests, firsts, strict=True):
        if not req.boost or not req.boost_by:
            continue
        for r in range(first, first + req.beam.size):
            rows += [r] * len(req.boost)
            cols += req.boost
            values += [req.boost_by] * len(req.boost)
    if rows:
        log_probs.index_put_(
            (torch.tensor(rows), torch.tensor(cols)),
            torch.tensor(values, dtype=log_probs.dtype),
            accumulate=True,
        )


def _best_writable(log_probs: torch.Tensor) -> tuple[list[int], list[float]]:
    """Per row of log_probs (N, V): the most probable token a decoder may write, and its
    log-probability. The max runs on the rows as they are (adding a (V,) penalty first cost a
    copy of the (N, V) matrix, a third of the pick's time); only rows whose best token is one
    never written are picked again with the penalty: the same result either way."""
    best_lp, best = log_probs.max(dim=1)  # (N,) each
    tops, top_lps = best.tolist(), best_lp.tolist()
    redo = [i for i, t in enumerate(tops) if t in _NEVER]
    if redo:
        rows = log_probs[redo] + _never_penalty(log_probs.shape[1])  # (R, V)
        lp, tok = rows.max(dim=1)  # (R,) each
        for i, t, v in zip(redo, tok.tolist(), lp.tolist(), strict=True):
            tops[i], top_lps[i] = t, v
    return tops, top_lps


_NEVER = frozenset(NEVER)


@functools.lru_cache(maxsize=4)
def _never_penalty(vocab: int) -> torch.Tensor:
    """(V,) -inf for the ids a decoder never writes, else 0."""
    pen = torch.zeros(vocab)
    pen[NEVER] = float("-inf")
    return pen
