"""Beam expansion, hypothesis scoring and stopping rules (pure functions over `BeamState`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from simulmt.data.vocab import EOS_ID, NEVER
from simulmt.search.loops import beam_bans, next_banned
from simulmt.search.options import Scoring, SearchOptions, Stopping
from simulmt.search.state import BeamState, Hypothesis
from simulmt.search.step import StepResult


def score(
    opts: SearchOptions,
    log_prob: float,
    length: int,
    src_len: int,
    attn_sum: tuple[float, ...] = (),
) -> float:
    """The search's score of a hypothesis of `length` tokens (EOS counted) for `src_len` tokens."""
    if opts.scoring is Scoring.LENGTH_REWARD:
        s = log_prob + opts.length_reward * length
    elif opts.scoring is Scoring.BOUNDED_LENGTH_REWARD:
        s = log_prob + opts.length_reward * min(length, opts.bound_ratio * src_len)
    elif opts.scoring is Scoring.LENGTH_NORM:
        s = log_prob / max(length, 1)
    elif opts.scoring is Scoring.GNMT:
        s = log_prob / (((5 + length) ** opts.alpha) / (6**opts.alpha))
    else:
        s = log_prob
    if opts.beta > 0 and attn_sum:
        s += opts.beta * sum(math.log(min(a, 1.0)) for a in attn_sum if a > 0)
    return s


def expand(
    beam: BeamState,
    step: StepResult,
    opts: SearchOptions,
    *,
    allow_eos: bool,
    max_len: int,
    src_len: int,
    forbid: torch.Tensor | None = None,
    stops: frozenset[int] = frozenset(),
    bans: Sequence[tuple[int, int]] = (),
    ends: Sequence[tuple[int, int]] = (),
) -> None:
    """Extend every hypothesis by one token: keep the best `opts.beam` non-EOS candidates
    (after threshold pruning); EOS candidates become complete hypotheses. `forbid` (V,) bool
    masks tokens that may not come next; `opts.loop_guard` bans, per hypothesis, the token that
    would repeat a short cycle a third time in a row and, after one of the `stops` pieces
    (sentence stops), another (simulmt.search.loops). `bans`: more (row, token) pairs that may
    not come next (simulmt.search.stops). `ends`: (row, token) pairs that end the hypothesis
    as EOS would, the token left out (a re-decode of an unfinished source stops where the
    model would end the sentence, rather than being pushed past it)."""
    if (
        opts.beam == 1
        and beam.size == 1
        and step.top is not None
        and step.top != EOS_ID
        and (forbid is None or not bool(forbid[step.top]))
        and not opts.needs_attention
        and beam.length < max_len
        and (0, step.top) not in bans
        and (0, step.top) not in ends
        and not (
            opts.loop_guard
            and next_banned(beam.tokens, step.top, max_cycle=opts.loop_guard, stops=stops)
        )
    ):  # greedy, and the best token is allowed and not EOS: the general path would keep it
        _advance_one(beam, step.top, step.top_log_prob)
        return
    if opts.loop_guard:
        bans = [*beam_bans(beam.tokens, max_cycle=opts.loop_guard, stops=stops), *bans]
    vocab = step.log_probs.shape[1]
    penalty = _penalty(vocab, allow_eos)  # (V,) 0 or -inf: one add instead of masked writes
    if forbid is not None:
        penalty = penalty.masked_fill(forbid, float("-inf"))
    lp = step.log_probs + penalty  # (Bm, V)
    if bans:
        rows, toks = zip(*bans, strict=True)
        lp[list(rows), list(toks)] = float("-inf")
    if beam.length >= max_len:  # too long: the only way on is to end
        lp.fill_(float("-inf"))
        lp[:, EOS_ID] = 0.0
    cand = beam.scores.unsqueeze(1) + lp  # (Bm, V)
    top_s, top_i = cand.view(-1).topk(min(2 * opts.beam, cand.numel()))  # (K,)
    floor = float(top_s[0])
    floor -= opts.abs_threshold if opts.abs_threshold is not None else float("inf")
    if opts.rel_threshold is not None:
        floor = max(floor, float(top_s[0]) + math.log(opts.rel_threshold))
    parents: list[int] = []
    tokens: list[int] = []
    ending = set(ends)
    for s, i in zip(top_s.tolist(), top_i.tolist(), strict=True):
        if s == float("-inf") or s < floor or len(parents) == opts.beam:
            break
        parent, tok = divmod(i, vocab)
        if tok == EOS_ID or (parent, tok) in ending:
            beam.complete.append(_complete(beam, parent, s, opts, src_len, step))
        else:
            parents.append(parent)
            tokens.append(tok)
    _advance(beam, parents, tokens, lp, step, coverage=opts.needs_attention)


