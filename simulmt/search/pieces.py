"""Token sets of a target tokenizer that the search masks or bans (built once per tokenizer)."""

from __future__ import annotations

import functools

import torch

from simulmt.data.tokenizer import Tokenizer
from simulmt.data.vocab import EOS_ID

__all__ = ["continuations_mask", "stop_pieces"]


@functools.lru_cache(maxsize=8)
def continuations_mask(tokenizer: Tokenizer) -> torch.Tensor:
    """(V,) True for tokens that continue a word (no '▁'), EOS excluded. One per tokenizer, not
    per stream: an evaluation starts a search per sentence, and building it (V calls) cost 12%
    of a 948-sentence run. Read-only: callers combine it into new tensors."""
    word_start = [tokenizer.is_word_start(i) for i in range(tokenizer.vocab_size)]
    mask = ~torch.tensor(word_start, dtype=torch.bool)  # (V,)
    mask[EOS_ID] = False
    return mask


@functools.lru_cache(maxsize=8)
def stop_pieces(tokenizer: Tokenizer) -> frozenset[int]:
    """Ids of the bare sentence-stop pieces ".", "?", "!" (the loop guard bans a second one
    right after one; simulmt.search.loops). One per tokenizer, as `continuations_mask`."""
    stops = {".", "?", "!"}
    return frozenset(i for i in range(tokenizer.vocab_size) if tokenizer.piece(i) in stops)
