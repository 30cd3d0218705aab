"""Spec strings, the entry-point registry, error messages, and the spec round trip."""

from __future__ import annotations

import logging
import pickle
import textwrap
from collections.abc import Callable
from dataclasses import FrozenInstanceError
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.policies import (
    Policy,
    PolicyError,
    SpecPolicy,
    available,
    describe,
    load_policy,
)
from simulmt.policies.heuristic import (
    AdaptiveWaitK,
    Confidence,
    LocalAgreement,
    WaitIfDiff,
    WaitIfWorse,
)
from simulmt.policies.registry import GROUP, build_registry, info
from simulmt.policies.schedules import FullSentence, Schedule, WaitK
from simulmt.policies.spec import split_spec

BUILTINS = {
    "full": FullSentence, "wait-k": WaitK, "schedule": Schedule, "wait-if-worse": WaitIfWorse,
    "wait-if-diff": WaitIfDiff, "confidence": Confidence, "local-agreement": LocalAgreement,
    "adaptive-wait-k": AdaptiveWaitK,
}


@pytest.mark.parametrize(("spec", "name", "raw"), [
    ("full", "full", {}),
    ("  wait-k : k = 3 ", "wait-k", {"k": "3"}),
    ("wait-k:k=3,r=1.25", "wait-k", {"k": "3", "r": "1.25"}),
    ("schedule:g=[1,2,4,4,6]", "schedule", {"g": "[1,2,4,4,6]"}),
    ("schedule:g=[1, 2, 4],x=y", "schedule", {"g": "[1, 2, 4]", "x": "y"}),
    ("schedule:g=my.mod:fn", "schedule", {"g": "my.mod:fn"}),  # value holds ':'
    ("p:a=b=c", "p", {"a": "b=c"}),  # value holds '='
])
def test_split_spec(spec: str, name: str, raw: dict[str, str]) -> None:
    assert split_spec(spec) == (name, raw)


@pytest.mark.parametrize(("spec", "message"), [
    ("", "empty policy spec"),
    (":k=3", "bad policy name ''"),
    ("wait k", "bad policy name 'wait k'"),
    ("wait-k:3", "bad argument '3'"),
    ("wait-k:k=1,,r=1.0", "empty argument"),
    ("wait-k:k=1,", "empty argument"),
    ("wait-k:k=3,k=4", "argument 'k' given twice"),
    ("schedule:g=[1,2", "unclosed '['"),
    ("schedule:g=1,2]", "unbalanced ']'"),
    ("schedule:g=[[1]]", "nested brackets"),
])
def test_split_spec_errors(spec: str, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        split_spec(spec)
    assert message in str(err.value)


def test_builtins_registered() -> None:
    found = available()
    for name, cls in BUILTINS.items():
        assert found[name] is cls
        assert cls.name == name
        assert isinstance(load_policy(name if name != "schedule" else "schedule:g=[1]"),
                          SpecPolicy)
    assert list(found) == sorted(found)


@pytest.mark.parametrize(("spec", "expected"), [
    ("full", FullSentence()),
    ("wait-k", WaitK(k=3, r=1.0)),
    ("wait-k:k=5", WaitK(k=5)),
    ("wait-k:r=1.25,k=2", WaitK(k=2, r=1.25)),
    ("schedule:g=[1 2 4]", Schedule(values=(1, 2, 4))),
    ("schedule:g=[ 1 , 2 ,4 ]", Schedule(values=(1, 2, 4))),
    ("confidence:threshold=0.6", Confidence(threshold=0.6)),
    ("confidence:k_min=2,threshold=.3", Confidence(threshold=0.3, k_min=2)),
    ("wait-if-worse", WaitIfWorse(k_min=1)),
    ("wait-if-diff:k_min=3", WaitIfDiff(k_min=3)),
    ("local-agreement:n=3", LocalAgreement(n=3)),
])
def test_load_policy(spec: str, expected: Policy) -> None:
    assert load_policy(spec) == expected


@pytest.mark.parametrize(("policy", "spec"), [
    (FullSentence(), "full"),
    (WaitK(), "wait-k:k=3,r=1.0"),
    (WaitK(k=2, r=1.25), "wait-k:k=2,r=1.25"),
    (Schedule(values=(1, 2, 4)), "schedule:g=[1,2,4]"),
    (Schedule(values=[1, 2]), "schedule:g=[1,2]"),  # a list is stored as a tuple
    (Schedule(values="math:factorial"), "schedule:g=math:factorial"),
    (Confidence(threshold=0.6, k_min=2), "confidence:threshold=0.6,k_min=2"),
    (LocalAgreement(), "local-agreement:n=2,chunk=1"),
    (AdaptiveWaitK(rho=1.0, d=0.1, k_max=5), "adaptive-wait-k:rho=1.0,d=0.1,k_min=1,k_max=5"),
])
def test_canonical_spec(policy: Policy, spec: str) -> None:
    assert policy.spec() == spec
    assert str(policy) == spec
    assert load_policy(spec) == policy


def test_unknown_policy_lists_available() -> None:
    with pytest.raises(PolicyError) as err:
        load_policy("wait-j:k=3")
    message = str(err.value)
    assert "unknown policy 'wait-j'" in message and "did you mean 'wait-k'?" in message
    for name in BUILTINS:
        assert name in message


@pytest.mark.parametrize(("spec", "first"), [
    ("wait-k:kk=3", "unknown argument 'kk'"),
    ("wait-k:k=2.5", "bad value for k (int): expected an integer, got '2.5'"),
    ("wait-k:k=three", "expected an integer, got 'three'"),
    ("wait-k:k=", "expected an integer, got ''"),
    ("wait-k:k=[3]", "expected an integer, got '[3]'"),
    ("wait-k:k=0", "k must be >= 1 (got 0)"),
])
def test_bad_argument_lists_accepted_arguments(spec: str, first: str) -> None:
    with pytest.raises(PolicyError) as err:
        load_policy(spec)
    message = str(err.value)
    assert first in message
    assert "policy 'wait-k' accepts: k: int (default 3)" in message
    assert "r: float (default 1.0)" in message


def test_missing_required_argument() -> None:
    with pytest.raises(PolicyError) as err:
        load_policy("schedule")
    assert "missing required argument 'g'" in str(err.value)
    assert "g: list[int] | module:function (required)" in str(err.value)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: WaitK(k=2.5), "k must be an int, got 2.5"),
    (lambda: WaitK(k=True), "k must be an int, got True"),
    (lambda: WaitK(r="1.5"), "r must be a float"),
    (lambda: Confidence(threshold=None), "threshold must be a float"),
    (lambda: Schedule(values=(1, "2")), "is not an integer"),
    (lambda: Schedule(values="nonsense"), "must be a list of ints or 'module:function'"),
])
def test_python_construction_is_checked(make: Callable[[], object], message: str) -> None:
    with pytest.raises(PolicyError) as err:
        make()
    assert message in str(err.value)


