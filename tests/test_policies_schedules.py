"""Schedule policies: g(i) tables, decisions, delays of a simulated stream, monotonicity."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.policies import (
    Action,
    FixedSchedule,
    Observation,
    PolicyError,
    SchedulePolicy,
    load_policy,
)
from simulmt.policies.schedules import FullSentence, Schedule, WaitK

R, W = Action.READ, Action.WRITE


def simulate(policy: FixedSchedule, src_len: int, tgt_len: int) -> list[int]:
    """Run READ/WRITE decisions over a fully available sentence; return each token's delay."""
    read, delays = 0, list[int]()
    while len(delays) < tgt_len:
        obs = Observation(src_read=read, tgt_written=len(delays),
                          source_finished=read == src_len, src_available=src_len - read)
        if policy.decide(obs) is R:
            assert read < src_len, "READ after the source was finished"
            read += 1
        else:
            delays.append(read)
    return delays


@pytest.mark.parametrize(("spec", "expected"), [
    ("wait-k:k=1", [1, 2, 3, 4, 5, 6, 7, 8]),
    ("wait-k:k=3", [3, 4, 5, 6, 7, 8, 9, 10]),
    # STACL catch-up, c = 0.25: g(i) = k + i - 1 - floor(i/4)
    ("wait-k:k=2,r=1.25", [2, 3, 4, 4, 5, 6, 7, 7]),
    # c = 0.5: every second token is written without reading
    ("wait-k:k=1,r=1.5", [1, 1, 2, 2, 3, 3, 4, 4]),
    # c = 1/10: the first catch-up comes at i = 10
    ("wait-k:k=1,r=1.1", [1, 2, 3, 4, 5, 6, 7, 8]),
    ("schedule:g=[1,2,4,4,6]", [1, 2, 4, 4, 6, 7, 8, 9]),  # continues with step 1
    ("schedule:g=[2]", [2, 3, 4, 5, 6, 7, 8, 9]),
    ("schedule:g=operator:pos", [1, 2, 3, 4, 5, 6, 7, 8]),  # a callable i -> i
])
def test_g_table(spec: str, expected: list[int]) -> None:
    policy = load_policy(spec)
    assert isinstance(policy, FixedSchedule)
    assert [policy.g(i) for i in range(1, 9)] == expected


def test_catchup_uses_decimal_arithmetic() -> None:
    # in binary 1.7 is 1.69999…, so a float c*i would give floor(6.99…) = 6 at i = 10
    assert WaitK(k=1, r=1.7).g(10) == 1 + 9 - 7


def test_full_sentence_g_is_infinite() -> None:
    assert FullSentence().g(1) == math.inf
    assert FullSentence().g_bounded(5, src_len=7) == 7
    assert isinstance(FullSentence().g_bounded(5, src_len=7), int)


@pytest.mark.parametrize(("policy", "obs", "action"), [
    # (src_read, tgt_written, source_finished, src_available)
    (WaitK(k=2), (0, 0, False, 3), R),
    (WaitK(k=2), (1, 0, False, 3), R),
    (WaitK(k=2), (2, 0, False, 3), W),
    (WaitK(k=2), (2, 1, False, 3), R),
    (WaitK(k=2), (3, 1, False, 0), W),
    (WaitK(k=2), (2, 1, False, 0), R),  # READ with nothing available: wait for the speaker
    (WaitK(k=5), (2, 0, True, 0), W),  # a 2-word sentence: write the rest once finished
    (FullSentence(), (9, 0, False, 1), R),
    (FullSentence(), (10, 0, True, 0), W),
    (FullSentence(), (10, 30, True, 0), W),
    (Schedule(values=(1, 3)), (1, 0, False, 4), W),
    (Schedule(values=(1, 3)), (1, 1, False, 4), R),
    (Schedule(values=(1, 3)), (3, 1, False, 4), W),
    (Schedule(values=(1, 3)), (3, 2, False, 4), R),  # g(3) = 4 by continuation
])
def test_decision_table(policy: FixedSchedule, obs: tuple[int, int, bool, int],
                        action: Action) -> None:
    read, written, finished, available = obs
    assert policy.decide(Observation(read, written, finished, available)) is action


@pytest.mark.parametrize(("policy", "src_len", "tgt_len", "delays"), [
    (WaitK(k=3), 5, 7, [3, 4, 5, 5, 5, 5, 5]),
    (WaitK(k=1), 3, 2, [1, 2]),
    (WaitK(k=9), 4, 3, [4, 4, 4]),
    (FullSentence(), 4, 3, [4, 4, 4]),
    (Schedule(values=(2, 2, 5)), 6, 5, [2, 2, 5, 6, 6]),
    (WaitK(k=2, r=1.5), 4, 8, [2, 2, 3, 3, 4, 4, 4, 4]),
])
def test_simulated_delays(policy: FixedSchedule, src_len: int, tgt_len: int,
                          delays: list[int]) -> None:
    assert simulate(policy, src_len, tgt_len) == delays


def _write_module(tmp_path: Path, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))


def test_callable_schedule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    _write_module(tmp_path, "sched_ok_7f", """
        def twice(i):
            return 2 * i
        class Holder:
            @staticmethod
            def plus_one(i):
                return i + 1
    """)
    policy = load_policy("schedule:g=sched_ok_7f:twice")
    assert [policy.g(i) for i in (1, 2, 300)] == [2, 4, 600]
    assert policy.spec() == "schedule:g=sched_ok_7f:twice"
    nested = load_policy("schedule:g=sched_ok_7f:Holder.plus_one")
    assert nested.decide(Observation(1, 0, False, 1)) is R  # g(1) = 2
    assert nested.decide(Observation(2, 0, False, 1)) is W


