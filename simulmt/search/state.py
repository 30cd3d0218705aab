"""The search's state of one stream: everything that belongs to one stream lives here, never
on a module.

`BeamState` holds the hypotheses (tokens, scores, the decoder self-attention cache, attention
coverage, completed hypotheses); `reorder` and `truncate` change a beam and its cache together.
`StreamState` is one stream's sentence as the search decodes it: its encoded source (the model
layer's `SourceState`), its beam, what was read and what is committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from simulmt.data.vocab import BOS_ID
from simulmt.model.cache import DecoderCache
from simulmt.model.state import SourceState
from simulmt.search.names import NamePieces

if TYPE_CHECKING:
    from simulmt.policies.base import ModelSignals

__all__ = ["BeamState", "Hypothesis", "StreamState", "reorder", "truncate"]


@dataclass(frozen=True)
class Hypothesis:
    """A finished hypothesis (it chose EOS), scored when it finished."""

    tokens: tuple[int, ...]  # target ids without BOS/EOS
    log_prob: float  # sum of token log-probabilities (EOS included)
    score: float  # after the search's length/coverage scoring
    attention_sum: tuple[float, ...] = ()  # accumulated cross-attention per source token


@dataclass(eq=False)
class BeamState:
    """The hypotheses of one stream's sentence: their tokens and scores, and the decoder's
    self-attention cache of tokens[:, :-1] (`DecoderCache`: where it lives is its business)."""

    tokens: torch.Tensor  # (Bm, T) BOS + target tokens, best hypothesis first
    token_lp: torch.Tensor  # (Bm, T-1) log-probability of each target token
    cache: DecoderCache = field(default_factory=DecoderCache, repr=False)  # K/V of tokens[:, :-1]
    attn: torch.Tensor | None = None  # (Bm, T-1, S) cross-attention per token (coverage penalty)
    complete: list[Hypothesis] = field(default_factory=list)

    @classmethod
    def start(cls, prefix: list[int] | None = None) -> BeamState:
        ids = [BOS_ID, *(prefix or [])]
        tokens = torch.tensor([ids], dtype=torch.long)  # (1, T)
        return cls(tokens=tokens, token_lp=torch.zeros(1, len(ids) - 1))

    @property
    def scores(self) -> torch.Tensor:
        return self.token_lp.sum(dim=1)  # (Bm,)

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def length(self) -> int:
        """Target tokens (without BOS) of every active hypothesis."""
        return int(self.tokens.shape[1]) - 1

    def best(self) -> list[int]:
        """Tokens of the best active hypothesis (the best complete one if none is active)."""
        if self.size == 0:
            return list(max(self.complete, key=lambda h: h.score).tokens) if self.complete else []
        return self.tokens[0, 1:].tolist()


def reorder(beam: BeamState, index: torch.Tensor) -> None:
    """Keep hypotheses `index` (Bm',) in that order, with their caches."""
    beam.tokens = beam.tokens.index_select(0, index)  # (Bm', T)
    beam.token_lp = beam.token_lp.index_select(0, index)  # (Bm', T-1)
    beam.cache.select(index)
    if beam.attn is not None:
        beam.attn = beam.attn.index_select(0, index)  # (Bm', T-1, S)


def truncate(beam: BeamState, n: int) -> None:
    """Drop target tokens after the first n (tentative tokens); keeps the caches consistent.
    Hypotheses that become identical are merged (the best-scoring copy is kept)."""
    if n >= beam.length:
        return
    beam.tokens = beam.tokens[:, : n + 1]  # (Bm, n+1)
    beam.token_lp = beam.token_lp[:, :n]  # (Bm, n)
    if beam.attn is not None:
        beam.attn = beam.attn[:, :n]  # (Bm, n, S)
    beam.cache.truncate(n)
    if beam.size < 2:
        return  # nothing to merge
    keep: dict[tuple[int, ...], int] = {}
    for i, row in enumerate(beam.tokens.tolist()):
        keep.setdefault(tuple(row), i)
    if len(keep) < beam.size:
        reorder(beam, torch.tensor(sorted(keep.values()), dtype=torch.long))


@dataclass
class StreamState:
    """The decoding state of one stream's current sentence (what its output has shown is the
    session's `simulmt.output.display.Display`: the search never reads it)."""

    source: SourceState = field(default_factory=SourceState)
    beam: BeamState = field(default_factory=BeamState.start)
    words_read: int = 0  # source words the policy has READ (the decoder sees only these)
    peeked: int = 0  # source words a decision looked at (lookahead policies see one more)
    committed: list[int] = field(default_factory=list)  # target tokens that are never retracted
    complete_tokens: int = 0  # leading committed tokens known to form whole words
    # per whole committed word (subword group): the source words read, or peeked at, when it
    # was known complete, i.e. when its last token was written (word writes); its delay
    completed_at: list[int] = field(default_factory=list)
    word_start: int | None = None  # committed tokens when the WRITE under way began; None: none
    signals: ModelSignals | None = None  # for the next word's decision, kept from the step that
    # found the word boundary (None once a READ changed the source or the decision used them)
    history: list[tuple[int, ...]] = field(default_factory=list)  # re-translation hypotheses
    redecode: BeamState | None = None  # re-translation: the beam re-decoding the prefix
    # (target position, words read): sentence stops are banned there until the next READ, once
    # one was dropped there (simulmt.search.stops)
    stop_ban: tuple[int, int] | None = None
    stalled: bool = False  # the policy asked to READ but no word is there yet
    done: bool = False  # the sentence's translation is final
    finish_started: float | None = None  # when the source became complete and fully read
    compute_ms: float = 0.0  # model time spent on this sentence
    names: NamePieces = field(default_factory=NamePieces)  # the source's names read so far
