"""Tokenized training pairs, token-count batches with length buckets, and the wait-k masks.

The masks follow the schedule the engine decodes with: a READ takes a whole source word, and
with `target_words` the schedule counts target *words* (g(i) source words before target word i),
so every subword token of target word i sees the same source prefix, as at inference. An example
may carry a second source, its recognizer view (lowercase, no punctuation), that a batch uses
in place of the written source where asked.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
import torch

from simulmt.data.vocab import BOS_ID, EOS_ID, PAD_ID
from simulmt.input.words import FULL, word_ends

T = TypeVar("T")


@dataclass(frozen=True)
class Example:
    src: tuple[int, ...]  # source ids, no BOS/EOS
    tgt: tuple[int, ...]  # target ids, no BOS/EOS
    ends: tuple[int, ...]  # source word ends (see simulmt.input.words.word_ends)
    tgt_words: tuple[int, ...] = ()  # 1-based target word of each tgt token, then EOS's
    asr: tuple[int, ...] = ()  # source ids of the recognizer view (empty: none)
    asr_ends: tuple[int, ...] = ()
    line: int = -1  # index of its pair in the list make_examples was given (to re-segment it)

    def source(self, asr: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(ids, word ends) of the written source or, if asked and present, the recognizer's."""
        return (self.asr, self.asr_ends) if asr and self.asr else (self.src, self.ends)


@dataclass(frozen=True)
class Batch:
    src: torch.Tensor  # (B, S)
    tgt_in: torch.Tensor  # (B, T) BOS + y
    tgt_out: torch.Tensor  # (B, T) y + EOS, PAD elsewhere
    vis: torch.Tensor  # (B, T) source tokens visible per target step
    n_tokens: int  # real target tokens (loss denominator)


def target_words(tgt: Sequence[int], is_word_start: Callable[[int], bool]) -> tuple[int, ...]:
    """1-based word index of each target token, then of EOS (one past the last word): a token
    opens a new word if it starts with '▁' (the first token always does)."""
    words, index = [], 0
    for pos, tok in enumerate(tgt):
        if pos == 0 or is_word_start(tok):
            index += 1
        words.append(index)
    return (*words, index + 1)


def make_examples(
    pairs: Sequence[tuple[list[int], list[int]]],
    is_word_start: Callable[[int], bool],
    *,
    max_len: int,
    asr: Sequence[list[int]] | None = None,
) -> list[Example]:
    """Keep pairs whose sides are non-empty and at most max_len tokens (room for BOS/EOS).
    `asr`, if given, holds each pair's recognizer-view source (dropped where empty or too long)."""
    out = []
    for n, (src, tgt) in enumerate(pairs):
        if 0 < len(src) <= max_len and 0 < len(tgt) <= max_len:
            view = asr[n] if asr is not None and 0 < len(asr[n]) <= max_len else []
            out.append(Example(tuple(src), tuple(tgt), tuple(word_ends(src, is_word_start)),
                               target_words(tgt, is_word_start), tuple(view),
                               tuple(word_ends(view, is_word_start)), n))
    return out


def resegmented(example: Example, *, src: Sequence[int], tgt: Sequence[int],
                asr: Sequence[int], is_word_start: Callable[[int], bool],
                max_len: int) -> Example:
    """`example` with new ids (a sampled segmentation) for its target, its written source and,
    if it has one, its recognizer view (`asr`). A draw over `max_len` keeps that side's old ids
    (the whole example, if it is the target)."""
    if not 0 < len(tgt) <= max_len:
        return example
    out = replace(example, tgt=tuple(tgt), tgt_words=target_words(tgt, is_word_start))
    if 0 < len(src) <= max_len:
        out = replace(out, src=tuple(src), ends=tuple(word_ends(src, is_word_start)))
    if example.asr and 0 < len(asr) <= max_len:
        out = replace(out, asr=tuple(asr), asr_ends=tuple(word_ends(asr, is_word_start)))
    return out


def upsample(items: Sequence[T], sources: Sequence[str], factors: dict[str, int]) -> list[T]:
    """Each item repeated by the factor of its source (1 if unnamed, 0 drops it), in order.

    Repeating pairs, rather than weighting the loss, keeps batches and resume as they are; the
    bucketing spreads the copies over different batches of an epoch only by chance, which is
    what sampling with replacement would do too."""
    if len(items) != len(sources):
        raise ValueError(f"{len(items)} training pairs but {len(sources)} source names: the "
                         "split's .source file must name the source of every line")
    unknown = sorted(set(factors) - set(sources))
    if unknown:
        raise ValueError(f"upsample names sources not in the training split: {unknown}; "
                         f"the split has: {sorted(set(sources))}")
    return [item for item, name in zip(items, sources, strict=True)
            for _ in range(factors.get(name, 1))]


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


