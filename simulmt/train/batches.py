"""Tokenized training pairs, token-count batches with length buckets, and the wait-k masks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from simulmt.search.offline import BOS_ID, EOS_ID, pad_batch
from simulmt.words import waitk_visible, word_ends


@dataclass(frozen=True)
class Example:
    src: tuple[int, ...]  # source ids, no BOS/EOS
    tgt: tuple[int, ...]  # target ids, no BOS/EOS
    ends: tuple[int, ...]  # source word ends (see simulmt.words.word_ends)


@dataclass(frozen=True)
class Batch:
    src: torch.Tensor  # (B, S)
    tgt_in: torch.Tensor  # (B, T) BOS + y
    tgt_out: torch.Tensor  # (B, T) y + EOS, PAD elsewhere
    vis: torch.Tensor  # (B, T) source tokens visible per target step
    n_tokens: int  # real target tokens (loss denominator)


def make_examples(
    pairs: Sequence[tuple[list[int], list[int]]],
    is_word_start: Callable[[int], bool],
    *,
    max_len: int,
) -> list[Example]:
    """Keep pairs whose sides are non-empty and at most max_len tokens (room for BOS/EOS)."""
    out = []
    for src, tgt in pairs:
        if 0 < len(src) <= max_len and 0 < len(tgt) <= max_len:
            out.append(Example(tuple(src), tuple(tgt), tuple(word_ends(src, is_word_start))))
    return out


def bucket_batches(examples: Sequence[Example], *, max_tokens: int) -> list[list[int]]:
    """Group example indices by length so padding is small; each batch's padded
    source+target token count stays <= max_tokens. Deterministic (sorted, stable)."""
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i].src), len(examples[i].tgt)))
    batches: list[list[int]] = []
    cur: list[int] = []
    width = 0
    for i in order:
        ex = examples[i]
        w = max(width, len(ex.src) + len(ex.tgt) + 1)
        if cur and w * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, w = [], len(ex.src) + len(ex.tgt) + 1
        cur.append(i)
        width = w
    if cur:
        batches.append(cur)
    return batches


def collate(examples: Sequence[Example], k: int) -> Batch:
    """Pad a batch and build its word-level wait-k visibility (k = 0: full sentence)."""
    src = pad_batch([e.src for e in examples])  # (B, S)
    tgt_in = pad_batch([(BOS_ID, *e.tgt) for e in examples])  # (B, T)
    tgt_out = pad_batch([(*e.tgt, EOS_ID) for e in examples])  # (B, T)
    t = tgt_in.shape[1]
    vis = torch.stack([waitk_visible(e.ends, k, t) for e in examples])  # (B, T)
    n_tokens = sum(len(e.tgt) + 1 for e in examples)
    return Batch(src=src, tgt_in=tgt_in, tgt_out=tgt_out, vis=vis, n_tokens=n_tokens)
