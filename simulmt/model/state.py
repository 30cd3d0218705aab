"""Per-stream state: everything that belongs to one stream lives here, never on a module.

`SourceState` holds the encoded source (token ids, word ends, the encoder's self-attention
K/V cache and the decoder's cross-attention K/V over it). `BeamState` holds the hypotheses
(tokens, scores, decoder self-attention cache, attention coverage, completed hypotheses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from simulmt.model.pool import KVPool, KVSlot
from simulmt.vocab import BOS_ID

if TYPE_CHECKING:
    from simulmt.policies.base import ModelSignals


@dataclass
class SourceState:
    ids: list[int] = field(default_factory=list)  # encoded source tokens (read or not yet read)
    ends: list[int] = field(default_factory=list)  # tokens after each encoded word
    enc_kv: torch.Tensor | None = None  # encoder self-attention K/V: (2L_enc, 1, H, S, dh)
    cross: KVSlot | None = None  # decoder cross-attention K/V: this stream's slot in a pool

    @property
    def cross_kv(self) -> torch.Tensor | None:
        """(2L_dec, 1, H, S, dh): a view of the pool slot, valid until the next append."""
        return None if self.cross is None else self.cross.tensor()

    def append_cross(self, new: torch.Tensor, pool: KVPool) -> None:
        """Append new source positions' cross-attention K/V (2L_dec, 1, H, n, dh); the first
        append claims the stream's slot in `pool`."""
        if self.cross is None:
            self.cross = pool.claim()
        if not self.cross.pool.fits(self.cross.length + int(new.shape[3])):
            self.cross = self.cross.spill()  # too long for the shared pool: a pool of its own
        self.cross.append(new)

    def visible(self, words_read: int) -> int:
        """Source tokens the decoder may attend to after reading `words_read` words."""
        return self.ends[words_read - 1] if words_read > 0 else 0


@dataclass(frozen=True)
class Hypothesis:
    tokens: tuple[int, ...]  # target ids without BOS/EOS
    log_prob: float  # sum of token log-probabilities (EOS included)
    score: float  # after the search's length/coverage scoring
    attention_sum: tuple[float, ...] = ()  # accumulated cross-attention per source token


