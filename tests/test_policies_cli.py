"""`simulmt policies` in a subprocess, and the third-party example plugin it must show."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from simulmt.policies import Action, FixedSchedule, Observation, PolicyError, load_policy

from simulmt.cli import main

BUILTINS = ["adaptive-wait-k", "confidence", "full", "local-agreement", "schedule", "wait-if-diff",
            "wait-if-worse", "wait-k"]
EXAMPLE = "wait-k-stride"


def simulmt(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("simulmt")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "simulmt.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def example_installed() -> None:
    if importlib.util.find_spec("simulmt_policy_example") is None:
        pytest.fail("the example plugin is not installed: run "
                    "`.venv/bin/pip install -e examples/simulmt-policy-example` "
                    "(`make setup-test` does)")


def test_policies_lists_builtins_and_example(example_installed: None) -> None:
    result = simulmt("policies")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for name in [*BUILTINS, EXAMPLE]:
        assert f"\n{name} — " in f"\n{out}", name
    assert "k: int (default 3)" in out  # wait-k
    assert "threshold: float (default 0.6)" in out
    assert "g: list[int] | module:function (required)" in out
    assert "wait-k-stride — Wait-k in chunks" in out
    assert "s: int (default 2) — tokens written (and words read) per chunk" in out


def test_policies_json(example_installed: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies", "--json"]) == 0  # in-process: the same code, no torch re-import
    data = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert set(BUILTINS) | {EXAMPLE} <= set(data)
    assert data[EXAMPLE]["class"] == "simulmt_policy_example:WaitKStride"
    assert [(a["name"], a["type"], a["default"]) for a in data[EXAMPLE]["arguments"]] == [
        ("k", "int", 2), ("s", "int", 2)]
    assert [(a["name"], a["type"], a["default"]) for a in data["wait-k"]["arguments"]] == [
        ("k", "int", 3), ("r", "float", 1.0)]
    assert data["wait-if-diff"]["needs"] == ["distribution", "peek"]
    assert "arXiv:2305.11408" in data["alignatt"]["paper"]  # AlignAtt, Papi et al. 2023
    assert "arXiv:1909.01559" in data["learned"]["paper"]  # Zheng et al. 2019
    assert data[EXAMPLE]["paper"] is None and data["confidence"]["paper"] is None


def test_policies_one_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies", "confidence"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("confidence — ")
    assert "wait-k" not in out
    assert "paper:" not in out  # a project heuristic cites nothing


def test_policies_cite_their_papers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies", "alignatt"]) == 0
    assert "  paper: Papi, Turchi & Negri 2023, AlignAtt" in capsys.readouterr().out


def test_policies_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies", "wait-q"]) == 2
    err = capsys.readouterr().err
    assert "simulmt policies: unknown policy 'wait-q'" in err
    assert "available policies: adaptive-wait-k, alignatt, confidence, full" in err


def test_example_plugin_loads_by_spec(example_installed: None) -> None:
    policy = load_policy("wait-k-stride:k=2,s=3")
    assert isinstance(policy, FixedSchedule)
    assert [policy.g(i) for i in range(1, 8)] == [2, 2, 2, 5, 5, 5, 8]
    assert policy.spec() == "wait-k-stride:k=2,s=3"
    assert policy.decide(Observation(2, 2, False, 1)) is Action.WRITE
    assert policy.decide(Observation(2, 3, False, 1)) is Action.READ
    with pytest.raises(PolicyError, match="s must be >= 1"):
        load_policy("wait-k-stride:s=0")
