"""Batched greedy decoding of whole sentences under a wait-k schedule, recomputed from scratch.

The reference decoder: training uses it for dev BLEU; tests compare streaming sessions to it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from simulmt.data.vocab import BOS_ID, EOS_ID, NEVER, PAD_ID
from simulmt.input.words import FULL
from simulmt.model.layers import unstack_kv
from simulmt.model.transformer import SimulTransformer


def max_target_len(src_len: int, *, ratio: float = 2.0, extra: int = 10) -> int:
    """Longest target (tokens, without BOS/EOS) decoded for a source of src_len tokens."""
    return int(src_len * ratio) + extra


def pad_batch(seqs: Sequence[Sequence[int]]) -> torch.Tensor:
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)  # (B, S)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
    return out


@torch.no_grad()
def greedy_decode(
    model: SimulTransformer,
    srcs: Sequence[Sequence[int]],
    ends: Sequence[Sequence[int]],
    *,
    k: int = FULL,
    ratio: float = 2.0,
    extra: int = 10,
) -> list[list[int]]:
    """Greedy word-level wait-k (k = FULL: full sentence) for a batch; EOS is forbidden until
    the whole source is visible. Returns the target ids of each sentence (no BOS/EOS). Runs on
    the model's device, reading back one row of tokens per step."""
    device = next(model.parameters()).device
    src = pad_batch(srcs).to(device)  # (B, S)
    b, s = src.shape
    memory, _ = model.encode(src)
    cross = model.cross_kv(memory)
    src_lens = torch.tensor([len(x) for x in srcs], device=device)  # (B,)
    limits = [max_target_len(len(x), ratio=ratio, extra=extra) for x in srcs]
    tokens = torch.full((b,), BOS_ID, dtype=torch.long, device=device)
    past = None
    out: list[list[int]] = [[] for _ in range(b)]
    done = [False] * b
    for t in range(max(limits) + 1):
        vis = torch.tensor([_visible(e, k, t) for e in ends], device=device)  # (B,)
        cross_valid = torch.arange(s, device=device).unsqueeze(0) < vis.unsqueeze(1)  # (B, S)
        step = model.decode_step(
            tokens,
            torch.full((b,), t, device=device),
            None if past is None else unstack_kv(past),
            None,
            cross,
            cross_valid,
        )
        past = step.self_kv if past is None else torch.cat([past, step.self_kv], 3)  # (2L,B,H,t,dh)
        lp = step.log_probs.clone()  # (B, V)
        lp[:, NEVER] = float("-inf")
        lp[vis < src_lens, EOS_ID] = float("-inf")
        tokens = lp.argmax(dim=-1)  # (B,)
        for i, token in enumerate(tokens.tolist()):
            if done[i]:
                continue
            if token == EOS_ID or len(out[i]) >= limits[i]:
                done[i] = True
            else:
                out[i].append(token)
        if all(done):
            break
    return out


def _visible(ends: Sequence[int], k: int, t: int) -> int:
    if k == FULL:
        return ends[-1]
    return ends[min(len(ends), k + t) - 1]
