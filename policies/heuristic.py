"""Adaptive policies that look at the model's next-token distribution, and LocalAgreement.

All of them WRITE once the source is finished (nothing is left to wait for) and READ while
fewer than `k_min` source words have been read. Signals come from the search in
`obs.signals` (it computes exactly what `policy.needs` lists):

- `log_probs` — next-token log-probs of the best hypothesis given x≤j (j = src_read); with
  word writes the policy decides once per target word, on the distribution of its first token,
- `peek_log_probs` — the same given x≤j+1; None when no word j+1 has arrived yet
  (src_available == 0), since it cannot be computed then.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from simulmt.policies.base import (
    Action,
    CommitMode,
    Observation,
    PolicyError,
    Signal,
    check_observation,
    lag_bounds,
)
from simulmt.policies.spec import BasePolicy

K_MIN_HELP = "source words always read before the first write (>= 1)"


def _check_k_min(k_min: int) -> None:
    if k_min < 1:
        raise PolicyError(f"k_min must be >= 1 (got {k_min})")


def _log_probs(obs: Observation, policy: str) -> torch.Tensor:
    if obs.signals is None or obs.signals.log_probs is None:
        raise PolicyError(f"policy {policy!r} needs Signal.DISTRIBUTION, but the observation "
                          "has no signals.log_probs; the search must compute policy.needs")
    if obs.signals.log_probs.dim() != 1:
        raise PolicyError(f"policy {policy!r}: log_probs must have shape (V,), got "
                          f"{tuple(obs.signals.log_probs.shape)}")
    return obs.signals.log_probs


def _with_peek(obs: Observation, policy: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(log_probs, peek_log_probs), or None when the peek cannot exist yet."""
    now = _log_probs(obs, policy)
    assert obs.signals is not None  # checked by _log_probs
    ahead = obs.signals.peek_log_probs
    if ahead is None:
        if obs.src_available == 0:
            return None  # word j+1 has not arrived: the caller waits for it (READ)
        raise PolicyError(f"policy {policy!r} needs Signal.PEEK: word j+1 is available "
                          "but signals.peek_log_probs is None")
    if ahead.shape != now.shape:
        raise PolicyError(f"policy {policy!r}: peek_log_probs {tuple(ahead.shape)} and "
                          f"log_probs {tuple(now.shape)} must have the same shape (V,)")
    return now, ahead


@dataclass(frozen=True)
class _LookaheadPolicy(BasePolicy, abc.ABC):
    """Shared rule of Cho & Esipova's policies: compare the next-token distribution on x≤j
    with the one on x≤j+1. Without a peek (word j+1 not yet received) they READ."""

    needs: ClassVar[frozenset[Signal]] = frozenset({Signal.DISTRIBUTION, Signal.PEEK})

    k_min: int = field(default=1, metadata={"help": K_MIN_HELP})  # Cho & Esipova's s0

    def validate(self) -> None:
        _check_k_min(self.k_min)

    def decide(self, obs: Observation) -> Action:
        early = lag_bounds(obs, k_min=self.k_min)
        if early is not None:
            return early
        pair = _with_peek(obs, self.name)
        if pair is None:
            return Action.READ
        return Action.WRITE if self.write(*pair) else Action.READ

    @abc.abstractmethod
    def write(self, now: torch.Tensor, ahead: torch.Tensor) -> bool:
        """now, ahead: (V,) log-probs on x≤j and x≤j+1; True to WRITE."""


@dataclass(frozen=True)
class WaitIfDiff(_LookaheadPolicy):
    """READ while one more source word would change the best next token (Cho & Esipova 2016).

    WRITE iff argmax p(y | y<i, x≤j) == argmax p(y | y<i, x≤j+1). Without a lookahead
    (word j+1 not yet received) it READs, i.e. waits for the next word.
    """

    name: ClassVar[str] = "wait-if-diff"
    paper: ClassVar[str] = ("Cho & Esipova 2016, Can neural machine translation do "
                            "simultaneous translation? (arXiv:1606.02012)")

    def write(self, now: torch.Tensor, ahead: torch.Tensor) -> bool:
        return int(now.argmax()) == int(ahead.argmax())


@dataclass(frozen=True)
class WaitIfWorse(_LookaheadPolicy):
    """READ while one more source word would make the current best token likelier.

    Cho & Esipova 2016: with y* = argmax p(y | y<i, x≤j), READ iff
    log p(y* | y<i, x≤j+1) > log p(y* | y<i, x≤j) (the candidate is worse now than it will
    be), else WRITE. Without a peek (word j+1 not yet received) it READs.
    """

    name: ClassVar[str] = "wait-if-worse"
    paper: ClassVar[str] = ("Cho & Esipova 2016, Can neural machine translation do "
                            "simultaneous translation? (arXiv:1606.02012)")

    def write(self, now: torch.Tensor, ahead: torch.Tensor) -> bool:
        best = int(now.argmax())
        return not float(ahead[best]) > float(now[best])


