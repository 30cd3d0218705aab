"""The loop guard: no hypothesis repeats a short token cycle a third time in a row.

Small models fall into degenerate repetitions on unfamiliar input ("quickly quickly quickly",
"diagdddiagdddiagdd"); once a hypothesis has written a cycle twice, the model's own history makes
the third copy ever more likely. The guard bans the one token that would open the third copy
(of any cycle up to `max_cycle` tokens long), so the search takes its next-best continuation
instead; a cycle written only twice ("very very") stays allowed. It is an option
(`SearchOptions.loop_guard`) because it changes outputs; eval/loops.py measures its effect.

The guard also bans a second sentence stop right after one (`stops`: the pieces ".", "?", "!"),
the loop the model falls into when its sentence is complete but the source goes on: EOS may not
come before the source ends, so it writes "Tokyo.." (in 211 of 10,575 words of an unpunctuated
newstest2015 stream). The cycle rule alone allows two copies, and "..." is banned by it anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

REPEATS = 3  # the copy in a row that is banned (eval/loops.py counts three in a row as a loop)


def cycle_bans(tokens: Sequence[int], *, max_cycle: int, repeats: int = REPEATS) -> set[int]:
    """The tokens that would open the `repeats`-th consecutive copy of a cycle of 1..max_cycle
    tokens at the end of `tokens` (for n = 1..max_cycle: the last (repeats-1)*n tokens are
    copies of one n-token unit, so writing tokens[-n] would start yet another copy)."""
    bans: set[int] = set()
    t = list(tokens)
    for n in range(1, max_cycle + 1):
        span = (repeats - 1) * n
        if span > len(t):
            break
        tail = t[len(t) - span :]
        unit = tail[:n]
        if all(tail[r * n : (r + 1) * n] == unit for r in range(1, repeats - 1)):
            bans.add(unit[0])
    return bans


def beam_bans(
    tokens: torch.Tensor, *, max_cycle: int, stops: frozenset[int] = frozenset()
) -> list[tuple[int, int]]:
    """(row, token) pairs banned for the next step of each hypothesis of a beam: the cycle
    bans, and every stop piece after a hypothesis that ends in one.
    tokens (Bm, 1 + T): BOS then the written tokens."""
    span = (REPEATS - 1) * max_cycle
    tails = tokens[:, 1:][:, -span:].tolist()  # (Bm, <= span): the cycles fit in this tail
    bans: list[tuple[int, int]] = []
    for row, tail in enumerate(tails):
        banned = cycle_bans(tail, max_cycle=max_cycle)
        if tail and tail[-1] in stops:
            banned |= stops
        bans.extend((row, tok) for tok in sorted(banned))
    return bans


def next_banned(
    tokens: torch.Tensor, token: int, *, max_cycle: int, stops: frozenset[int] = frozenset()
) -> bool:
    """Whether `beam_bans` bans `token` for the first hypothesis of a beam, tokens (Bm, 1 + T):
    BOS then the written tokens; the greedy search asks only this of its best token at each
    step. Faster than all of the bans: a cycle ban is always one of the last `max_cycle`
    tokens written."""
    span = (REPEATS - 1) * max_cycle
    tail = tokens[0, max(1, int(tokens.shape[1]) - span) :].tolist()  # (<= span,)
    if tail and tail[-1] in stops and token in stops:
        return True
    return token in tail[-max_cycle:] and token in cycle_bans(tail, max_cycle=max_cycle)