def visible(ends: Sequence[int], k: int, steps: Sequence[int], width: int) -> torch.Tensor:
    """Source tokens visible at each decoder step under wait-k over source words.

    `steps[t]` is the schedule index of step t (its target token, or target word with word-level
    schedules), 1-based: it sees words x<=g, g = min(|x|, k + steps[t] - 1); k = FULL (0) sees
    the whole source. Padded to `width` steps with the last value. Returns (width,) long.
    """
    n = len(ends)
    if k == FULL:
        return torch.full((width,), ends[-1], dtype=torch.long)
    index = torch.tensor([*steps, *[steps[-1]] * (width - len(steps))], dtype=torch.long)  # (T,)
    g = torch.clamp(index + k - 1, max=n)  # (T,) words read
    return torch.tensor(ends, dtype=torch.long)[g - 1]  # (T,)


def padded(rows: Sequence[Sequence[int]]) -> np.ndarray:
    """Rows of ids as one (B, W) int64 array, PAD after each row's end: one vectorised fill
    instead of a tensor per row (a GPU's step takes less time than a per-row collate)."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))  # (B,)
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64,
                       count=int(lengths.sum()))  # (sum of lengths,)
    out = np.full((len(rows), int(lengths.max())), PAD_ID, dtype=np.int64)  # (B, W)
    out[np.arange(out.shape[1])[None, :] < lengths[:, None]] = flat  # row-major: row by row
    return out


def visible_batch(ends: Sequence[Sequence[int]], k: int, steps: Sequence[Sequence[int]],
                  width: int) -> np.ndarray:
    """`visible` for a batch at once: (B, width) source tokens visible per decoder step."""
    last = np.fromiter((e[-1] for e in ends), dtype=np.int64, count=len(ends))  # (B,)
    if k == FULL:
        return np.repeat(last[:, None], width, axis=1)  # (B, T)
    n_words = np.fromiter((len(e) for e in ends), dtype=np.int64, count=len(ends))  # (B,)
    n_steps = np.fromiter((len(x) for x in steps), dtype=np.int64, count=len(steps))  # (B,)
    flat_ends = np.fromiter(itertools.chain.from_iterable(ends), dtype=np.int64,
                            count=int(n_words.sum()))
    flat_steps = np.fromiter(itertools.chain.from_iterable(steps), dtype=np.int64,
                             count=int(n_steps.sum()))
    ends_at = np.cumsum(n_words) - n_words  # (B,) where each example's ends begin
    steps_at = np.cumsum(n_steps) - n_steps  # (B,)
    pos = np.minimum(np.arange(width)[None, :], n_steps[:, None] - 1)  # (B, T) last repeats
    index = flat_steps[steps_at[:, None] + pos]  # (B, T) schedule index, 1-based
    g = np.minimum(index + k - 1, n_words[:, None])  # (B, T) words read
    return flat_ends[ends_at[:, None] + g - 1]  # (B, T)


def collate(examples: Sequence[Example], k: int, *, target_words: bool = False,
            asr: Sequence[bool] | None = None) -> Batch:
    """Pad a batch and build its wait-k visibility (k = 0: full sentence), by target word if
    `target_words`, else by target token; `asr[b]` picks example b's recognizer-view source."""
    sources = [e.source(bool(asr and asr[b])) for b, e in enumerate(examples)]
    src = padded([ids for ids, _ in sources])  # (B, S)
    tgt_in = padded([(BOS_ID, *e.tgt) for e in examples])  # (B, T)
    tgt_out = padded([(*e.tgt, EOS_ID) for e in examples])  # (B, T)
    steps = [e.tgt_words if target_words else range(1, len(e.tgt) + 2) for e in examples]
    vis = visible_batch([ends for _, ends in sources], k, steps, tgt_in.shape[1])  # (B, T)
    n_tokens = sum(len(e.tgt) + 1 for e in examples)
    return Batch(src=torch.from_numpy(src), tgt_in=torch.from_numpy(tgt_in),
                 tgt_out=torch.from_numpy(tgt_out), vis=torch.from_numpy(vis), n_tokens=n_tokens)
