"""The premature-stop rule: no committed sentence end before the source sentence is finished.

A model trained on sentence pairs often judges a short source prefix a complete sentence and
writes a stop; committed, that stop splits one source sentence into two target sentences ("I
saw a long letter yesterday. I wrote a long letter to my sister."). While the source sentence
is unfinished (`OnlineSearch.source_finished` is false: in `auto` segmentation, the sentence the
detector opened), this rule keeps a sentence end out of the committed text, whatever the policy
and commit mode (`SearchOptions.premature_stops`):

- MASK: the stop pieces that would end the sentence (`simulmt.output.sentence_ends`) are banned in
  every hypothesis until the source is finished; a LocalAgreement re-decode instead ends where
  the model takes one (as at EOS, the stop left out): pushed past that point it ran on and
  repeated phrases, and two such re-decodes agreed on the repetition (-2.2 BLEU);
- TENTATIVE: the model may write them, so they show in the tentative text, but a stop that more
  words follow is dropped before that word is committed: the search goes back to the stop's
  position and takes its next-best token there (stops banned at that position until the next
  READ); LocalAgreement commits only up to the word before it.

Both keep in-word stops ("3.5", "U.S.") and abbreviations ("Mr."); once the source sentence is
finished the search is free again, so the final stop is written as the model ranks it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import torch

from simulmt.data.tokenizer import WORD_START, Tokenizer
from simulmt.output.sentence_ends import CLOSERS, STOPS, may_end_sentence
from simulmt.search.options import PrematureStops
from simulmt.search.state import StreamState, truncate

WORD_TAIL = 24  # tokens of a hypothesis searched back for its last word's start


@functools.lru_cache(maxsize=8)
def end_pieces(tokenizer: Tokenizer) -> tuple[tuple[int, str, bool], ...]:
    """(id, text, opens a word) of every piece that can end a word in a stop ('.', '."', ').',
    '46.'): the only tokens the rule ever bans. One per tokenizer (V calls to build)."""
    out = []
    for i in range(tokenizer.vocab_size):
        text = tokenizer.piece(i)
        if text.rstrip(CLOSERS)[-1:] in tuple(STOPS):
            out.append((i, text.replace(WORD_START, ""), tokenizer.is_word_start(i)))
    return tuple(out)


@functools.lru_cache(maxsize=65536)
def _word_bans(tokenizer: Tokenizer, last: tuple[int, ...]) -> tuple[int, ...]:
    """The stop pieces that would end the sentence after a hypothesis whose last word is the
    tokens `last` (() before the first word). Every step of every hypothesis asks this, and
    the answer depends on that word alone: it is worked out once per word (it was 5% of an
    evaluation's time)."""
    word = tokenizer.decode(list(last)) if last else ""
    return tuple(
        i
        for i, text, opens in end_pieces(tokenizer)
        if may_end_sentence(text if opens or not word else word + text)
    )


@dataclass(frozen=True)
class StopRule:
    """The rule for one search: its mode and the target tokenizer; no stream state."""

    mode: PrematureStops
    tokenizer: Tokenizer

    @property
    def on(self) -> bool:
        return self.mode is not PrematureStops.ALLOW

    def _last_word(self, ids: Sequence[int], start: int = 0) -> int:
        """Index of the first token of the last word of ids[start:] (start if none opens)."""
        for i in range(len(ids) - 1, start - 1, -1):
            if self.tokenizer.is_word_start(ids[i]):
                return i
        return start

    def bans(self, st: StreamState, tokens: torch.Tensor) -> Sequence[tuple[int, int]]:
        """(row, token) pairs the next step of a beam (tokens (Bm, 1 + T): BOS then written)
        may not take while the source is unfinished: with MASK, every stop piece that would end
        the sentence (`MaskBans`: worked out when first read); in both modes, every stop piece
        where one was dropped (TENTATIVE)."""
        if not self.on:
            return []
        length = int(tokens.shape[1]) - 1
        if st.stop_ban is not None and st.stop_ban == (length, st.words_read):
            pieces = end_pieces(self.tokenizer)
            return [(row, i) for row in range(int(tokens.shape[0])) for i, _, _ in pieces]
        if self.mode is not PrematureStops.MASK:
            return []
        return MaskBans(self, tokens)

    def mask_bans(self, tokens: torch.Tensor) -> list[tuple[int, int]]:
        """MASK's (row, token) pairs for a beam, tokens (Bm, 1 + T)."""
        out: list[tuple[int, int]] = []
        for row, tail in enumerate(tokens[:, 1:][:, -WORD_TAIL:].tolist()):
            last = tuple(tail[self._last_word(tail) :]) if tail else ()
            out.extend((row, i) for i in _word_bans(self.tokenizer, last))
        return out

    def drop(self, st: StreamState) -> bool:
        """Before a word start is written after the committed tokens while the source is
        unfinished, before a word is ended there, and when the source has just finished: if
        the last, not yet complete, committed word may end the sentence, take its stop pieces
        back (they are not shown: only complete words are), cut the beam there and ban stops
        at that position until the next READ (the ban does not hold once the source is
        finished). True if it did: the search then writes that position again. Whatever
        the word written next (a READ may change it), the committed text has no sentence end
        while the source goes on."""
        if not self.on:
            return False
        ids = st.committed
        start = self._last_word(ids, st.complete_tokens)
        if start >= len(ids) or not may_end_sentence(self.tokenizer.decode(ids[start:])):
            return False
        n = len(ids)
        while n > start and may_end_sentence(self.tokenizer.decode(ids[start:n])):
            n -= 1
        del ids[n:]
        truncate(st.beam, n)
        st.stop_ban = (n, st.words_read)
        return True

    def agreed(self, hyp: Sequence[int], committed: int, agreed: int) -> int:
        """LocalAgreement's commit point `agreed` (a word boundary of `hyp`) moved back before
        the first word of hyp[committed:agreed] that may end the sentence, while the source is
        unfinished: that word and its stop stay tentative."""
        if not self.on or agreed <= committed:
            return agreed
        tok = self.tokenizer
        starts = [i for i in range(committed, agreed) if i == 0 or tok.is_word_start(hyp[i])]
        for s, e in zip(starts, [*starts[1:], agreed], strict=True):
            if may_end_sentence(tok.decode(list(hyp[s:e]))):
                return s
        return agreed


class MaskBans(Sequence[tuple[int, int]]):
    """`StopRule.mask_bans` of a beam, worked out when first read. Every pair's token is a
    stop piece, so `(row, token) in bans` is False for any other token without working them
    out: the greedy search asks only that of its best token at each step, which is rarely a
    stop piece."""

    def __init__(self, rule: StopRule, tokens: torch.Tensor) -> None:
        self._rule = rule
        self._tokens = tokens  # (Bm, 1 + T): a beam's tokens are replaced, never written to
        self._pairs: list[tuple[int, int]] | None = None

    @property
    def pairs(self) -> list[tuple[int, int]]:
        if self._pairs is None:
            self._pairs = self._rule.mask_bans(self._tokens)
        return self._pairs

    def __contains__(self, pair: object) -> bool:
        if isinstance(pair, tuple) and len(pair) == 2:
            if pair[1] not in _stop_ids(self._rule.tokenizer):
                return False
        return pair in self.pairs

    @overload
    def __getitem__(self, i: int) -> tuple[int, int]: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[tuple[int, int]]: ...
    def __getitem__(self, i: int | slice) -> tuple[int, int] | Sequence[tuple[int, int]]:
        return self.pairs[i]

    def __len__(self) -> int:
        return len(self.pairs)


@functools.lru_cache(maxsize=8)
def _stop_ids(tokenizer: Tokenizer) -> frozenset[int]:
    """The ids of `end_pieces`: the only tokens the rule bans."""
    return frozenset(i for i, _, _ in end_pieces(tokenizer))
