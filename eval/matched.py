"""Adaptive policies against wait-k at matched latency, with paired bootstrap significance.

An adaptive policy lands at some AL where no wait-k point was measured, so it is compared with
wait-k *interpolated* at its AL: the BLEU of the two wait-k runs that bracket it, weighted by
where its AL lies between theirs. Significance is sacreBLEU's paired bootstrap (Koehn 2004)
extended to that interpolation: each resample draws the same sentences for the policy and both
wait-k runs, scores the three corpora from their summed sufficient statistics, and compares the
policy with the interpolated BLEU of that resample. The AL weights stay those of the full test
set. The p-value is one-sided: the share of resamples in which the policy is *not* better,
(1 + #{Δ* ≤ 0}) / (1 + B).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sacrebleu.metrics import BLEU
from simulmt.eval.quality import SegmentStats

__all__ = [
    "Curve",
    "Difference",
    "MatchedComparison",
    "compare_at_matched_al",
    "difference_interval",
    "interpolate",
]


@dataclass(frozen=True)
class Curve:
    """One evaluated setting: its name, AL, and per-sentence BLEU statistics (same sentences,
    same order, for every setting compared)."""

    name: str
    al: float
    stats: Sequence[SegmentStats]


@dataclass(frozen=True)
class MatchedComparison:
    policy: str
    al: float
    bleu: float
    baseline_bleu: float  # wait-k BLEU interpolated at the policy's AL
    lower: str  # the bracketing wait-k settings
    upper: str
    p_value: float  # one-sided: policy not better than interpolated wait-k

    @property
    def delta(self) -> float:
        return self.bleu - self.baseline_bleu


def interpolate(curve: Sequence[tuple[float, float]], al: float) -> tuple[int, float] | None:
    """(index of the lower bracketing point, weight of the upper one) for `al` on a curve of
    (AL, BLEU) points sorted by AL; None outside the measured range."""
    for i, ((a0, _), (a1, _)) in enumerate(zip(curve, curve[1:], strict=False)):
        if a0 <= al <= a1:
            return i, 0.0 if a1 == a0 else (al - a0) / (a1 - a0)
    return None


def _bleu_of_sums(metric: BLEU, sums: np.ndarray) -> np.ndarray:
    """BLEU for each row of summed statistics: (R, 2 + 2 * max_ngram_order) → (R,)."""
    return np.array([metric._compute_score_from_stats(list(row)).score for row in sums])


def compare_at_matched_al(policy: Curve, baseline: Sequence[Curve], *, samples: int = 1000,
                          seed: int = 12345) -> MatchedComparison | None:
    """The policy against the baseline curve interpolated at its AL (None if its AL lies outside
    the baseline's measured range)."""
    points = sorted(baseline, key=lambda c: c.al)
    metric = BLEU()
    arrays = [np.array([s.bleu for s in c.stats], dtype=np.int64) for c in (policy, *points)]
    n = len(arrays[0])
    if any(len(a) != n for a in arrays) or n == 0:
        raise ValueError("every compared setting must score the same, non-empty set of sentences")
    full = [float(_bleu_of_sums(metric, a.sum(axis=0, keepdims=True))[0]) for a in arrays]
    where = interpolate([(c.al, b) for c, b in zip(points, full[1:], strict=True)], policy.al)
    if where is None:
        return None
    i, w = where
    lo, hi = arrays[1 + i], arrays[2 + i]
    base = (1 - w) * full[1 + i] + w * full[2 + i]
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(samples, n))  # (B, N) sentence indices per resample
    deltas = (_bleu_of_sums(metric, arrays[0][draws].sum(axis=1))
              - (1 - w) * _bleu_of_sums(metric, lo[draws].sum(axis=1))
              - w * _bleu_of_sums(metric, hi[draws].sum(axis=1)))  # (B,)
    p_value = (1 + int((deltas <= 0).sum())) / (1 + samples)
    return MatchedComparison(policy.name, policy.al, full[0], base, points[i].name,
                             points[i + 1].name, p_value)


@dataclass(frozen=True)
class Difference:
    """BLEU(a) - BLEU(b) on one set of sentences, with its paired-bootstrap spread."""

    delta: float
    low: float  # the (1 - level) / 2 quantile of the resampled differences
    high: float  # the (1 + level) / 2 quantile
    at_most: float  # the share of resamples whose difference is <= `threshold`
    threshold: float


def difference_interval(a: Sequence[SegmentStats], b: Sequence[SegmentStats], *,
                        level: float = 0.95, threshold: float = 0.0, samples: int = 1000,
                        seed: int = 12345) -> Difference:
    """How finely a test set measures the BLEU difference of two runs over its sentences (e.g.
    the written and the recognizer view of one model): each resample draws the same sentences
    for both runs and scores each from its summed statistics (Koehn 2004)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if len(a) != len(b) or not a:
        raise ValueError("both runs must score the same, non-empty set of sentences")
    metric = BLEU()
    sa = np.array([s.bleu for s in a], dtype=np.int64)  # (N, stats)
    sb = np.array([s.bleu for s in b], dtype=np.int64)
    delta = float(_bleu_of_sums(metric, sa.sum(axis=0, keepdims=True))[0]
                  - _bleu_of_sums(metric, sb.sum(axis=0, keepdims=True))[0])
    draws = np.random.default_rng(seed).integers(0, len(a), size=(samples, len(a)))  # (B, N)
    deltas = (_bleu_of_sums(metric, sa[draws].sum(axis=1))
              - _bleu_of_sums(metric, sb[draws].sum(axis=1)))  # (B,)
    low, high = np.quantile(deltas, [(1 - level) / 2, (1 + level) / 2])
    return Difference(delta, float(low), float(high), float((deltas <= threshold).mean()),
                      threshold)
