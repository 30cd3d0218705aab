"""AlignAtt (#19): the rule on hand-made attention, the per-word attention signal, and the
policy run by the search on the tiny model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.policies.attention import AlignAtt
from simulmt.policies.base import Action, ModelSignals, Observation, PolicyError, Signal
from simulmt.policies.registry import describe, load_policy

from simulmt.engine import Engine
from simulmt.search.options import SearchOptions, WriteUnit
from simulmt.search.signals import word_attention
from simulmt.session import Session

ENGINE = Engine.tiny(0)
TEXT = "Er hat das Fenster geöffnet , weil es warm war ."


def obs(attn: list[float], *, written: int = 0, finished: bool = False) -> Observation:
    signals = ModelSignals(attention=torch.tensor(attn))
    return Observation(len(attn), written, finished, signals=signals)


# ---- the spec ------------------------------------------------------------------------
def test_spec_round_trips_and_is_documented_with_its_paper() -> None:
    policy = load_policy("alignatt:f=3")
    assert policy == AlignAtt(f=3)
    assert load_policy(policy.spec()) == policy
    assert policy.spec() == "alignatt:f=3,k_min=1,lag_min=1"
    assert Signal.ATTENTION in policy.needs
    assert "Papi" in describe("alignatt")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("alignatt:f=-1", "f must be >= 0"),
        ("alignatt:f=two", "bad value for f"),
        ("alignatt:f=1.5", "bad value for f"),
        ("alignatt:k_min=0", "k_min must be >= 1"),
        ("alignatt:lag_min=-2", "lag_min must be >= 0"),
        ("alignatt:g=2", "unknown argument 'g'"),
    ],
)
def test_bad_specs_say_what_is_accepted(spec: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message) as err:
        load_policy(spec)
    assert "accepts" in str(err.value)


# ---- the rule ------------------------------------------------------------------------
def test_reads_when_the_next_word_attends_to_the_last_f_words() -> None:
    p = AlignAtt(f=2, lag_min=0)
    assert p.decide(obs([0.1, 0.2, 0.6, 0.1])) is Action.READ  # word 3 of 4: in the last 2
    assert p.decide(obs([0.1, 0.6, 0.2, 0.1])) is Action.WRITE  # word 2: before them
    assert AlignAtt(f=3, lag_min=0).decide(obs([0.1, 0.6, 0.2, 0.1])) is Action.READ
    assert p.decide(obs([0.1, 0.2, 0.6, 0.1], finished=True)) is Action.WRITE


def test_lag_min_keeps_it_behind_wait_lag_min() -> None:
    attn = [0.9, 0.05, 0.05]  # aligned far back: the rule alone would write
    assert AlignAtt(f=1, lag_min=0).decide(obs(attn, written=5)) is Action.WRITE
    assert AlignAtt(f=1, lag_min=1).decide(obs(attn, written=3)) is Action.READ
    assert AlignAtt(f=1, lag_min=1).decide(obs(attn, written=2)) is Action.WRITE


def test_missing_or_misshaped_attention_is_a_policy_error() -> None:
    with pytest.raises(PolicyError, match="needs Signal.ATTENTION"):
        AlignAtt(f=1).decide(Observation(3, 0, False))
    bad = Observation(3, 0, False, signals=ModelSignals(attention=torch.ones(2)))
    with pytest.raises(PolicyError, match="shape"):
        AlignAtt(f=1).decide(bad)


ATTENTIONS = st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(ATTENTIONS, st.integers(0, 12), st.integers(0, 12), st.integers(0, 2))
def test_a_larger_f_never_writes_where_a_smaller_one_reads(
    attn: list[float], f: int, written: int, lag_min: int
) -> None:
    o = obs(attn, written=written)
    small, large = AlignAtt(f=f, lag_min=lag_min), AlignAtt(f=f + 1, lag_min=lag_min)
    if small.decide(o) is Action.READ:
        assert large.decide(o) is Action.READ
    if f >= len(attn):  # every word read is among the last f: it waits for the end
        assert small.decide(o) is Action.READ
    assert AlignAtt(f=0, lag_min=0).decide(o) is Action.WRITE


# ---- the signal ----------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=8), st.data())
def test_word_attention_sums_each_words_tokens(lengths: list[int], data: st.DataObject) -> None:
    ends = torch.tensor(lengths).cumsum(0).tolist()
    words = data.draw(st.integers(1, len(lengths)))
    visible = ends[words - 1]
    attn = torch.zeros(ends[-1] + 3)  # (S,) with padding past the last word
    attn[:visible] = torch.softmax(torch.randn(visible), dim=0)
    got = word_attention(attn, ends, words)  # (W,)
    starts = [0, *ends[:-1]]
    want = [float(attn[starts[w] : ends[w]].sum()) for w in range(words)]
    assert got.shape == (words,)
    assert torch.allclose(got, torch.tensor(want), atol=1e-6)
    assert float(got.sum()) == pytest.approx(1.0, abs=1e-5)


# ---- in the search -------------------------------------------------------------------
def run(policy: object, opts: SearchOptions, cuts: int = 1) -> tuple[str, list[int]]:
    session = Session(ENGINE, policy=policy, options=opts, tentative=False)  # type: ignore[arg-type]
    words, ups = TEXT.split(), []
    for i in range(0, len(words), cuts):
        ups += session.push(" ".join(words[i : i + cuts]))
    ups += session.finish()
    finals = [u for u in ups if u.final]
    return " ".join(u.text for u in finals), [d for u in ups for d in u.delays]


@dataclass(frozen=True)
class _Spy(AlignAtt):
    """AlignAtt that records what it was shown (a test double: not pure)."""

    name: ClassVar[str] = "alignatt-spy"
    seen: list[Observation] = field(default_factory=list, compare=False)

    def decide(self, obs: Observation) -> Action:
        self.seen.append(obs)
        return super().decide(obs)


OPTS = [SearchOptions(), SearchOptions(beam=3), SearchOptions(unit=WriteUnit.TOKEN),
        SearchOptions(beam=2, beta=0.2)]


@pytest.mark.parametrize("opts", OPTS)
def test_the_search_shows_a_distribution_over_the_words_read(opts: SearchOptions) -> None:
    spy = _Spy(f=1)
    run(spy, opts)
    shown = [o for o in spy.seen if o.src_read >= 1 and not o.source_finished]
    assert shown
    for o in shown:
        assert o.signals is not None and o.signals.attention is not None
        assert o.signals.attention.shape == (o.src_read,)
        assert float(o.signals.attention.sum()) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("opts", OPTS[:3])
def test_f0_is_wait_lag_min_and_a_huge_f_is_the_full_sentence(opts: SearchOptions) -> None:
    assert run("alignatt:f=0", opts) == run("wait-k:k=1", opts)
    assert run("alignatt:f=0,lag_min=2", opts) == run("wait-k:k=2", opts)
    text, delays = run("alignatt:f=100,lag_min=0", opts)
    assert (text, delays) == run("full", opts)
    assert set(delays) == {len(TEXT.split())}
