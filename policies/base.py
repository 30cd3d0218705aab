"""The read/write policy interface.

A policy looks at what a stream has read and written (and, if it asks for them, at model
signals for the best hypothesis) and answers READ or WRITE. Policies are stateless: all the
state of a stream lives in its `StreamState`; anything a policy needs is in `Observation`.

Units: `src_read` counts source *words* (a READ consumes one whole word, all its subword
tokens); `tgt_written` counts target *words* (a WRITE writes one whole word: its subword tokens
up to the next word start, `SearchOptions.unit`; with `WriteUnit.TOKEN` both count tokens).
Model signals are those of the next token, i.e. at a word boundary of the next word's first.
"""

from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import torch


class Action(enum.Enum):
    READ = "read"
    WRITE = "write"


class Signal(enum.Enum):
    """Model signals a policy may ask for; the search computes only what is asked."""

    DISTRIBUTION = "distribution"  # next-token log-probs of the best hypothesis on x<=j
    PEEK = "peek"  # next-token log-probs of the best hypothesis on x<=j+1 (one word ahead)
    DECODER_STATE = "decoder_state"  # top decoder layer output for the best hypothesis
    ATTENTION = "attention"  # cross-attention of the best hypothesis per source word read
    LOOKAHEAD = "peek"  # the earlier name of PEEK (an alias; deprecated, until the next release)


class CommitMode(enum.Enum):
    """How written tokens become committed (never retracted) text."""

    SIMULTANEOUS = "simultaneous"  # every written word is committed at once (STACL)
    RETRANSLATION = "retranslation"  # re-decode per READ; commit agreed prefix (LocalAgreement)


@dataclass(frozen=True)
class ModelSignals:
    log_probs: torch.Tensor | None = None  # (V,) next-token log-probs on x<=j
    peek_log_probs: torch.Tensor | None = None  # (V,) the same on x<=j+1
    decoder_state: torch.Tensor | None = None  # (D,) top-layer decoder output
    # (W,) head-averaged last-layer cross-attention of the next token, summed per source word
    # (W = words read; sums to 1): where the model looks to write the next word
    attention: torch.Tensor | None = None

    @property
    def lookahead_log_probs(self) -> torch.Tensor | None:
        """The earlier name of `peek_log_probs` (deprecated; until the next release)."""
        warnings.warn(
            "ModelSignals.lookahead_log_probs is deprecated; use peek_log_probs",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.peek_log_probs


@dataclass(frozen=True)
class Observation:
    src_read: int  # source words read so far (>= 0)
    tgt_written: int  # target words committed so far (tokens with WriteUnit.TOKEN) (>= 0)
    source_finished: bool  # True once the sentence's last word has been read
    src_available: int = 0  # words received but not yet read (0: READ would wait for input)
    signals: ModelSignals | None = None  # filled only when the policy `needs` signals


@runtime_checkable
class Policy(Protocol):
    """A read/write policy. `decide` must be a pure function of the observation."""

    name: ClassVar[str]
    needs: ClassVar[frozenset[Signal]]
    mode: ClassVar[CommitMode]

    def decide(self, obs: Observation) -> Action: ...


class PolicyError(ValueError):
    """A policy spec, argument or observation is invalid; the message says what is accepted."""


@runtime_checkable
class SpecPolicy(Policy, Protocol):
    """A policy that can write its own spec string; every registered policy is one."""

    def spec(self) -> str:
        """The canonical `name:key=value,…`; `load_policy(p.spec()) == p`."""
        ...


@runtime_checkable
class SchedulePolicy(SpecPolicy, Protocol):
    """A fixed policy given by g(i): source words to read before writing target word i.

    `decide` is then: source finished → WRITE; src_read < g(i) → READ; else WRITE, with
    i = tgt_written + 1. g is non-decreasing, ≥ 1, and may be `math.inf` (full sentence).
    """

    def g(self, i: int) -> float: ...


DEFAULT_AGREEMENT = 2  # LocalAgreement-2, the usual choice (Polák et al. 2022)


@runtime_checkable
class AgreementPolicy(Policy, Protocol):
    """A re-translation policy (`CommitMode.RETRANSLATION`) that says how many consecutive
    hypotheses must agree on a prefix before the search commits it (LocalAgreement-n; 1
    commits every hypothesis). A re-translation policy without it gets DEFAULT_AGREEMENT."""

    @property
    def agreement(self) -> int: ...


@runtime_checkable
class ChunkedPolicy(Policy, Protocol):
    """A re-translation policy that reads `chunk` source words between re-decodings (the
    latency knob of LocalAgreement in Polák et al. 2022: a bigger chunk gives each hypothesis
    more context and makes fewer of them). A re-translation policy without it re-decodes after
    every word."""

    @property
    def chunk(self) -> int: ...


def check_observation(obs: Observation) -> None:
    """Raise PolicyError if `obs` holds impossible counts (a bug in the caller)."""
    if obs.src_read < 0 or obs.tgt_written < 0 or obs.src_available < 0:
        raise PolicyError(
            f"invalid observation {obs}: src_read, tgt_written and src_available must be >= 0"
        )


def lag_bounds(obs: Observation, *, k_min: int = 1, k_max: int = 0,
               lag_min: int = 0) -> Action | None:
    """The decision an adaptive policy takes without asking the model, or None to ask it.

    WRITE once the source is finished, or at lag k_max (src_read >= k_max + tgt_written;
    0: no bound); READ before `k_min` source words, or below lag `lag_min` (src_read <
    lag_min + tgt_written; 0: no bound). Between the bounds the policy's own rule decides, so
    a learned or heuristic rule can never run further ahead or behind than wait-k would.
    """
    check_observation(obs)
    if obs.source_finished:
        return Action.WRITE
    if obs.src_read < k_min:
        return Action.READ
    if k_max and obs.src_read >= k_max + obs.tgt_written:
        return Action.WRITE
    if lag_min and obs.src_read < lag_min + obs.tgt_written:
        return Action.READ
    return None