@dataclass(eq=False)
class BeamState:
    """The hypotheses of one stream's sentence.

    The decoder self-attention cache of tokens[:, :-1] is either a tensor of the beam's own
    (`self_kv`) or, while the beam is one hypothesis, the target plane of its source's pool slot
    (`home`; `self_kv` is then None): a batched step over streams in consecutive slots reads
    those caches as one view and writes each new position in place (`simulmt.search.step`).
    `cache()` gives the cache either way; `unhome()` takes it back into a tensor."""

    tokens: torch.Tensor  # (Bm, T) BOS + target tokens, best hypothesis first
    token_lp: torch.Tensor  # (Bm, T-1) log-probability of each target token
    self_kv: torch.Tensor | None = None  # (2L, Bm, H, T-1, dh) K/V of tokens[:, :-1] (stack_kv)
    attn: torch.Tensor | None = None  # (Bm, T-1, S) cross-attention per token (coverage penalty)
    complete: list[Hypothesis] = field(default_factory=list)
    home: KVSlot | None = field(default=None, repr=False)  # the slot holding the cache, if any

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

    def cached(self) -> int:
        if self.home is not None:
            return self.home.target_length
        return 0 if self.self_kv is None else int(self.self_kv.shape[3])

    def cache(self) -> torch.Tensor | None:
        """(2L, Bm, H, T-1, dh) or None if empty; if homed a view of the pool, valid until the
        pool next changes."""
        if self.home is not None:
            return self.home.target() if self.home.target_length else None
        return self.self_kv

    def homed_in(self, slot: KVSlot) -> bool:
        return self.home is slot and slot.owned_by(self)

    def home_in(self, slot: KVSlot) -> None:
        """Move the cache of this one-hypothesis beam into `slot`'s target plane."""
        if self.homed_in(slot):
            return
        if self.size != 1:
            raise ValueError(f"only a one-hypothesis beam has a home, not {self.size}")
        self.unhome()
        slot.adopt(self, self.self_kv)
        self.self_kv = None
        self.home = slot

    def unhome(self) -> None:
        """Take the cache back from the pool into `self_kv` (before anything that needs a
        tensor of the beam's own: more hypotheses, another beam over the same slot)."""
        slot = self.home
        if slot is None:
            return
        self.home = None
        if slot.owned_by(self):
            kv = slot.target()  # (2L, 1, H, T-1, dh)
            self.self_kv = kv.clone() if kv.shape[3] else None
            slot.disown()

    def extend_cache(self, new: torch.Tensor | None, *, written: bool = False) -> None:
        """Append the K/V (2L, Bm, H, 1, dh) of the position just fed. `written`: the step put
        it into the home slot already (at position `cached()`); only then may `new` be None."""
        home = self.home
        if home is not None and home.owned_by(self):
            n = home.target_length
            if written:
                home.pool.target_lengths[home.index] = n + 1
                return
            if new is not None and home.pool.fits(n + 1):
                home.pool.write_target(home.index, n, new)
                return
            self.unhome()  # too long for the pool: a tensor of its own from now on
        if new is None:
            raise ValueError("extend_cache: no K/V given and the beam's home does not hold it")
        self.self_kv = new if self.self_kv is None else torch.cat([self.self_kv, new], dim=3)

    def best(self) -> list[int]:
        """Tokens of the best active hypothesis (the best complete one if none is active)."""
        if self.size == 0:
            return list(max(self.complete, key=lambda h: h.score).tokens) if self.complete else []
        return self.tokens[0, 1:].tolist()


def reorder(beam: BeamState, index: torch.Tensor) -> None:
    """Keep hypotheses `index` (Bm',) in that order, with their caches."""
    if beam.home is not None:
        if index.shape == (1,) and int(index[0]) == 0 and beam.size == 1:
            return  # the one hypothesis stays where it is
        beam.unhome()
    beam.tokens = beam.tokens.index_select(0, index)  # (Bm', T)
    beam.token_lp = beam.token_lp.index_select(0, index)  # (Bm', T-1)
    if beam.self_kv is not None:
        beam.self_kv = beam.self_kv.index_select(1, index)  # (2L, Bm', H, T-1, dh)
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
    if beam.self_kv is not None:
        beam.self_kv = beam.self_kv[:, :, :, :n]  # (2L, Bm, H, n, dh)
    if beam.home is not None:
        beam.home.truncate_target(n)
    keep: dict[tuple[int, ...], int] = {}
    for i, row in enumerate(beam.tokens.tolist()):
        keep.setdefault(tuple(row), i)
    reorder(beam, torch.tensor(sorted(keep.values()), dtype=torch.long))


@dataclass
class StreamState:
    """The decoding state of one stream's current sentence."""

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
    shown_words: int = 0  # committed whole words already emitted in updates
    shown_tentative: str = ""
    shown_tail: tuple[int, ...] | None = None  # tentative token ids last shown
    words: list[str] = field(default_factory=list)  # committed whole words, detokenized
    word_delays: list[int] = field(default_factory=list)  # the delay of each of `words`
    decoded_tokens: int = 0  # committed tokens already detokenized into `words`
    shown_final: bool = False
    history: list[tuple[int, ...]] = field(default_factory=list)  # re-translation hypotheses
    redecode: BeamState | None = None  # re-translation: the beam re-decoding the prefix
    stalled: bool = False  # the policy asked to READ but no word is there yet
    done: bool = False  # the sentence's translation is final
    finish_started: float | None = None  # when the source became complete and fully read
    compute_ms: float = 0.0  # model time spent on this sentence
