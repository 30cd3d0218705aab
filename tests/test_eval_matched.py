"""Matched-latency comparison against interpolated wait-k with paired bootstrap significance."""

from __future__ import annotations

import random

import pytest
from simulmt.eval.matched import Curve, compare_at_matched_al, interpolate
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
