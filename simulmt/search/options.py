"""Options of the online beam search (pruning, scoring, stopping, commit rule)."""

from __future__ import annotations

import enum
import warnings
from dataclasses import InitVar, dataclass


class Scoring(enum.Enum):
    NONE = "none"  # raw log-probability
    LENGTH_REWARD = "length-reward"  # + reward * |y|
    BOUNDED_LENGTH_REWARD = "bounded-length-reward"  # + reward * min(|y|, ratio * |x|)
    LENGTH_NORM = "length-norm"  # log-probability / |y|
    GNMT = "gnmt"  # log-probability / ((5 + |y|)^alpha / 6^alpha) (Wu et al. 2016)


class WriteUnit(enum.Enum):
    """What one WRITE of a policy produces (and what `Observation.tgt_written` counts)."""

    WORD = "word"  # one whole target word: its subword tokens up to the next word start
    TOKEN = "token"  # one subword token (the research mode of earlier releases)


class PrematureStops(enum.Enum):
    """What the search does with a sentence end before the source sentence is finished
    (simulmt.search.stops): the model often ends the sentence on a short source prefix."""

    ALLOW = "allow"  # the rule off: stops as the model ranks them (a split sentence is final)
    MASK = "mask"  # ban stops that would end the sentence until the source is finished
    TENTATIVE = "tentative"  # write them as tentative text, drop them if more words follow


class Stopping(enum.Enum):
    N_COMPLETE = "n-complete"  # stop once n hypotheses are complete
    EARLY = "early"  # stop once the best complete beats every active one by `margin`
    TOP_COMPLETE = "top-complete"  # stop as soon as the best hypothesis is complete


@dataclass(frozen=True)
class SearchOptions:
    beam: int = 1  # histogram pruning: hypotheses kept per step
    abs_threshold: float | None = None  # drop candidates scoring < best - this (log space)
    rel_threshold: float | None = None  # drop candidates with p < this * p(best), 0 < r < 1
    scoring: Scoring = Scoring.GNMT
    length_reward: float = 0.0  # for LENGTH_REWARD / BOUNDED_LENGTH_REWARD
    bound_ratio: float = 1.2  # BOUNDED_LENGTH_REWARD caps the rewarded length at ratio * |x|
    # GNMT length normalization exponent (Wu et al. 2016). Beam 5 with 0.6 ends long news
    # sentences early (newstest2015 brevity penalty 0.82); measured on the dev sets, bundled
    # model, alpha 0.6/1.0/1.4/2.0/3.0: newstest2013 (1 in 10) 13.46/13.87/14.13/14.32/14.23,
    # held-out dev (1 in 20) 33.05/33.09/33.44/33.39/- (notes/model-notes.md)
    alpha: float = 2.0
    beta: float = 0.0  # GNMT coverage penalty weight; 0 turns attention tracking off
    stopping: Stopping = Stopping.N_COMPLETE
    n_complete: int = 0  # for N_COMPLETE; 0 means the beam size
    margin: float = 0.0  # for EARLY
    time_budget_ms: float = 0.0  # per sentence, after its source is complete; 0 = none
    # speculative beam search (Zheng et al. 2019): with beam > 1, commit a token once every
    # hypothesis agrees on it or the beam is this many tokens past the committed ones. Chosen on
    # the dev sets (v3, wait-3, beam 5; 1/2/3/4/6: newstest2013 1-in-10 13.70/14.11/14.36/13.99/
    # 13.55, held-out dev 1-in-20 28.15/28.30/28.96/28.68; greedy 13.47 and 27.63; AL equal)
    speculate: int = 3
    unit: WriteUnit = WriteUnit.WORD  # latency is felt in words: a WRITE writes a whole word
    max_len_ratio: float = 2.0  # a hypothesis is cut at ratio * |x| + extra tokens
    max_len_extra: int = 10
    # loop guard (simulmt.search.loops): ban the token that would repeat a cycle of up to this
    # many tokens a third time in a row, and a second sentence stop right after one; 0 = off
    # (outputs as the model ranks them). Without it word-level wait-k loops in 5-12% of
    # newstest2015 outputs (docs/results.md, "Loop guard"); every command line and the server
    # read this default
    loop_guard: int = 8
    # no committed sentence end before the source sentence is finished (simulmt.search.stops);
    # chosen on newstest2015 and the held-out test (docs/results.md, "Premature stops")
    premature_stops: PrematureStops = PrematureStops.MASK
    # added to the log-probability of each piece of the source's names read so far
    # (simulmt.search.names): the model mangles names it should copy; 0 = off (the model's
    # own ranking). Every command line and the server read this default
    copy_bonus: float = 0.0
    # the earlier name of `speculate` (deprecated; accepted until the next release)
    lookahead: InitVar[int | None] = None

    def __post_init__(self, lookahead: int | None) -> None:
        if lookahead is not None:
            warnings.warn(
                "SearchOptions(lookahead=) is deprecated; use speculate=", DeprecationWarning,
                stacklevel=3,
            )
            object.__setattr__(self, "speculate", lookahead)
        if self.beam < 1:
            raise ValueError(f"beam must be >= 1, got {self.beam}")
        if self.loop_guard < 0:
            raise ValueError(f"loop_guard must be >= 0 (0 = off), got {self.loop_guard}")
        if not 0 <= self.copy_bonus <= 10:
            raise ValueError(f"copy_bonus must be in [0, 10] (0 = off), got {self.copy_bonus}")
        if self.speculate < 1:
            raise ValueError(
                f"speculate must be >= 1 (1: commit the best next token), got {self.speculate}"
            )
        if self.rel_threshold is not None and not 0 < self.rel_threshold < 1:
            raise ValueError(f"rel_threshold must be in (0, 1), got {self.rel_threshold}")
        if self.abs_threshold is not None and self.abs_threshold <= 0:
            raise ValueError(f"abs_threshold must be > 0, got {self.abs_threshold}")

    @property
    def needs_attention(self) -> bool:
        return self.beta > 0
