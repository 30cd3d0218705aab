"""The model layer's per-stream state: the encoded source, and what a decoder step reads of a
beam.

`SourceState` holds the encoded source (token ids, word ends, the encoder's self-attention
K/V cache and the decoder's cross-attention K/V over it, in the stream's pool slot). The beam
itself is the search's (`simulmt.search.state.BeamState`); `DecoderBeam` is the part of it a
decoder step reads, so the model layer never imports the search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from simulmt.model.cache import DecoderCache
from simulmt.model.pool import KVPool, KVSlot

__all__ = ["DecoderBeam", "SourceState"]


@dataclass
class SourceState:
    """One stream's source sentence as encoded so far: READs only append to it, so the
    encoder's and the cross-attention's caches grow and are never recomputed."""

    ids: list[int] = field(default_factory=list)  # encoded source tokens (read or not yet read)
    ends: list[int] = field(default_factory=list)  # tokens after each encoded word
    enc_kv: torch.Tensor | None = None  # encoder self-attention K/V: (2L_enc, 1, H, S, dh)
    # this stream's slot in a cache pool: the decoder's cross-attention K/V of the source (and,
    # while its beam is one hypothesis, that beam's self-attention cache: `DecoderCache`)
    slot: KVSlot | None = None

    @property
    def cross_kv(self) -> torch.Tensor | None:
        """(2L_dec, 1, H, S, dh): a view of the pool slot, valid until the next append."""
        return None if self.slot is None else self.slot.tensor()

    def append_cross(self, new: torch.Tensor, pool: KVPool) -> None:
        """Append new source positions' cross-attention K/V (2L_dec, 1, H, n, dh); the first
        append claims the stream's slot in `pool`."""
        if self.slot is None:
            self.slot = pool.claim()
        if not self.slot.pool.fits(self.slot.length + int(new.shape[3])):
            self.slot = self.slot.spill()  # too long for the shared pool: a pool of its own
        self.slot.append(new)

    def visible(self, words_read: int) -> int:
        """Source tokens the decoder may attend to after reading `words_read` words."""
        return self.ends[words_read - 1] if words_read > 0 else 0


class DecoderBeam(Protocol):
    """What a decoder step reads of a beam: its hypotheses' tokens and their cache."""

    @property
    def tokens(self) -> torch.Tensor: ...  # (Bm, T) BOS + target tokens

    @property
    def cache(self) -> DecoderCache: ...  # the decoder's self-attention K/V of tokens[:, :-1]

    @property
    def size(self) -> int: ...  # hypotheses (Bm)

    @property
    def length(self) -> int: ...  # target tokens without BOS (T-1)