@dataclass(frozen=True)
class Confidence(BasePolicy):
    """WRITE when the best next token's probability is at least `threshold`, else READ."""

    name: ClassVar[str] = "confidence"
    needs: ClassVar[frozenset[Signal]] = frozenset({Signal.DISTRIBUTION})

    # 0.6: a majority-plus margin; sweep it for a quality-latency curve
    threshold: float = field(default=0.6, metadata={
        "help": "minimum probability of the best next token to WRITE (0 < p < 1)"})
    k_min: int = field(default=1, metadata={"help": K_MIN_HELP})

    def validate(self) -> None:
        if not 0 < self.threshold < 1:
            raise PolicyError(f"threshold must be in (0, 1) (got {self.threshold})")
        _check_k_min(self.k_min)

    def decide(self, obs: Observation) -> Action:
        early = lag_bounds(obs, k_min=self.k_min)
        if early is not None:
            return early
        top = float(_log_probs(obs, self.name).max().exp())
        return Action.WRITE if top >= self.threshold else Action.READ


@dataclass(frozen=True)
class AdaptiveWaitK(BasePolicy):
    """Wait-k policies composed by confidence (Zheng et al. 2020), with one model.

    At lag l = src_read - tgt_written (source words ahead of the target words), WRITE when the
    best next token's probability is at least rho - d * (l - k_min), else READ; READ always
    below lag k_min, WRITE always from lag k_max on. The threshold falls as the lag grows, so
    the policy runs at a low lag where the model is sure and waits (up to k_max) where it is
    not; a flat threshold (`confidence`) has no such pull back toward a steady lag.
    """

    name: ClassVar[str] = "adaptive-wait-k"
    needs: ClassVar[frozenset[Signal]] = frozenset({Signal.DISTRIBUTION})
    paper: ClassVar[str] = ("Zheng, Zheng, Ma & Huang 2020, Simultaneous Translation Policies: "
                            "From Fixed to Adaptive, ACL (arXiv:2004.13169)")

    # the defaults are the best of a sweep on newstest2015 (README, "Adaptive policies"): with
    # this model an early confident token is often wrong, so lag k_min needs certainty
    rho: float = field(default=1.0, metadata={
        "help": "probability of the best next token needed to WRITE at lag k_min (0 < rho <= 1)"})
    d: float = field(default=0.1, metadata={
        "help": "how much that threshold falls per word of lag above k_min (>= 0)"})
    k_min: int = field(default=1, metadata={
        "help": "lowest lag: READ whenever src_read < k_min + tgt_written (>= 1)"})
    k_max: int = field(default=5, metadata={
        "help": "highest lag: WRITE whenever src_read >= k_max + tgt_written (>= k_min)"})

    def validate(self) -> None:
        if not 0 < self.rho <= 1:
            raise PolicyError(f"rho must be in (0, 1] (got {self.rho})")
        if self.d < 0:
            raise PolicyError(f"d must be >= 0 (got {self.d})")
        _check_k_min(self.k_min)
        if self.k_max < self.k_min:
            raise PolicyError(f"k_max must be >= k_min={self.k_min} (got {self.k_max})")

    def threshold(self, lag: int) -> float:
        """The probability the best next token needs to WRITE at this lag."""
        return self.rho - self.d * (lag - self.k_min)

    def decide(self, obs: Observation) -> Action:
        # k_max >= k_min, so the two lag bounds never both hold
        early = lag_bounds(obs, k_min=self.k_min, k_max=self.k_max, lag_min=self.k_min)
        if early is not None:
            return early
        lag = obs.src_read - obs.tgt_written
        top = float(_log_probs(obs, self.name).max().exp())
        return Action.WRITE if top >= self.threshold(lag) else Action.READ


@dataclass(frozen=True)
class LocalAgreement(BasePolicy):
    """Re-translation: commit the longest common prefix of the last n re-decodings.

    LocalAgreement (Liu et al. 2020; Polák et al. 2022): the search re-decodes the source
    prefix after every `chunk` source words and commits what the last n hypotheses agree on
    (CommitMode.RETRANSLATION). The policy only says when: READ while the source is
    unfinished (waiting if no word is available), WRITE — the final full decode — once it is.
    n and chunk are its latency knobs: n=2, chunk=1 is the lowest latency.
    """

    name: ClassVar[str] = "local-agreement"
    mode: ClassVar[CommitMode] = CommitMode.RETRANSLATION
    paper: ClassVar[str] = ("Liu et al. 2020, Low-Latency Sequence-to-Sequence Speech "
                            "Recognition and Translation by Partial Hypothesis Selection, "
                            "Interspeech; Polák et al. 2022, CUNI-KIT IWSLT")

    n: int = field(default=2, metadata={  # 2: LocalAgreement-2, the usual choice
        "help": "hypotheses that must agree on a prefix to commit it (>= 1; 1 commits all)"})
    chunk: int = field(default=1, metadata={
        "help": "source words read between re-decodings (>= 1; more: fewer, better-informed "
                "hypotheses and more latency)"})

    def validate(self) -> None:
        if self.n < 1:
            raise PolicyError(f"n must be >= 1 (got {self.n})")
        if self.chunk < 1:
            raise PolicyError(f"chunk must be >= 1 (got {self.chunk})")

    def decide(self, obs: Observation) -> Action:
        check_observation(obs)
        return Action.WRITE if obs.source_finished else Action.READ

    @property
    def agreement(self) -> int:
        """`AgreementPolicy`: the search commits what the last n hypotheses agree on."""
        return self.n