@pytest.mark.parametrize(("body", "message"), [
    ("def g(i):\n    return [1, 3, 2][i - 1] if i <= 3 else i\n",
     "g(3) = 2 < g(2) = 3: a schedule must be non-decreasing (first violation at i=3)"),
    ("def g(i):\n    return i - 1\n", "g(1) = 0 < 1"),
    ("def g(i):\n    return i / 2\n", "g(1) = 0.5 is not an integer"),
    ("def g(i):\n    raise KeyError(i)\n", "failed at i=1 (KeyError: 1)"),
    ("g = 3\n", "int object is not callable"),
])
def test_bad_callable_schedule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str,
                               message: str) -> None:
    name = f"sched_bad_{abs(hash(body)) % 10**8}"
    monkeypatch.syspath_prepend(str(tmp_path))
    _write_module(tmp_path, name, body)
    with pytest.raises(PolicyError, match="accepts: g: list") as err:
        load_policy(f"schedule:g={name}:g")
    assert message in str(err.value)


def test_callable_checked_past_validated_prefix(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    _write_module(tmp_path, "sched_late_7f", "def g(i):\n    return 1 if i == 300 else i\n")
    policy = load_policy("schedule:g=sched_late_7f:g")  # i = 1..256 are fine
    with pytest.raises(PolicyError, match=r"g\(300\) = 1 < g\(299\) = 299"):
        policy.decide(Observation(5, 299, False, 1))


@pytest.mark.parametrize(("spec", "message"), [
    ("schedule:g=[1,3,2]", "first violation at i=3"),
    ("schedule:g=[0,1]", "g(1) = 0 < 1"),
    ("schedule:g=[]", "at least one value"),
    ("schedule:g=[1,x]", "expected an integer, got 'x'"),
    ("schedule:g=no_such_module_7f:g", "No module named 'no_such_module_7f'"),
    ("schedule:g=math:no_such_fn", "AttributeError"),
    ("schedule:g=5", "expected a list like [1,2,4] or module:function"),
    ("wait-k:k=0", "k must be >= 1 (got 0)"),
    ("wait-k:r=0.8", "r must be in [1, 2) (got 0.8)"),
    ("wait-k:r=2", "r must be in [1, 2)"),
])
def test_bad_schedule_specs(spec: str, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        load_policy(spec)
    assert message in str(err.value)


def test_g_rejects_position_zero() -> None:
    for policy in (WaitK(), FullSentence(), Schedule(values=(1,))):
        with pytest.raises(PolicyError, match="i >= 1"):
            policy.g(0)


def test_negative_observation_rejected() -> None:
    with pytest.raises(PolicyError, match="must be >= 0"):
        WaitK().decide(Observation(src_read=-1, tgt_written=0, source_finished=False))


def test_schedules_follow_the_protocol() -> None:
    """What `SchedulePolicy` promises: decide is source finished → WRITE, src_read < g(i) →
    READ, else WRITE (i = tgt_written + 1); and the spec string loads the same policy back."""
    for policy in (WaitK(k=2, r=1.5), FullSentence(), Schedule(values=(1, 3, 4))):
        assert isinstance(policy, SchedulePolicy)
        assert load_policy(policy.spec()) == policy
        for read in range(8):
            for written in range(6):
                for finished in (False, True):
                    obs = Observation(src_read=read, tgt_written=written,
                                      source_finished=finished, src_available=1)
                    expected = W if finished or read >= policy.g(written + 1) else R
                    assert policy.decide(obs) is expected, (policy, obs)


schedules = st.one_of(
    st.builds(WaitK, k=st.integers(1, 12),
              r=st.sampled_from([1.0, 1.1, 1.2, 1.25, 1.3, 1.5, 1.75, 1.99])),
    st.just(FullSentence()),
    st.lists(st.integers(0, 3), min_size=1, max_size=12).map(
        lambda steps: Schedule(values=tuple(1 + sum(steps[: n + 1]) for n in range(len(steps))))
    ),
)


@settings(max_examples=200, deadline=None)
@given(policy=schedules, j=st.integers(0, 40), i=st.integers(1, 40), avail=st.integers(0, 5))
def test_monotone_in_source(policy: FixedSchedule, j: int, i: int, avail: int) -> None:
    """A WRITE at (j, i) stays a WRITE with one more source word read."""
    if policy.decide(Observation(j, i - 1, False, avail)) is W:
        assert policy.decide(Observation(j + 1, i - 1, False, avail)) is W
    assert policy.decide(Observation(j, i - 1, True, 0)) is W  # finished: always WRITE


@settings(max_examples=200, deadline=None)
@given(policy=schedules, i=st.integers(1, 200))
def test_g_non_decreasing_and_positive(policy: FixedSchedule, i: int) -> None:
    assert 1 <= policy.g(i) <= policy.g(i + 1)


@settings(max_examples=100, deadline=None)
@given(policy=schedules, src_len=st.integers(1, 15), tgt_len=st.integers(1, 20))
def test_delays_equal_bounded_schedule(policy: FixedSchedule, src_len: int, tgt_len: int) -> None:
    """Deciding step by step yields delay min(|x|, g(i)) for token i: the policy is g."""
    expected = [policy.g_bounded(i, src_len) for i in range(1, tgt_len + 1)]
    assert simulate(policy, src_len, tgt_len) == expected
