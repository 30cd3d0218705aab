"""Adaptive policies (confidence, adaptive-wait-k, wait-if-diff, wait-if-worse) and
LocalAgreement."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.policies import (
    Action,
    CommitMode,
    ModelSignals,
    Observation,
    Policy,
    PolicyError,
    SchedulePolicy,
    Signal,
    load_policy,
)
from simulmt.policies.heuristic import (
    AdaptiveWaitK,
    Confidence,
    LocalAgreement,
    WaitIfDiff,
    WaitIfWorse,
)

R, W = Action.READ, Action.WRITE


def lp(*probs: float) -> torch.Tensor:
    """Log-probs of a distribution given by (unnormalised) probabilities."""
    p = torch.tensor(probs, dtype=torch.float64)
    return (p / p.sum()).log()  # (V,)


def obs(read: int = 3, written: int = 1, *, finished: bool = False, available: int = 1,
        now: torch.Tensor | None = None, ahead: torch.Tensor | None = None) -> Observation:
    signals = ModelSignals(log_probs=now, peek_log_probs=ahead)
    return Observation(read, written, finished, available, signals)


@pytest.mark.parametrize(("policy", "observation", "action"), [
    (Confidence(threshold=0.6), obs(now=lp(0.7, 0.2, 0.1)), W),
    (Confidence(threshold=0.6), obs(now=lp(0.5, 0.3, 0.2)), R),
    (Confidence(threshold=0.4), obs(now=lp(0.5, 0.3, 0.2)), W),
    (Confidence(threshold=0.9), obs(now=lp(0.5, 0.3, 0.2), finished=True, available=0), W),
    (Confidence(threshold=0.1), obs(read=0, now=lp(0.99, 0.01)), R),  # k_min = 1
    (Confidence(threshold=0.1, k_min=3), obs(read=2, now=lp(0.99, 0.01)), R),
    (Confidence(threshold=0.1, k_min=3), obs(read=3, now=lp(0.99, 0.01)), W),
    (Confidence(threshold=0.6), obs(available=0, now=lp(0.5, 0.5)), R),  # waits for a word
])
def test_confidence_table(policy: Confidence, observation: Observation, action: Action) -> None:
    assert policy.decide(observation) is action


@pytest.mark.parametrize(("read", "written", "top", "action"), [
    (1, 1, 0.99, R),  # lag 0 < k_min: READ without looking at the model
    (2, 1, 0.85, R),  # lag 1: needs rho = 0.9
    (2, 1, 0.9, W),
    (3, 1, 0.75, R),  # lag 2: needs 0.9 - 0.1 = 0.8
    (3, 1, 0.81, W),
    (4, 1, 0.71, W),  # lag 3: needs 0.7
    (4, 1, 0.69, R),
    (5, 1, 0.01, W),  # lag 4 = k_max: WRITE whatever the model says
    (9, 2, 0.01, W),  # above k_max too
])
def test_adaptive_wait_k_thresholds_fall_with_the_lag(read: int, written: int, top: float,
                                                      action: Action) -> None:
    policy = AdaptiveWaitK(rho=0.9, d=0.1, k_min=1, k_max=4)
    rest = (1 - top) / 2
    assert policy.decide(obs(read, written, now=lp(top, rest, rest))) is action
    assert policy.threshold(2) == pytest.approx(0.8)


def test_adaptive_wait_k_with_k_min_above_one() -> None:
    policy = AdaptiveWaitK(rho=0.5, d=0.0, k_min=3, k_max=5)
    assert policy.decide(obs(4, 2, now=lp(0.99, 0.01))) is R  # lag 2 < k_min
    assert policy.decide(obs(5, 2, now=lp(0.6, 0.4))) is W  # lag 3: threshold rho
    assert policy.decide(obs(6, 2, now=lp(0.4, 0.3, 0.3))) is R  # lag 4: still rho (d = 0)
    assert policy.decide(obs(7, 2, now=lp(0.1, 0.9))) is W  # lag 5 = k_max
    assert policy.decide(obs(4, 2, finished=True, available=0, now=lp(0.1, 0.9))) is W


@pytest.mark.parametrize(("now", "ahead", "diff", "worse"), [
    # same argmax, its log-prob drops with one more word: both WRITE
    (lp(0.6, 0.3, 0.1), lp(0.5, 0.3, 0.2), W, W),
    # same argmax, and it gets likelier: wait-if-worse READs, wait-if-diff WRITEs
    (lp(0.5, 0.3, 0.2), lp(0.8, 0.1, 0.1), W, R),
    # argmax changes and the old best gets less likely: wait-if-diff READs only
    (lp(0.5, 0.3, 0.2), lp(0.2, 0.7, 0.1), R, W),
    # argmax changes although the old best gets likelier: both READ
    (lp(0.4, 0.35, 0.25), lp(0.41, 0.5, 0.09), R, R),
    # identical distributions: nothing to gain by waiting
    (lp(0.4, 0.35, 0.25), lp(0.4, 0.35, 0.25), W, W),
])
def test_wait_if_tables(now: torch.Tensor, ahead: torch.Tensor, diff: Action,
                        worse: Action) -> None:
    assert WaitIfDiff().decide(obs(now=now, ahead=ahead)) is diff
    assert WaitIfWorse().decide(obs(now=now, ahead=ahead)) is worse


@pytest.mark.parametrize("policy", [WaitIfDiff(), WaitIfWorse(), WaitIfDiff(k_min=2)])
def test_wait_if_without_lookahead(policy: Policy) -> None:
    # word j+1 has not arrived: the lookahead cannot exist, so the policy waits for it
    assert policy.decide(obs(available=0, now=lp(0.9, 0.1), ahead=None)) is R
    # the source is finished: write whatever the signals say
    assert policy.decide(obs(finished=True, available=0)) is W
    # fewer than k_min words read: READ without looking at the model
    assert policy.decide(obs(read=0, available=4)) is R


def test_wait_if_missing_lookahead_with_word_available_is_an_error() -> None:
    with pytest.raises(PolicyError, match="needs Signal.PEEK"):
        WaitIfDiff().decide(obs(available=2, now=lp(0.9, 0.1), ahead=None))


@pytest.mark.parametrize("policy", [Confidence(), AdaptiveWaitK(), WaitIfDiff(), WaitIfWorse()])
def test_missing_distribution_is_an_error(policy: Policy) -> None:
    with pytest.raises(PolicyError, match="needs Signal.DISTRIBUTION"):
        policy.decide(Observation(3, 1, False, 1, signals=None))


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(PolicyError, match="same shape"):
        WaitIfWorse().decide(obs(now=lp(0.5, 0.5), ahead=lp(0.2, 0.3, 0.5)))
    with pytest.raises(PolicyError, match=r"shape \(V,\)"):
        Confidence().decide(obs(now=lp(0.5, 0.5).view(1, 2)))  # (1, V) instead of (V,)


def test_local_agreement() -> None:
    policy = LocalAgreement(n=3)
    assert policy.mode is CommitMode.RETRANSLATION
    assert policy.needs == frozenset()
    assert policy.decide(Observation(2, 0, False, 3)) is R  # words left: re-decode after READ
    assert policy.decide(Observation(2, 5, False, 0)) is R  # none left yet: wait for one
    assert policy.decide(Observation(6, 5, True, 0)) is W  # finished: final decode
    assert load_policy("local-agreement").spec() == "local-agreement:n=2,chunk=1"


def test_declared_needs_and_modes() -> None:
    both = frozenset({Signal.DISTRIBUTION, Signal.PEEK})
    assert WaitIfDiff.needs == WaitIfWorse.needs == both
    assert Confidence.needs == frozenset({Signal.DISTRIBUTION})
    for cls in (WaitIfDiff, WaitIfWorse, Confidence):
        assert cls.mode is CommitMode.SIMULTANEOUS
        assert isinstance(cls(), Policy) and not isinstance(cls(), SchedulePolicy)


@pytest.mark.parametrize(("spec", "message"), [
    ("confidence:threshold=1.0", "threshold must be in (0, 1) (got 1.0)"),
    ("confidence:threshold=0", "threshold must be in (0, 1)"),
    ("confidence:threshold=nan", "threshold must be in (0, 1) (got nan)"),
    ("confidence:threshold=high", "expected a number, got 'high'"),
    ("wait-if-diff:k_min=0", "k_min must be >= 1 (got 0)"),
    ("wait-if-worse:k_min=-2", "k_min must be >= 1"),
    ("local-agreement:n=0", "n must be >= 1 (got 0)"),
    ("adaptive-wait-k:rho=0", "rho must be in (0, 1] (got 0.0)"),
    ("adaptive-wait-k:rho=1.5", "rho must be in (0, 1]"),
    ("adaptive-wait-k:rho=nan", "rho must be in (0, 1] (got nan)"),
    ("adaptive-wait-k:d=-0.1", "d must be >= 0 (got -0.1)"),
    ("adaptive-wait-k:k_min=0", "k_min must be >= 1 (got 0)"),
    ("adaptive-wait-k:k_min=4,k_max=3", "k_max must be >= k_min=4 (got 3)"),
])
def test_bad_adaptive_specs(spec: str, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        load_policy(spec)
    assert message in str(err.value)


adaptive = st.one_of(
    st.builds(Confidence, threshold=st.floats(0.01, 0.99), k_min=st.integers(1, 4)),
    st.builds(WaitIfDiff, k_min=st.integers(1, 4)),
    st.builds(WaitIfWorse, k_min=st.integers(1, 4)),
    st.builds(AdaptiveWaitK, rho=st.floats(0.01, 1.0), d=st.floats(0.0, 0.5),
              k_min=st.integers(1, 3), k_max=st.integers(3, 6)),
)


@settings(max_examples=150, deadline=None)
@given(policy=adaptive, seed=st.integers(0, 2**31 - 1), read=st.integers(0, 8),
       written=st.integers(0, 8), available=st.integers(0, 3), vocab=st.integers(2, 50))
def test_adaptive_invariants(policy: Policy, seed: int, read: int, written: int,
                             available: int, vocab: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    now = torch.log_softmax(torch.randn(vocab, generator=gen) * 3, dim=0)  # (V,)
    ahead = torch.log_softmax(torch.randn(vocab, generator=gen) * 3, dim=0)  # (V,)
    k_min = policy.k_min
    o = obs(read, written, available=available, now=now, ahead=ahead if available else None)
    action = policy.decide(o)
    assert policy.decide(o) is action  # pure: the same observation, the same answer
    if read < k_min:
        assert action is R
    finished = obs(read, written, finished=True, available=0, now=now)
    assert policy.decide(finished) is W
    if isinstance(policy, Confidence) and read >= k_min:
        assert (action is W) == (float(now.exp().max()) >= policy.threshold)
    if isinstance(policy, AdaptiveWaitK):
        lag = read - written
        if lag < policy.k_min:
            assert action is R  # never ahead of wait-k_min
        elif lag >= policy.k_max:
            assert action is W  # never behind wait-k_max
        else:
            assert (action is W) == (float(now.exp().max()) >= policy.threshold(lag))
            # one word more read (a higher lag) never asks for more confidence
            assert policy.threshold(lag + 1) <= policy.threshold(lag)