@functools.lru_cache(maxsize=8)
def _penalty(vocab: int, allow_eos: bool) -> torch.Tensor:
    """(V,) additive mask: -inf for tokens never generated (and EOS unless allowed)."""
    pen = torch.zeros(vocab)
    pen[NEVER] = float("-inf")
    if not allow_eos:
        pen[EOS_ID] = float("-inf")
    return pen


def _complete(
    beam: BeamState, parent: int, total: float, opts: SearchOptions, src_len: int, step: StepResult
) -> Hypothesis:
    toks = tuple(beam.tokens[parent, 1:].tolist())
    attn: tuple[float, ...] = ()
    if beam.attn is not None:
        attn = tuple(beam.attn[parent].sum(dim=0).tolist())  # (S,)
    return Hypothesis(toks, total, score(opts, total, len(toks) + 1, src_len, attn), attn)


def _advance(
    beam: BeamState,
    parents: list[int],
    tokens: list[int],
    lp: torch.Tensor,
    step: StepResult,
    *,
    coverage: bool,
) -> None:
    """Row i of the new beam continues hypothesis parents[i] with tokens[i]. `coverage`: also
    track each hypothesis' cross-attention for the coverage penalty (a policy may ask for
    attention without it)."""
    beam.cache.extend(parents)
    if not parents:  # every surviving candidate ended: no active hypotheses remain
        beam.tokens = beam.tokens[:0]
        beam.token_lp = beam.token_lp[:0]
        beam.attn = None
        return
    vocab = lp.shape[1]
    flat = torch.tensor([p * vocab + t for p, t in zip(parents, tokens, strict=True)])  # (Bm',)
    new_tok = torch.tensor(tokens, dtype=torch.long).unsqueeze(1)  # (Bm', 1)
    chosen = lp.view(-1).index_select(0, flat).unsqueeze(1)  # (Bm', 1)
    n = len(parents)
    if parents == list(range(n)):  # survivors in place (always so for greedy): no copies
        old_tokens, old_lp = beam.tokens[:n], beam.token_lp[:n]
    else:
        idx = torch.tensor(parents, dtype=torch.long)  # (Bm',)
        old_tokens, old_lp = beam.tokens.index_select(0, idx), beam.token_lp.index_select(0, idx)
    beam.tokens = torch.cat([old_tokens, new_tok], dim=1)  # (Bm', T+1)
    beam.token_lp = torch.cat([old_lp, chosen], dim=1)  # (Bm', T)
    if coverage and step.attention is not None:
        row = step.attention.unsqueeze(1)  # (Bm, 1, S)
        if beam.attn is not None:
            old = beam.attn
            if old.shape[2] < row.shape[2]:  # the source grew since: pad old rows
                old = torch.nn.functional.pad(old, (0, row.shape[2] - old.shape[2]))
            row = torch.cat([old, row], dim=1)  # (Bm, T, S)
        beam.attn = row.index_select(0, torch.tensor(parents, dtype=torch.long))  # (Bm', T, S)


def _advance_one(beam: BeamState, token: int, log_prob: float) -> None:
    """`_advance` for one hypothesis extended by `token`, without candidate tensors (one pad
    each: 17 µs against 43 for a new tensor and a concatenation, at every greedy step)."""
    beam.tokens = F.pad(beam.tokens, (0, 1), value=token)  # (1, T+1)
    beam.token_lp = F.pad(beam.token_lp, (0, 1), value=log_prob)  # (1, T)
    beam.cache.extend([0])


def finished(beam: BeamState, opts: SearchOptions, src_len: int) -> bool:
    """Whether the search over a complete source may stop."""
    if beam.size == 0:
        return True
    if not beam.complete:
        return False
    best_done = max(h.score for h in beam.complete)
    best_active = score(opts, float(beam.scores[0]), beam.length + 1, src_len)
    if opts.stopping is Stopping.TOP_COMPLETE:
        return best_done >= best_active
    if opts.stopping is Stopping.EARLY:
        return best_done >= best_active + opts.margin
    return len(beam.complete) >= (opts.n_complete or opts.beam)


def best_hypothesis(beam: BeamState, opts: SearchOptions, src_len: int) -> Hypothesis:
    """The best complete hypothesis, or the best active one if none completed (time budget)."""
    if beam.complete:
        return max(beam.complete, key=lambda h: h.score)
    toks = tuple(beam.tokens[0, 1:].tolist())
    lp = float(beam.scores[0])
    return Hypothesis(toks, lp, score(opts, lp, len(toks) + 1, src_len))