def test_python_construction_normalises() -> None:
    policy = WaitK(k=2, r=1)
    assert isinstance(policy.r, float) and policy.spec() == "wait-k:k=2,r=1.0"


def test_policies_are_frozen_hashable_picklable() -> None:
    policies = [load_policy(s) for s in ("wait-k:k=2", "schedule:g=[1,3]", "confidence",
                                         "schedule:g=math:factorial")]
    assert len(set(policies)) == 4
    for policy in policies:
        assert pickle.loads(pickle.dumps(policy)) == policy
    with pytest.raises(FrozenInstanceError):
        policies[0].k = 4


def test_describe_and_info() -> None:
    text = describe("wait-k")
    assert text.startswith("wait-k — Read k words")
    assert "k: int (default 3)" in text and "commit mode: simultaneous" in text
    assert "(no arguments)" in describe("full")
    assert "signals: distribution, peek" in describe("wait-if-worse")
    assert "signals: decoder_state, distribution (+ attention with a checkpoint trained on " \
        "attention features)" in describe("learned")  # the instance adds it
    data = info("schedule")
    assert data["arguments"] == [{
        "name": "g", "type": "list[int] | module:function", "required": True, "default": None,
        "default_text": None, "help": data["arguments"][0]["help"]}]
    assert info("confidence")["needs"] == ["distribution"]
    assert info("local-agreement")["mode"] == "retranslation"
    with pytest.raises(PolicyError, match="unknown policy 'nope'"):
        describe("nope")


def _ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=GROUP)


def test_broken_plugins_are_skipped_with_a_warning(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "nospec_plugin_7f.py").write_text(textwrap.dedent("""
        from simulmt.policies import Action, CommitMode

        class NoSpec:
            name = "no-spec"
            needs = frozenset()
            mode = CommitMode.SIMULTANEOUS
            def decide(self, obs):
                return Action.WRITE
    """))
    eps = [
        _ep("no-spec", "nospec_plugin_7f:NoSpec"),
        _ep("wait-k", "simulmt.policies.schedules:WaitK"),
        _ep("missing-module", "no_such_pkg_7f.mod:Policy"),
        _ep("missing-attr", "simulmt.policies.schedules:NoSuchClass"),
        _ep("not-a-class", "simulmt.policies.schedules:CALLABLE_RE"),
        _ep("misnamed", "simulmt.policies.schedules:FullSentence"),  # its name is 'full'
        _ep("confidence", "simulmt.policies.heuristic:Confidence"),
    ]
    with caplog.at_level(logging.WARNING, logger="simulmt.policies.registry"):
        registry = build_registry(eps)
    assert list(registry.policies) == ["confidence", "wait-k"]
    assert set(registry.failures) == {"missing-module", "missing-attr", "not-a-class", "misnamed",
                                      "no-spec"}
    assert "no spec() method" in registry.failures["no-spec"]
    assert "ModuleNotFoundError" in registry.failures["missing-module"]
    assert "AttributeError" in registry.failures["missing-attr"]
    assert "not a class" in registry.failures["not-a-class"]
    assert "name is 'full', not 'misnamed'" in registry.failures["misnamed"]
    assert sum("skipped" in r.getMessage() for r in caplog.records) == 5


