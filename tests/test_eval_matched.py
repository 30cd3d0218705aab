"""Matched-latency comparison against interpolated wait-k with paired bootstrap significance."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.eval.matched import Curve, compare_at_matched_al, difference_interval, interpolate
from simulmt.eval.quality import corpus_quality, segment_statistics

WORDS = "the cat sat on a mat and dog ran far away from home today".split()


def _corpus(seed: int, n: int = 60) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))) for _ in range(n)]


def _degrade(lines: list[str], keep: float, seed: int) -> list[str]:
    """Each word kept with probability `keep`, else replaced by a word not in the vocabulary."""
    rng = random.Random(seed)
    return [" ".join(w if rng.random() < keep else "zzz" for w in line.split()) for line in lines]


def _curve(name: str, al: float, hyps: list[str], refs: list[str]) -> Curve:
    return Curve(name, al, segment_statistics(hyps, refs))


def test_interpolation_brackets() -> None:
    curve = [(2.0, 10.0), (4.0, 20.0), (6.0, 22.0)]
    assert interpolate(curve, 3.0) == (0, 0.5)
    assert interpolate(curve, 5.5) == (1, 0.75)
    assert interpolate(curve, 1.0) is None and interpolate(curve, 6.5) is None


def test_better_policy_is_significant_and_equal_one_is_not() -> None:
    refs = _corpus(1)
    low, high = _degrade(refs, 0.4, 2), _degrade(refs, 0.6, 3)
    waitk = [_curve("wait-k:k=1", 2.0, low, refs), _curve("wait-k:k=3", 4.0, high, refs)]
    good = compare_at_matched_al(_curve("good", 3.0, _degrade(refs, 0.9, 4), refs), waitk,
                                 samples=200)
    assert good is not None
    expected = 0.5 * corpus_quality(low, refs).bleu + 0.5 * corpus_quality(high, refs).bleu
    assert good.baseline_bleu == pytest.approx(expected)
    assert good.bleu == pytest.approx(corpus_quality(_degrade(refs, 0.9, 4), refs).bleu)
    assert good.delta > 10 and good.p_value < 0.01
    assert (good.lower, good.upper) == ("wait-k:k=1", "wait-k:k=3")
    same = compare_at_matched_al(_curve("same", 4.0, high, refs), waitk, samples=200)
    assert same is not None and same.delta == pytest.approx(0.0) and same.p_value > 0.5
    assert compare_at_matched_al(_curve("far", 9.0, high, refs), waitk) is None


def test_mismatched_sentence_sets_are_refused() -> None:
    refs = _corpus(1)
    waitk = [_curve("a", 1.0, refs, refs), _curve("b", 2.0, refs, refs)]
    with pytest.raises(ValueError, match="same, non-empty set of sentences"):
        compare_at_matched_al(_curve("p", 1.5, refs[:10], refs[:10]), waitk)


def test_difference_interval_of_a_run_and_a_worse_one() -> None:
    refs = _corpus(1)
    good, bad = (segment_statistics(_degrade(refs, keep, 2), refs) for keep in (0.9, 0.5))
    d = difference_interval(good, bad, threshold=0.0)
    scores = [corpus_quality(_degrade(refs, keep, 2), refs).bleu for keep in (0.9, 0.5)]
    assert d.delta == pytest.approx(scores[0] - scores[1])
    assert 0 < d.low < d.delta < d.high and d.at_most == 0.0
    same = difference_interval(good, good, threshold=0.0)
    assert (same.delta, same.low, same.high, same.at_most) == (0.0, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="same, non-empty"):
        difference_interval(good, bad[:-1])
    with pytest.raises(ValueError, match="level"):
        difference_interval(good, bad, level=1.0)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 1000), keep_a=st.floats(0.3, 1.0), keep_b=st.floats(0.3, 1.0))
def test_difference_interval_is_antisymmetric_and_holds_its_estimate(
    seed: int, keep_a: float, keep_b: float
) -> None:
    """Swapping the runs negates the difference and mirrors the interval (the same sentences
    are drawn); the interval is ordered."""
    refs = _corpus(seed, n=30)
    a = segment_statistics(_degrade(refs, keep_a, seed + 1), refs)
    b = segment_statistics(_degrade(refs, keep_b, seed + 2), refs)
    ab, ba = difference_interval(a, b, samples=200), difference_interval(b, a, samples=200)
    assert ab.delta == pytest.approx(-ba.delta)
    assert ab.low == pytest.approx(-ba.high) and ab.high == pytest.approx(-ba.low)
    assert ab.low <= ab.high


def test_bleu_gap_script_reads_two_runs(tmp_path: Path) -> None:
    refs = _corpus(3, n=20)
    (tmp_path / "ref").write_text("\n".join(refs) + "\n", encoding="utf-8")
    (tmp_path / "a").write_text("\n".join(refs) + "\n", encoding="utf-8")
    (tmp_path / "b").write_text("\n".join(_degrade(refs, 0.5, 4)) + "\n", encoding="utf-8")
    script = Path(__file__).resolve().parents[1] / "scripts" / "bleu_gap.py"
    out = subprocess.run(
        [sys.executable, str(script), "--reference", str(tmp_path / "ref"), str(tmp_path / "a"),
         str(tmp_path / "b"), "--threshold", "100", "--samples", "50"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert out.startswith("BLEU(A) - BLEU(B) = ") and "at or below 100 in 100.0% of 50" in out
