"""Sweep strings and policy folder names of `simulmt eval`."""

from __future__ import annotations

import pytest
from simulmt.eval.cli import policy_dir_name
from simulmt.eval.sweep import expand_sweep


@pytest.mark.parametrize(
    ("sweep", "specs"),
    [
        ("wait-k:k=1,3,5", ["wait-k:k=1", "wait-k:k=3", "wait-k:k=5"]),
        ("wait-k: k = 2", ["wait-k:k=2"]),
        (
            "confidence:threshold=0.5,0.9,k_min=1,2",
            [
                "confidence:threshold=0.5,k_min=1",
                "confidence:threshold=0.5,k_min=2",
                "confidence:threshold=0.9,k_min=1",
                "confidence:threshold=0.9,k_min=2",
            ],
        ),
        ("schedule:g=[1,2,4],[2,3]", ["schedule:g=[1,2,4]", "schedule:g=[2,3]"]),
    ],
)
def test_expand(sweep: str, specs: list[str]) -> None:
    assert expand_sweep(sweep) == specs


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ("wait-k", "expected name:key=v1"),
        ("wait-k:3,5", "before any key"),
        ("wait-k:k=1,,3", "empty item"),
        ("wait-k:k=1,k=2", "repeated key"),
        ("schedule:g=[1,2", "unclosed"),
    ],
)
def test_bad_sweeps_are_explained(sweep: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expand_sweep(sweep)


def test_policy_dir_names_are_distinct_and_safe() -> None:
    specs = expand_sweep("wait-k:k=1,3") + ["schedule:g=[1,2,4]", "full"]
    names = [policy_dir_name(s) for s in specs]
    assert names == ["wait-k_k=1", "wait-k_k=3", "schedule_g=_1_2_4", "full"]