def test_builtin_wins_a_name_clash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "clash_plugin_7f.py").write_text(textwrap.dedent("""
        from dataclasses import dataclass
        from typing import ClassVar
        from simulmt.policies import FixedSchedule

        @dataclass(frozen=True)
        class Impostor(FixedSchedule):
            \"\"\"Claims the built-in name.\"\"\"
            name: ClassVar[str] = "wait-k"
            def g(self, i: int) -> float:
                return 1
    """))
    builtin = _ep("wait-k", "simulmt.policies.schedules:WaitK")
    other = _ep("wait-k", "clash_plugin_7f:Impostor")
    with caplog.at_level(logging.WARNING, logger="simulmt.policies.registry"):
        assert build_registry([builtin, other]).policies["wait-k"] is WaitK
        assert build_registry([other, builtin]).policies["wait-k"] is WaitK
    messages = [r.getMessage() for r in caplog.records]
    assert any("the built-in simulmt.policies.schedules:WaitK wins" in m for m in messages)
    assert any("registered twice" in m for m in messages)


def test_learned_policy_is_listed() -> None:
    assert "learned" in available(refresh=True)


def test_a_broken_plugin_is_named_as_unusable_not_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Asking for a plugin that failed to load says why, instead of 'unknown policy'."""
    from simulmt.policies import registry as reg

    broken = reg.build_registry([_ep("missing-module", "no_such_pkg_7f.mod:Policy"),
                                 _ep("wait-k", "simulmt.policies.schedules:WaitK")])
    monkeypatch.setattr(reg, "_registry", lambda: broken)
    with pytest.raises(PolicyError, match="registered but unusable: .*ModuleNotFoundError"):
        load_policy("missing-module")


policies = st.one_of(
    st.just(FullSentence()),
    st.builds(WaitK, k=st.integers(1, 1000), r=st.floats(1.0, 1.999)),
    st.builds(Schedule, values=st.lists(st.integers(1, 50), min_size=1, max_size=20).map(
        lambda v: tuple(sorted(v)))),
    st.builds(Confidence, threshold=st.floats(1e-6, 1 - 1e-6), k_min=st.integers(1, 9)),
    st.builds(WaitIfDiff, k_min=st.integers(1, 9)),
    st.builds(WaitIfWorse, k_min=st.integers(1, 9)),
    st.builds(LocalAgreement, n=st.integers(1, 9)),
    st.builds(AdaptiveWaitK, rho=st.floats(1e-6, 1.0), d=st.floats(0.0, 2.0),
              k_min=st.integers(1, 4), k_max=st.integers(4, 20)),
)


@settings(max_examples=300, deadline=None)
@given(policy=policies)
def test_spec_round_trip(policy: Policy) -> None:
    spec = policy.spec()
    again = load_policy(spec)
    assert again == policy and type(again) is type(policy)
    assert again.spec() == spec


@given(src_read=st.integers(0, 30), tgt_written=st.integers(0, 30), finished=st.booleans(),
       k_min=st.integers(1, 6), k_max=st.integers(0, 12), lag_min=st.integers(0, 6))
def test_lag_bounds_leave_the_policy_only_the_band_between_wait_lag_min_and_wait_k_max(
    src_read: int, tgt_written: int, finished: bool, k_min: int, k_max: int, lag_min: int,
) -> None:
    """Whatever the adaptive rule says, it is asked only inside the band; outside, the bound
    decides as wait-k would, and a finished source is always written out."""
    from simulmt.policies import Action, Observation, lag_bounds

    obs = Observation(src_read=src_read, tgt_written=tgt_written, source_finished=finished)
    got = lag_bounds(obs, k_min=k_min, k_max=k_max, lag_min=lag_min)
    lag = src_read - tgt_written
    if finished:
        assert got is Action.WRITE
    elif src_read < k_min:
        assert got is Action.READ
    elif k_max and lag >= k_max:
        assert got is Action.WRITE
    elif lag_min and lag < lag_min:
        assert got is Action.READ
    else:
        assert got is None and (not k_max or lag < k_max) and (not lag_min or lag >= lag_min)
